"""``kernelwatch worker --per-gpu``: one Celery worker process per GPU, supervised.

Each visible GPU gets its own ``celery worker -c 1 --prefetch-multiplier 1``,
pinned with ``CUDA_VISIBLE_DEVICES=<uuid>`` and consuming ``gpu.<class>`` for
its own device class (a host with mixed GPUs serves several queues). Node names
are ``<prefix>-gpu<index>@<host>``, stable across restarts, so heartbeats and
``runs.worker`` name the GPU. A host without a GPU runs one ``cpu`` worker.

``--multi-gpu K`` (repeatable) adds, for each GPU class with at least K cards on
the host, one worker pinned to the first K of them
(``CUDA_VISIBLE_DEVICES=<uuid>,<uuid>,...``), named
``<prefix>-gpus<first>-<last>@<host>`` and consuming ``gpu.<class>.x<K>``: the
queue of runs whose suites need K GPUs (``[suite] gpus = K``). It shares those
cards with their per-GPU workers; card locks (``worker/cardlock.py``, taken
around each measurement) keep the two from measuring on one card at once.

The supervisor restarts a worker that exits (crash, ``kill -9``, OOM) with a
backoff of 1 s doubling to 60 s, reset after 10 minutes of uptime. SIGTERM or
SIGINT is passed once to every worker (Celery's warm shutdown: the running
measurement finishes) and the supervisor exits when they have. Workers run in
their own sessions, so a terminal's Ctrl-C reaches them once, through here, and
they get SIGTERM if the supervisor itself dies.

Systemd and Kubernetes start one worker per GPU themselves (``deploy/``); this
is for a bare GPU host started by hand or by one unit.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from kernelwatch.jobs.lifetime import die_with_parent
from kernelwatch.jobs.planning.broker import worker_argv
from kernelwatch.jobs.planning.queues import queue_for
from kernelwatch.worker import gpus
from kernelwatch.worker.sandbox import Sandbox

BACKOFF_MAX_S = 60.0
STABLE_S = 600.0


@dataclass
class WorkerSpec:
    name: str
    queues: str
    env: dict[str, str]
    argv: list[str]
    gpu: str = ""  # uuid (comma-separated uuids for a k-card worker), or "" for the cpu worker


def plan(
    found: list[gpus.Gpu],
    *,
    prefix: str = "kw",
    queues: str | None = None,
    loglevel: str = "INFO",
    host: str | None = None,
    multi: Sequence[int] = (),
) -> list[WorkerSpec]:
    """The workers this host should run: one per GPU, or one ``cpu`` worker.

    For each k in ``multi`` (k > 1), one more worker per GPU class with at least k
    cards, pinned to the first k cards of that class and consuming
    ``gpu.<class>.x<k>`` (``queues`` overrides only the per-GPU workers' queue).
    """
    host = host or socket.gethostname()
    if not found:
        return [_spec(f"{prefix}-cpu@{host}", queues or "cpu", {}, loglevel)]
    specs = [
        _spec(
            f"{prefix}-gpu{g.index}@{host}",
            queues or queue_for(g.device_class),
            {"CUDA_VISIBLE_DEVICES": g.uuid, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
            loglevel,
            gpu=g.uuid,
        )
        for g in found
    ]
    by_class: dict[str, list[gpus.Gpu]] = {}
    for g in found:
        by_class.setdefault(g.device_class, []).append(g)
    for k in dict.fromkeys(multi):  # each k once, in the order given
        if k < 2:
            raise ValueError(f"--multi-gpu takes 2 or more cards, not {k}")
        for cls, cards in by_class.items():
            if len(cards) < k:
                continue
            chosen = cards[:k]
            uuids = ",".join(g.uuid for g in chosen)
            specs.append(
                _spec(
                    f"{prefix}-gpus{chosen[0].index}-{chosen[-1].index}@{host}",
                    queue_for(cls, k),
                    {"CUDA_VISIBLE_DEVICES": uuids, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
                    loglevel,
                    gpu=uuids,
                )
            )
    return specs


def _spec(name: str, queues: str, env: dict[str, str], loglevel: str, gpu: str = "") -> WorkerSpec:
    # One task at a time, prefetch 1. Heartbeats and cancellation go through the
    # database: gossip and mingle would only cost two Redis connections per GPU.
    argv = worker_argv(queues, concurrency=1, name=name, loglevel=loglevel)
    argv += ["--without-gossip", "--without-mingle"]
    return WorkerSpec(name=name, queues=queues, env=env, argv=argv, gpu=gpu)


_die_with_parent = die_with_parent(signal.SIGTERM)


@dataclass
class _Child:
    spec: WorkerSpec
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    backoff: float = 1.0
    next_start: float = 0.0
    restarts: int = 0
    exits: list[int] = field(default_factory=list)


class Supervisor:
    def __init__(self, specs: list[WorkerSpec], poll_s: float = 0.5) -> None:
        self.children = [_Child(s) for s in specs]
        self.poll_s = poll_s
        self.stopping = False

    def start(self, child: _Child) -> None:
        env = {**os.environ, **child.spec.env}
        child.proc = subprocess.Popen(
            child.spec.argv, env=env, start_new_session=True, preexec_fn=_die_with_parent
        )
        child.started = time.monotonic()
        print(f"[kernelwatch] started {child.spec.name} pid {child.proc.pid}", flush=True)

    def stop(self, signum: int = signal.SIGTERM, *_: object) -> None:
        if self.stopping:
            return
        self.stopping = True
        for child in self.children:
            if child.proc is not None and child.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.proc.send_signal(signal.SIGTERM)

    def step(self) -> bool:
        """One supervision pass; False when everything has stopped for good."""
        now = time.monotonic()
        running = False
        for child in self.children:
            proc = child.proc
            if proc is not None and proc.poll() is None:
                running = True
                continue
            if proc is not None:  # it exited
                code = proc.returncode
                child.exits.append(code)
                child.proc = None
                if self.stopping:
                    continue
                if now - child.started > STABLE_S:
                    child.backoff = 1.0
                child.next_start = now + child.backoff
                print(
                    f"[kernelwatch] {child.spec.name} exited ({code}); "
                    f"restart in {child.backoff:.0f} s",
                    flush=True,
                )
                child.backoff = min(child.backoff * 2, BACKOFF_MAX_S)
            if self.stopping:
                continue
            if now >= child.next_start:
                if child.started:
                    child.restarts += 1
                self.start(child)
            running = True
        return running

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        while self.step():
            time.sleep(self.poll_s)
        return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kernelwatch worker --per-gpu", description=__doc__)
    p.add_argument("--queues", help="override the queue (default gpu.<class> per GPU, or cpu)")
    p.add_argument("--name", default="kw", help="node name prefix")
    p.add_argument("--loglevel", default="INFO")
    p.add_argument(
        "--multi-gpu",
        type=int,
        action="append",
        default=[],
        metavar="K",
        help="also one worker per GPU class pinned to K of its cards, on gpu.<class>.xK "
        "(repeatable; K >= 2)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the workers and exit")
    args = p.parse_args(argv)
    if any(k < 2 for k in args.multi_gpu):
        p.error("--multi-gpu takes K >= 2 (one card is the per-GPU worker)")
    Sandbox.check_env_at_start(p.prog)  # before a worker per GPU starts and fails alike
    specs = plan(
        gpus.query(),
        prefix=args.name,
        queues=args.queues,
        loglevel=args.loglevel,
        multi=args.multi_gpu,
    )
    if args.dry_run:
        for s in specs:
            pin = f"CUDA_VISIBLE_DEVICES={s.gpu} " if s.gpu else ""
            print(f"{s.name}\t{s.queues}\t{pin}{' '.join(s.argv[1:])}")
        return 0
    return Supervisor(specs).run()


if __name__ == "__main__":
    raise SystemExit(main())
