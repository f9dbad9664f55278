"""The embedded broker delivers whole messages while a producer writes beside a consumer.

With kombu's own filesystem transport, a producer process writing 3000 messages of 20 kB
while this test's loop polled tore 2254 of them (the consumer read an empty file:
``JSONDecodeError``); a worker dies of the first one (2026-12-07, this 2-core machine).
"""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path
from queue import Empty
from typing import Any

from kombu import Connection

from kernelwatch.jobs.planning import fsbroker


def _connection(options: dict[str, Any]) -> Connection:
    return Connection("filesystem://", transport=fsbroker.TRANSPORT, transport_options=options)


def _produce(options: dict[str, Any], count: int) -> None:
    with _connection(options) as conn:
        for i in range(count):
            conn.default_channel._put("q", {"i": i, "pad": "x" * 20000})


def test_a_consumer_polling_beside_a_producer_process_reads_every_message_whole(
    tmp_path: Path,
) -> None:
    options = fsbroker.transport_options(tmp_path)
    count = 600
    producer = mp.get_context("spawn").Process(target=_produce, args=(options, count))
    producer.start()
    got: list[int] = []
    with _connection(options) as conn:
        channel = conn.default_channel
        deadline = time.monotonic() + 120
        while len(got) < count and time.monotonic() < deadline:
            try:
                got.append(channel._get("q")["i"])
            except Empty:
                continue
    producer.join(timeout=60)
    assert producer.exitcode == 0
    assert got == list(range(count))
    assert not list((tmp_path / "unreadable").iterdir())
    assert not list((tmp_path / "staging").iterdir()), "a staged message was left behind"


def test_a_torn_message_is_set_aside_and_the_next_one_delivered(tmp_path: Path) -> None:
    options = fsbroker.transport_options(tmp_path)
    queue = tmp_path / "queue"
    # what kombu's own _put leaves between creating a message's file and writing it
    (queue / "0_torn.q.msg").write_bytes(b"")
    (queue / "1_binary.q.msg").write_bytes(b"\xff\xfe")
    with _connection(options) as conn:
        conn.default_channel._put("q", {"whole": True})
        conn.default_channel._put("other", {"not": "this queue"})
        assert conn.default_channel._get("q") == {"whole": True}
        try:
            conn.default_channel._get("q")
            raise AssertionError("the queue should be empty")
        except Empty:
            pass
    kept = sorted(p.name for p in (tmp_path / "unreadable").iterdir())
    assert kept == ["0_torn.q.msg", "1_binary.q.msg"]
    assert [p.name.split(".", 1)[1] for p in queue.iterdir()] == ["other.msg"]
