"""``prepare-liger``: Liger-Kernel commits as a git bundle an offline GPU host can clone.

Runs where a Liger-Kernel repository is (a clone, or the bare mirror ``fetch``
leaves at ``/work/.mirror/linkedin+Liger-Kernel/repo``), not on the GPU host:

    python -m benchmarks.gpu prepare-liger --repo /work/.mirror/linkedin+Liger-Kernel/repo

Why a *replay* and not a bundle of the real history: a bundle must hold every
object its commits reach, and the fetched mirror is a partial clone (three large
test-data blobs under ``test/resources`` are not in it), so ``git bundle`` of the
real commits cannot be made there; the whole history would also be ~30 MB of the
call's 64 MiB. So each chosen commit (first-parent, oldest first) is replayed with
``git fast-import`` as one commit of a new linear history holding only what the
install and the kernels read (``PATHS``: ``src/``, ``setup.py``, ``pyproject.toml``,
``README.md``, ``LICENSE``), byte for byte, with its author, dates and message and an
``Upstream-Commit: <sha>`` trailer. Each replayed commit's parent is the previous
chosen one, so ``kernelwatch run --range FIRST..LAST`` measures exactly these commits,
each against the one before. The replay is deterministic (the committer is fixed,
its date the upstream committer date): the same commits give the same shas anywhere.

Writes ``.src/liger.bundle`` and ``.src/liger-commits.json`` (upstream and replayed
sha, subject, date, how many upstream first-parent commits each step folds in, which
watched op files changed). Carry ``.src``; ``liger`` (``liger.py``) runs them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from benchmarks.gpu import host

NAME = "prepare-liger"
HELP = "(networked machine) replay Liger-Kernel commits into .src/liger.bundle"
UPSTREAM = "https://github.com/linkedin/Liger-Kernel"
# First-parent commits of main, oldest first, across which the measured ops changed
# (git log --first-parent -- src/liger_kernel/ops/{rms_norm,swiglu,layer_norm,geglu}.py);
# softmax.py is the same in all of them (added in 5d25e468, 2025-05-26): the control.
DEFAULT_COMMITS = (
    "7d54ff88",  # 2025-12-02 RMSNorm backward: fp32 dW accumulation (#950); the baseline
    "87d7057a",  # 2025-12-25 RMSNorm elementwise_affine (#989), after no-constexpr rows (#988)
    "5101e3cd",  # 2026-01-05 RMSNorm accepts DTensors (#982): torch.distributed.tensor.DTensor
    "b0731743",  # 2026-01-12 RMSNorm kernels without pointer mutation (#1000)
    "63598637",  # 2026-04-27 SwiGLU gate/down multipliers for Falcon-H1 (#1201)
    "72a4ed47",  # 2026-07-14 CuTe DSL RMSNorm beside Triton's; DTensor imported defensively
    "11702da9",  # 2026-08-07 fp64 scalar kernel params pinned to fp32, swiglu/rms_norm (#1350)
    "10acf80c",  # 2026-08-13 the same in the remaining norm ops: layer_norm (#1358)
)
PATHS = ("src", "setup.py", "pyproject.toml", "README.md", "LICENSE", "MANIFEST.in")
OPS = "src/liger_kernel/ops"
WATCHED = ("rms_norm.py", "softmax.py", "layer_norm.py", "swiglu.py", "geglu.py")
TRAILER = "Upstream-Commit"
REPLAYER = ("kernelwatch prepare-liger", "prepare-liger@kernelwatch.invalid")
BRANCH = "refs/heads/main"
BUNDLE = "liger.bundle"
MANIFEST = "liger-commits.json"


@dataclass(frozen=True)
class Replayed:
    """One chosen commit: upstream identity, its replay, and what the step changes."""

    upstream: str
    replayed: str
    subject: str
    date: str
    folded: int  # upstream first-parent commits since the previous chosen one (itself incl.)
    changed_ops: list[str]


def _git(repo: Path, *args: str, data: bytes | None = None) -> bytes:
    """git on ``repo`` (a git dir or work tree) with kernelwatch's hardened options/env."""
    from kernelwatch.jobs.library.mirror import SAFE_OPTIONS, git_env

    done = subprocess.run(
        ["git", *SAFE_OPTIONS, "-C", str(repo), *args],
        input=data,
        capture_output=True,
        env=git_env(),
        timeout=600,
    )
    if done.returncode:
        raise RuntimeError(f"git {args[0]} failed: {done.stderr.decode(errors='replace')[-500:]}")
    return done.stdout


