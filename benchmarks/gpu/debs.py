"""Carried Debian packages on a bare GPU host: unpacked into a prefix, never installed.

The H200 image has no bubblewrap and no Redis server, and no network to fetch them.
``.deb/`` carries them (``bubblewrap``, ``redis-server`` + ``redis-tools`` and the
libraries a minimal image may lack: jemalloc, lzf, libatomic, libcap, libselinux,
pcre2), downloaded on a Debian machine with ``apt-get download`` (docs/gpu-next-session.md
says which). Each is unpacked with ``dpkg -x`` into ``PREFIX`` (``/opt/kwdeb``), never
into ``/`` (an unpacked library can shadow the image's own and break it). For each
program a wrapper in ``PREFIX/bin`` runs it with the carried libraries *after* the
system's on ``LD_LIBRARY_PATH`` (``ldd`` picks the image's copy where it has one), and
``PREFIX/bin`` goes first on ``PATH``: the worker finds ``bwrap`` by name, as on a host
where the package is installed.

It installs nothing else and starts nothing (``service.py`` starts Redis).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from benchmarks.gpu import host

DEBS = host.ROOT / ".deb"
PREFIX = Path("/opt/kwdeb")
PROGRAMS = ("bwrap", "redis-server", "redis-cli")
LIB_DIRS = ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu", "usr/lib")


def wrapper(real: Path, libs: list[Path]) -> str:
    """A POSIX sh script that runs ``real`` with ``libs`` after the system's libraries."""
    joined = ":".join(str(p) for p in libs)
    return (
        "#!/bin/sh\n"
        f"# made by benchmarks/gpu/debs.py: {real.name} from a carried .deb\n"
        f'LD_LIBRARY_PATH="${{LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}}{joined}" '
        f'exec "{real}" "$@"\n'
    )


def install(ctx: host.Context, debs: Path = DEBS, prefix: Path = PREFIX) -> dict[str, Any]:
    """Unpack every carried ``.deb``; wrap its programs; put them first on ``PATH``."""
    found = sorted(glob.glob(str(debs / "*.deb")))
    result: dict[str, Any] = {"prefix": str(prefix), "debs": [Path(f).name for f in found]}
    if not found:
        result["note"] = f"no .deb in {debs}: programs come from the image, if it has them"
        result["programs"] = {p: shutil.which(p) for p in PROGRAMS}
        return result
    if shutil.which("dpkg") is None:
        result["error"] = "no dpkg on this host: cannot unpack the carried .deb files"
        return result
    prefix.mkdir(parents=True, exist_ok=True)
    failed = []
    for deb in found:
        name = f"dpkg-x-{Path(deb).name.split('_')[0]}"
        step = ctx.run(name, ["dpkg", "-x", deb, str(prefix)], 60)
        if not step.ok:
            failed.append(f"{Path(deb).name}: {' '.join(step.tail)}")
    if failed:
        result["failed"] = failed
    libs = [prefix / d for d in LIB_DIRS if (prefix / d).is_dir()]
    bin_dir = prefix / "bin"
    bin_dir.mkdir(exist_ok=True)
    programs: dict[str, Any] = {}
    for name in PROGRAMS:
        real = prefix / "usr" / "bin" / name
        if not real.exists():
            programs[name] = shutil.which(name)  # the image's, or None
            continue
        script = bin_dir / name
        script.write_text(wrapper(real, libs))
        script.chmod(0o755)
        programs[name] = str(script)
    path = os.environ.get("PATH", "")
    if str(bin_dir) not in path.split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([str(bin_dir), path])
    result["programs"] = programs
    result["versions"] = versions()
    return result


def versions() -> dict[str, str]:
    """Each program's own version line (proves it starts with the libraries at hand)."""
    out = {}
    for name, flag in (("bwrap", "--version"), ("redis-server", "--version")):
        exe = shutil.which(name)
        if exe is None:
            out[name] = "not found"
            continue
        try:
            done = subprocess.run([exe, flag], capture_output=True, text=True, timeout=20)
            text = (done.stdout or done.stderr).strip().splitlines()
            out[name] = (text[0] if text else f"rc {done.returncode}")[:160]
        except (OSError, subprocess.TimeoutExpired) as exc:
            out[name] = f"does not start: {exc}"
    return out


__all__ = ["DEBS", "PREFIX", "install", "versions", "wrapper"]
