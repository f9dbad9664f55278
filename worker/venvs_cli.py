"""``python -m kernelwatch.worker.venvs``: one environment installed or built, printed as JSON.

For hosts that run benchmarks without the service (an offline GPU machine, a
laptop): the same cache, keys, recipes and sandbox as the worker, driven from
the command line. ``install`` takes a released version (``name==version`` or a
wheel path) from an index or a wheelhouse; ``build`` takes a commit of a
repository (or an unpacked source tree), a ``.kernelwatch.toml`` recipe and a
profile, with submodules from mirrors (``--mirror``) or from directories
(``--vendor``) and ``--offline`` for hosts without a network.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from kernelwatch.jobs.errors import InstallError
from kernelwatch.jobs.library.libspec import CommitSpec
from kernelwatch.worker import submodules
from kernelwatch.worker.venvs import DEFAULT_MAX_BYTES, Env, EnvCache, probe_toolchain


def main(argv: Sequence[str] | None = None) -> int:
    """``install`` a version or ``build`` a commit into the cache; print the entry as JSON."""
    from kernelwatch.jobs.library import libspec

    p = argparse.ArgumentParser(prog="python -m kernelwatch.worker.venvs", description=__doc__)
    p.add_argument("--root", required=True, type=Path, help="cache directory")
    p.add_argument("--max-gb", type=float, default=DEFAULT_MAX_BYTES / 2**30)
    sub = p.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("install", help="a released version: name==version or a wheel path")
    i.add_argument("--spec", required=True)
    i.add_argument("--with", dest="companions", action="append", default=[])
    i.add_argument("--index-url")
    i.add_argument("--find-links")
    i.add_argument("--timeout", type=float, default=900)
    b = sub.add_parser("build", help="a commit, with a .kernelwatch.toml recipe and profile")
    where = b.add_mutually_exclusive_group(required=True)
    where.add_argument("--repo", help="repository path or URL (a mirror is synced from it)")
    where.add_argument(
        "--source-dir", type=Path, help="an unpacked source tree instead (no git, no submodules)"
    )
    b.add_argument("--commit", required=True, help="revision (with --source-dir: its label)")
    b.add_argument("--config", type=Path, help=".kernelwatch.toml (default: the commit's own)")
    b.add_argument("--profile")
    b.add_argument("--mirror", action="append", default=[], help="UPSTREAM=MIRROR (repeatable)")
    b.add_argument(
        "--vendor",
        action="append",
        default=[],
        help="PATH=DIR: copy DIR to submodule PATH instead of fetching it (air-gapped hosts)",
    )
    b.add_argument("--offline", action="store_true", help="no network for the build")
    b.add_argument("--timeout", type=float, default=3600)
    b.add_argument("--no-ccache", action="store_true")
    args = p.parse_args(argv)
    cache = EnvCache(args.root, probe_toolchain(), int(args.max_gb * 2**30))
    try:
        if args.cmd == "install":
            spec = libspec.parse_version_spec(args.spec)
            index_url, find_links = libspec.parse_index(args.index_url, args.find_links)
            env = cache.version_env(
                spec,
                index_url=index_url,
                find_links=find_links,
                companions=[libspec.parse_version_spec(c) for c in args.companions],
                timeout=args.timeout,
            )
        else:
            env = _build_command(args, cache)
    except InstallError as exc:
        print(json.dumps({"error": str(exc), "log_tail": exc.log[-3000:]}))
        return 1
    print(json.dumps({**env.summary(), "toolchain": asdict(cache.toolchain)}))
    return 0


def _build_command(args: argparse.Namespace, cache: EnvCache) -> Env:
    from kernelwatch.jobs.library import libspec, repoconfig
    from kernelwatch.jobs.library.mirror import Mirror
    from kernelwatch.worker import recipes

    vendor = dict(v.split("=", 1) for v in args.vendor)
    text = args.config.read_text(encoding="utf-8") if args.config else None
    if args.source_dir is not None:
        source = args.source_dir.resolve()
        spec = CommitSpec(str(source), args.commit)

        def fetch(dest: Path) -> None:
            shutil.copytree(source, dest, symlinks=True, ignore=shutil.ignore_patterns(".git"))

        dropped: set[str] | None = None  # a source tree is taken as complete
    else:
        mirror = Mirror(args.root / "mirrors", args.repo)
        mirror.sync()
        sha = mirror.resolve(args.commit)
        spec = libspec.parse_commit_spec(mirror.source, sha)
        if text is None:
            text = mirror.read_file(sha, repoconfig.FILE)

        def fetch(dest: Path) -> None:
            mirror.worktree(sha, dest)

        dropped = set(vendor)
    recipe = recipes.recipe_set(repoconfig.parse(text).install).select(args.profile)
    kept = () if dropped is None else tuple(s for s in recipe.submodules if s not in dropped)
    recipe = recipe.model_copy(update={"submodules": kept})

    def materialize(dest: Path) -> None:
        fetch(dest)
        for rel, directory in vendor.items():
            shutil.copytree(directory, dest / rel, symlinks=True, dirs_exist_ok=True)

    return cache.commit_env(
        spec,
        recipe,
        materialize,
        mirrors=submodules.parse_mirrors(",".join(args.mirror)),
        timeout=args.timeout,
        use_ccache=not args.no_ccache,
        offline=args.offline,
    )


if __name__ == "__main__":
    raise SystemExit(main())