def resolve(repo: Path, refs: Sequence[str]) -> list[str]:
    """Full shas of ``refs``, checked to lie in this order on the last one's first-parent line."""
    shas = [_git(repo, "rev-parse", "--verify", f"{r}^{{commit}}").decode().strip() for r in refs]
    if not shas:
        raise ValueError("no commits given")
    line = _git(repo, "rev-list", "--first-parent", shas[-1]).decode().split()
    at = {sha: i for i, sha in enumerate(line)}
    missing = [r for r, s in zip(refs, shas, strict=True) if s not in at]
    if missing:
        raise ValueError(f"not on the first-parent line of {refs[-1]}: {', '.join(missing)}")
    order = [at[s] for s in shas]  # rev-list counts back from the tip: oldest has the largest
    if order != sorted(order, reverse=True) or len(set(order)) != len(order):
        raise ValueError("give the commits oldest first, each once")
    return shas


def _entries(repo: Path, sha: str, paths: Sequence[str]) -> list[tuple[str, str, str]]:
    """(mode, object, path) of every file under ``paths`` at ``sha`` (missing paths skipped)."""
    out = _git(repo, "ls-tree", "-r", "-z", "--full-tree", sha, "--", *paths)
    rows = []
    for item in out.split(b"\0"):
        if not item:
            continue
        meta, path = item.split(b"\t", 1)
        mode, kind, obj = meta.decode().split()
        if kind not in ("blob", "commit"):
            raise RuntimeError(f"{sha[:8]}: unexpected {kind} at {path.decode()}")
        rows.append((mode, obj, path.decode()))
    return rows


