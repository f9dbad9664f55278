"""FlashAttention commits replayed into a git repository a worker can check out.

Issue 26: FA2 and FA3 measured through the service itself (``kernelwatch run`` and a
sandboxed worker), not only through the driver's direct builds. The GPU host has no
network, and flash-attention pins CUTLASS as a submodule the worker would fetch
through its mirrors; so the carried snapshots (``.src/fa2-<sha>.tar.xz``,
``.src/fa3-<sha>.tar.xz`` from ``prepare-fa2``/``prepare-fa3``, each with the
``cutlass-include-<pin>.tar.xz`` of its pin) are committed, oldest first, into one
linear history with CUTLASS's ``include/`` in place at ``csrc/cutlass/include``: a
tree the recipe builds exactly as it builds a clone whose submodule was fetched.
Each replayed commit names its upstream sha in a trailer, like ``liger_replay``.

The service-side config is the documented one (``docs/flash-attn2.kernelwatch.toml``,
``docs/flash-attention.kernelwatch.toml``) without its ``submodules`` line, checked
by the service's own reader: a recipe that names a submodule the replay no longer
has would fail at checkout, not measure.

Neither setup.py reaches for the submodule here: FA2's runs ``git submodule update``
only where ``.git`` is a directory (a worker's checkout is a worktree, whose ``.git``
is a file) and FA3's ``hopper/setup.py`` ignores that command's exit status.
"""

from __future__ import annotations

import glob
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from benchmarks.gpu import host

KINDS = ("fa2", "fa3")
CONFIGS = {
    "fa2": host.ROOT / "docs" / "flash-attn2.kernelwatch.toml",
    "fa3": host.ROOT / "docs" / "flash-attention.kernelwatch.toml",
}
TRAILER = "Upstream-Commit"
_META = (".kw-commit", ".kw-cutlass-pin", ".kw-ref")
_IDENT = ["-c", "user.name=kernelwatch", "-c", "user.email=replay@kernelwatch.invalid"]


@dataclass(frozen=True)
class Replayed:
    """One carried snapshot as a commit of the replay: its upstream name and new sha."""

    ref: str
    upstream: str
    cutlass_pin: str
    replayed: str

    def as_dict(self) -> dict[str, str]:
        return {"ref": self.ref, "upstream": self.upstream, "cutlass_pin": self.cutlass_pin,
                "replayed": self.replayed}  # fmt: skip


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *_IDENT, *args], capture_output=True,
                          text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args[:2])} in {repo}: {done.stderr.strip()[-300:]}")
    return done.stdout.strip()


def snapshot(src: Path, kind: str, commit: str) -> Path:
    """The one ``.src/<kind>-<commit>*.tar.xz``; a clear error when none or several match."""
    found = sorted(glob.glob(str(src / f"{kind}-{commit}*.tar.xz")))
    if not found:
        raise FileNotFoundError(f"no {src}/{kind}-{commit}*.tar.xz: make it with prepare-{kind}")
    if len(found) > 1:
        raise ValueError(f"{commit} names {len(found)} {kind} snapshots in {src}: give more of it")
    return Path(found[0])


def carried(src: Path, kind: str) -> list[str]:
    """The commits of ``kind`` carried in ``src``, in no particular order (full shas)."""
    names = sorted(Path(p).name for p in glob.glob(str(src / f"{kind}-*.tar.xz")))
    return [n.removeprefix(f"{kind}-").removesuffix(".tar.xz") for n in names]


def ref_of(archive: Path) -> str:
    """The name ``prepare-fa2``/``prepare-fa3`` was given for this snapshot (a tag or sha)."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("./.kw-ref")
        return member.read().decode().strip() if member else archive.name


def ordered(src: Path, kind: str, wanted: list[str] | None) -> list[str]:
    """The commits to replay, oldest first: ``wanted`` as given (sha prefixes), else the
    carried snapshots in the order of ``prepare-<kind>``'s defaults, others after by name."""
    if wanted:
        return list(wanted)
    from benchmarks.gpu import prepare

    defaults = list(prepare.FA2_DEFAULT_COMMITS if kind == "fa2" else prepare.DEFAULT_COMMITS)
    by_ref = {ref_of(snapshot(src, kind, full)): full for full in carried(src, kind)}

    def rank(item: tuple[str, str]) -> tuple[int, str]:
        ref, full = item
        hits = [i for i, d in enumerate(defaults) if ref == d or full.startswith(d)]
        return (hits[0] if hits else len(defaults), ref)

    return [full for _, full in sorted(by_ref.items(), key=rank)]


def _clear_tree(repo: Path) -> None:
    for child in repo.iterdir():
        if child.name == ".git":
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _extract(archive: Path, dest: Path) -> None:
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")


def replay(src: Path, kind: str, commits: list[str], dest: Path) -> list[Replayed]:
    """``dest``: a new repository with one commit per snapshot, in ``commits`` order."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: one of {', '.join(KINDS)}")
    if not commits:
        raise ValueError(f"no {kind} commits to replay (carried: {carried(src, kind) or 'none'})")
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    _git(dest, "init", "-q", "-b", "main")
    out: list[Replayed] = []
    for commit in commits:
        archive = snapshot(src, kind, commit)
        _clear_tree(dest)
        _extract(archive, dest)
        meta = {name: (dest / name).read_text().strip() for name in _META}
        for name in _META:
            (dest / name).unlink()
        pin = meta[".kw-cutlass-pin"]
        include = src / f"cutlass-include-{pin}.tar.xz"
        if not include.is_file():
            raise FileNotFoundError(f"no {include} for {kind} {meta['.kw-commit'][:8]}")
        _extract(include, dest / "csrc" / "cutlass")
        if not (dest / "csrc" / "cutlass" / "include" / "cutlass" / "cutlass.h").is_file():
            raise RuntimeError(f"{include} holds no include/cutlass/cutlass.h")
        # a fresh index: tar restores mtimes, and a file of the same size and mtime as
        # the one it replaced would look unchanged to git's stat cache
        (dest / ".git" / "index").unlink(missing_ok=True)
        _git(dest, "add", "-A")
        message = (
            f"{kind} {meta['.kw-ref']} replayed (CUTLASS {pin[:8]} include/ in place)\n\n"
            f"{TRAILER}: {meta['.kw-commit']}\nCutlass-Pin: {pin}\n"
        )
        _git(dest, "commit", "-q", "--allow-empty", "-m", message)
        out.append(
            Replayed(meta[".kw-ref"], meta[".kw-commit"], pin, _git(dest, "rev-parse", "HEAD"))
        )
    return out


def service_config(kind: str, dest: Path) -> Path:
    """The documented recipe for ``kind`` without ``submodules``, checked by the reader."""
    from kernelwatch.jobs.library import repoconfig

    text = CONFIGS[kind].read_text()
    kept = [line for line in text.splitlines() if not line.startswith("submodules")]
    if len(kept) == len(text.splitlines()):
        raise RuntimeError(f"{CONFIGS[kind].name} names no submodules: nothing to take out")
    note = (
        f"# {CONFIGS[kind].name} for a replayed history (benchmarks/gpu/fa_replay.py):\n"
        "# CUTLASS's include/ is committed in place, so no submodule is fetched.\n"
    )
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(note + "\n".join(kept) + "\n")
    parsed = repoconfig.parse(dest.read_text(), name=str(dest))
    if parsed.install.submodules:
        raise RuntimeError(f"{dest} still names submodules {parsed.install.submodules}")
    return dest


__all__ = ["CONFIGS", "KINDS", "Replayed", "carried", "ordered", "replay", "service_config"]
