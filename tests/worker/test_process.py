"""Children of the worker die with it, even when the worker is killed with SIGKILL."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kernelwatch.jobs.lifetime import die_with_parent


def test_child_gets_sigkill_when_its_parent_dies(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    # a parent process that starts a long-lived child in its own session, then waits
    parent_code = (
        "import subprocess, sys, time\n"
        "from kernelwatch.jobs.lifetime import die_with_parent\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],\n"
        "                     start_new_session=True, preexec_fn=die_with_parent())\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code])
    deadline = time.monotonic() + 30
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline, "child never started"
        time.sleep(0.05)
    child = int(pidfile.read_text())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return  # gone with its parent
        # a zombie reparented to init is reaped soon; /proc tells if it is dead
        status = Path(f"/proc/{child}/status")
        if status.exists() and "State:\tZ" in status.read_text():
            return
        time.sleep(0.05)
    os.kill(child, signal.SIGKILL)
    raise AssertionError("the child outlived its SIGKILLed parent")


def test_preexec_is_harmless_in_a_normal_child() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "print('ok')"],
        preexec_fn=die_with_parent(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "ok"