class _Blobs:
    """One ``git cat-file --batch`` process reading blobs from the upstream repository."""

    def __init__(self, repo: Path) -> None:
        from kernelwatch.jobs.library.mirror import SAFE_OPTIONS, git_env

        self._proc = subprocess.Popen(
            ["git", *SAFE_OPTIONS, "-C", str(repo), "cat-file", "--batch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=git_env(),
        )

    def read(self, obj: str) -> bytes:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(obj.encode() + b"\n")
        self._proc.stdin.flush()
        header = self._proc.stdout.readline().decode().split()
        if len(header) != 3 or header[1] != "blob":
            raise RuntimeError(f"object {obj} is not a readable blob here: {header}")
        data = self._proc.stdout.read(int(header[2]))
        self._proc.stdout.read(1)  # the newline after each object
        return data

    def close(self) -> None:
        for pipe in (self._proc.stdin, self._proc.stdout):
            if pipe is not None:
                pipe.close()
        self._proc.wait(timeout=30)


def _ident(name: str, email: str, date: str) -> bytes:
    if any(c in name + email for c in "<>\n"):
        raise RuntimeError(f"identity {name!r} <{email}> cannot be replayed")
    return f"{name} <{email}> {date}".encode()


def _data(out: IO[bytes], payload: bytes) -> None:
    out.write(b"data %d\n" % len(payload) + payload + b"\n")


def _meta(repo: Path, sha: str) -> tuple[str, str, str, str, str]:
    """(author name, email, raw author date, raw committer date, message) of ``sha``."""
    raw = _git(repo, "log", "-1", "--date=raw", "--format=%an%x00%ae%x00%ad%x00%cd%x00%B", sha)
    name, email, adate, cdate, message = raw.decode().split("\0", 4)
    return name, email, adate, cdate, message


def write_stream(repo: Path, shas: Sequence[str], paths: Sequence[str], out: IO[bytes]) -> None:
    """A ``git fast-import`` stream replaying ``shas`` (trimmed to ``paths``) as one line.

    Marks are numbers shared by blobs and commits; each distinct blob is written once.
    """
    blobs = _Blobs(repo)
    marks: dict[str, int] = {}  # upstream blob -> its mark
    counter = 0
    last = 0  # the previous commit's mark (0: none yet)
    try:
        for sha in shas:
            files = _entries(repo, sha, paths)
            for mode, obj, _ in files:
                if mode != "160000" and obj not in marks:
                    counter += 1
                    marks[obj] = counter
                    out.write(b"blob\nmark :%d\n" % counter)
                    _data(out, blobs.read(obj))
            name, email, adate, cdate, message = _meta(repo, sha)
            text = message.rstrip("\n") + f"\n\n{TRAILER}: {sha}\n"
            counter += 1
            out.write(f"commit {BRANCH}\nmark :{counter}\n".encode())
            out.write(b"author " + _ident(name, email, adate) + b"\n")
            out.write(b"committer " + _ident(*REPLAYER, cdate) + b"\n")
            _data(out, text.encode())
            if last:
                out.write(f"from :{last}\n".encode())
            out.write(b"deleteall\n")
            for mode, obj, path in files:
                ref = obj if mode == "160000" else f":{marks[obj]}"
                out.write(f"M {mode} {ref} {path}\n".encode())
            out.write(b"\n")
            last = counter
        out.write(b"done\n")
    finally:
        blobs.close()


def replay(repo: Path, shas: Sequence[str], dest: Path, paths: Sequence[str] = PATHS) -> list[str]:
    """Replay ``shas`` into a new bare repository ``dest``; the replayed shas, in order."""
    _git(dest.parent, "init", "-q", "--bare", "-b", "main", str(dest))
    with tempfile.TemporaryFile() as stream:
        write_stream(repo, shas, paths, stream)
        stream.seek(0)
        _git(dest, "fast-import", "--quiet", "--done", data=stream.read())
    line = _git(dest, "rev-list", "--first-parent", "--reverse", BRANCH).decode().split()
    if len(line) != len(shas):
        raise RuntimeError(f"replayed {len(line)} commits, expected {len(shas)}")
    return line


def changed_ops(
    repo: Path, old: str | None, new: str, watched: Iterable[str] = WATCHED
) -> list[str]:
    """Which watched op files differ between two upstream commits (all at the first)."""
    names = [f"{OPS}/{w}" for w in watched]
    if old is None:
        present = {p for _, _, p in _entries(repo, new, names)}
        return [Path(n).name for n in names if n in present]
    out = _git(repo, "diff", "--name-only", old, new, "--", *names).decode().split()
    return [Path(n).name for n in out]


def prepare(
    repo: Path, refs: Sequence[str], dest: Path, paths: Sequence[str] = PATHS
) -> dict[str, Any]:
    """``dest/liger.bundle`` and ``dest/liger-commits.json`` for ``refs``; the manifest."""
    shas = resolve(repo, refs)
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kw-liger-replay-") as tmp:
        bare = Path(tmp) / "liger.git"
        replayed = replay(repo, shas, bare, paths)
        bundle = dest / BUNDLE
        partial = bundle.with_name(bundle.name + ".part")
        _git(bare, "bundle", "create", str(partial), "HEAD", BRANCH)
        _git(bare, "bundle", "verify", str(partial))
        partial.replace(bundle)
    steps: list[Replayed] = []
    prev: str | None = None
    for up, new in zip(shas, replayed, strict=True):
        subject = _git(repo, "log", "-1", "--format=%s", up).decode().strip()
        date = _git(repo, "log", "-1", "--format=%cs", up).decode().strip()
        span = f"{prev}..{up}" if prev else up
        folded = int(_git(repo, "rev-list", "--first-parent", "--count", span).decode())
        steps.append(
            Replayed(up, new, subject, date, folded if prev else 1, changed_ops(repo, prev, up))
        )
        prev = up
    manifest = {
        "upstream": UPSTREAM,
        "paths": list(paths),
        "trailer": TRAILER,
        "bundle": BUNDLE,
        "bundle_bytes": bundle.stat().st_size,
        "bundle_sha256": hashlib.sha256(bundle.read_bytes()).hexdigest(),
        "commits": [asdict(s) for s in steps],
    }
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repo", required=True, type=Path, help="a Liger-Kernel clone or mirror")
    p.add_argument("--dest", type=Path, default=host.SOURCES, help="where (default .src/)")
    p.add_argument("commits", nargs="*", default=list(DEFAULT_COMMITS), help="oldest first")


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    del ctx
    manifest = prepare(args.repo, args.commits, args.dest)
    table = [
        f"{c['upstream'][:8]} -> {c['replayed'][:8]}  {c['date']}  folds {c['folded']:>3}  "
        f"{','.join(c['changed_ops']) or '-':<32} {c['subject'][:60]}"
        for c in manifest["commits"]
    ]
    table.append(
        f"{args.dest / BUNDLE}: {manifest['bundle_bytes'] / 2**20:.2f} MiB "
        f"({len(manifest['commits'])} commits; a call carries at most 64 MiB)"
    )
    return manifest, table


__all__ = ["DEFAULT_COMMITS", "PATHS", "TRAILER", "changed_ops", "prepare", "replay", "resolve"]
