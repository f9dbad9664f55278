"""The nightly timer self-test on this worker's card, run when the scheduler asks.

``kernelwatch beat`` sends one ``kernelwatch.selftest`` message per live card to the
direct queue of a worker that holds it (``jobs/planning/scheduled.py``). The worker
runs ``python -m kernelwatch.kernels.selftest`` (an A/A measurement of PyTorch's own
matmul: kernelwatch's code only, so no sandbox, but no ``KW_*`` variable either), holding
the card's lock as a measurement does, and stores the figures per card with the rule's
finding (``jobs/judging/selftest.py``): a card whose noise grew is flagged. A test that
fails (a crash, a timeout) is stored as an error row of that card, never raised: the
worker keeps serving runs.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.selftest import CardSelftest, history
from kernelwatch.jobs.judging.selftest import judge
from kernelwatch.jobs.planning.queues import local_device_class
from kernelwatch.worker import cardlock

log = logging.getLogger(__name__)


def measure(budget_s: float, timeout_s: float | None = None) -> dict[str, Any]:
    """The self-test's figures from a process of its own (CUDA state never shared)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KW_")}
    proc = subprocess.run(
        [sys.executable, "-m", "kernelwatch.kernels.selftest", "--budget", str(budget_s)],
        capture_output=True,
        text=True,
        timeout=timeout_s or budget_s * 5 + 300,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-3:] or ["no output"]
        raise RuntimeError(f"self-test exited {proc.returncode}: {' | '.join(tail)}")
    found: dict[str, Any] = json.loads(proc.stdout)
    return found


def run_selftest(
    factory: sessionmaker[Session], settings: Settings, card: str, worker: str, budget_s: float
) -> CardSelftest:
    """Measure, judge against the card's history, store; the stored row."""
    row = CardSelftest(
        card=card,
        device_class=local_device_class(),
        host=socket.gethostname(),
        worker=worker,
        kernel="",
        samples=0,
        flagged=False,
        reason="",
        error="",
        detail={},
    )
    try:
        with cardlock.hold(cardlock.visible_uuids(), settings.data_dir / "gpu-locks"):
            found = measure(budget_s)
    except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
        row.error = f"{type(exc).__name__}: {exc}"[:4000]
        log.warning("timer self-test of %s failed: %s", card, row.error)
        found = {}
    device = found.get("device") or {}
    if found:
        row.card = str(device.get("uuid") or card)  # the card that was measured
        row.gpu_name = str(device.get("name") or "")
        row.kernel = str(found.get("kernel", ""))
        row.cv, row.sample_cv = float(found["cv"]), float(found["sample_cv"])
        row.ratio, row.ci_low, row.ci_high = (
            float(found["ratio"]), float(found["ci_low"]), float(found["ci_high"])
        )  # fmt: skip
        row.median_s, row.samples = float(found["median_s"]), int(found["samples"])
        row.detail = {k: found[k] for k in ("rounds", "seconds", "level", "device") if k in found}
    with factory() as session, session.begin():
        if row.cv is not None:
            finding = judge(row.cv, row.ci_low or 1.0, row.ci_high or 1.0,
                            history(session, row.card))  # fmt: skip
            row.flagged, row.reason, row.baseline_cv = (
                finding.flagged, finding.reason, finding.baseline_cv
            )  # fmt: skip
            if finding.flagged:
                log.warning("card %s flagged by its timer self-test: %s", row.card, row.reason)
        session.add(row)
    return row


__all__ = ["measure", "run_selftest"]
