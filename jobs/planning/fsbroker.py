"""The embedded broker's transport: kombu's filesystem transport, whole messages only.

kombu 5.7's filesystem ``_put`` creates a message's file in the queue folder first and
writes it after; its ``_get`` lists that folder and moves a file away without the lock
the writer holds. A consumer that polls between the two reads an empty file. On
2026-12-07 (``make test`` on the 2-core development machine) a worker died of it,
``Unrecoverable error: JSONDecodeError``, and the run's message was gone with it: the
module's runs waited 420 s for a worker that no longer existed.

Here a message is written in a staging folder beside the queue and renamed into it, so
a reader finds a whole message or none. A file that still cannot be read (one written
by stock kombu, or cut short by a full disk) is moved to the ``unreadable`` folder with
a log line, and the worker goes on with the next message.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path
from queue import Empty
from time import monotonic_ns
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.json import dumps, loads
from kombu.utils.objects import cached_property

log = logging.getLogger(__name__)

# ``broker_transport`` names this class; the URL stays ``filesystem://``
TRANSPORT = "kernelwatch.jobs.planning.fsbroker:Transport"


def transport_options(broker_dir: Path) -> dict[str, Any]:
    """The transport's folders under ``broker_dir``, created; one home for the layout."""
    queue = broker_dir / "queue"
    for folder in (queue, broker_dir / "staging", broker_dir / "taken", broker_dir / "unreadable"):
        folder.mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(queue),
        "data_folder_out": str(queue),
        "control_folder": str(broker_dir / "control"),
        "staging_folder": str(broker_dir / "staging"),
        "taken_folder": str(broker_dir / "taken"),
        "unreadable_folder": str(broker_dir / "unreadable"),
        "store_processed": False,
        "polling_interval": 0.2,
    }


class Channel(filesystem.Channel):
    """Writes a message whole (staged, then renamed) and survives one it cannot read."""

    def _folder(self, key: str, beside: str) -> Path:
        """An option's folder, or ``beside`` next to the queue folder (same file system:
        a rename, not a copy); made here once, not on every poll."""
        name = self.transport_options.get(key)
        folder = Path(name) if name else Path(self.data_folder_out).parent / beside
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    @cached_property
    def staging_folder(self) -> Path:
        return self._folder("staging_folder", "staging")

    @cached_property
    def taken_folder(self) -> Path:
        return self._folder("taken_folder", "taken")

    @cached_property
    def unreadable_folder(self) -> Path:
        return self._folder("unreadable_folder", "unreadable")

    # kombu's own classes disagree on the argument's name (message, payload)
    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:  # type: ignore[override]
        # nanoseconds, zero-padded: one producer's messages sort in the order it sent them
        # (kombu's milliseconds left those of one millisecond in the order of their uuids)
        name = f"{monotonic_ns():020d}_{uuid.uuid4()}.{queue}.msg"
        staged = self.staging_folder / name
        try:
            staged.write_bytes(dumps(message).encode())
            os.replace(staged, Path(self.data_folder_out) / name)
        except OSError as exc:
            staged.unlink(missing_ok=True)
            raise ChannelError(f"Cannot add file {name!r} to the queue folder") from exc

    def _get(self, queue: str, timeout: float | None = None) -> Any:
        wanted = f"{queue}.msg"
        taken_dir = self.taken_folder
        for name in sorted(os.listdir(self.data_folder_in)):
            if name.partition(".")[2] != wanted:
                continue
            taken = taken_dir / name
            try:
                # the rename is the claim: of two consumers, one wins, the other moves on
                os.rename(os.path.join(self.data_folder_in, name), taken)
            except OSError:
                continue
            try:
                raw = taken.read_bytes()
            except OSError as exc:
                raise ChannelError(f"Cannot read file {str(taken)!r} from the queue") from exc
            try:
                message = loads(raw.decode())
            except (UnicodeDecodeError, json.JSONDecodeError):
                self._set_aside(taken, len(raw))
                continue
            taken.unlink(missing_ok=True)
            return message
        raise Empty()

    def _set_aside(self, taken: Path, size: int) -> None:
        """Keep an unreadable message's file for a person to read; never raise for it."""
        aside = self.unreadable_folder / taken.name
        try:
            os.replace(taken, aside)
        except OSError:
            aside = taken
        log.error("broker message %s (%d bytes) is not JSON; kept at %s", taken.name, size, aside)


class Transport(filesystem.Transport):
    Channel = Channel
