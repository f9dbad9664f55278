"""Memory of the API process under many large unsigned webhook bodies (issue 14).

    python benchmarks/webhook_memory.py                     # the code in this tree
    python benchmarks/webhook_memory.py --webhook-from 6e3d67f   # the route of a commit

Starts a real API process (uvicorn, SQLite, the embedded broker), reads its RSS
once it answered a first ping, then sends ``--clients`` concurrent POSTs of
``--mb`` MB each with a well-formed but forged ``X-Hub-Signature-256`` (an
attacker without the secret), and reports the process's peak RSS (``VmHWM``) and
RSS afterwards. ``--webhook-from REV`` serves ``jobs/api/webhook.py`` as it was at
that commit instead (the rest of the tree is this one), for a before/after figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
SECRET = "benchmark-secret"


def serve(port: int, webhook_file: str | None, max_body: int) -> None:
    """The child: the API of this tree, optionally with an older webhook route."""
    import importlib.util

    import uvicorn
    from sqlalchemy.orm import sessionmaker

    from kernelwatch.db.config import Settings
    from kernelwatch.db.migrate import upgrade
    from kernelwatch.db.session import make_engine
    from kernelwatch.jobs.api import app as app_module
    from kernelwatch.jobs.api import webhook
    from kernelwatch.jobs.planning.broker import make_celery

    data = Path(tempfile.mkdtemp(prefix="kw-mem-"))
    url = f"sqlite:///{data / 'kw.db'}"
    settings = Settings(data_dir=data, database_url=url, webhook_secret=SECRET)
    settings.ensure_dirs()
    upgrade(url)
    if webhook_file:
        spec = importlib.util.spec_from_file_location("kw_webhook_then", webhook_file)
        assert spec is not None and spec.loader is not None
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
        webhook.router = old.router  # create_app includes whatever router this names
    factory = sessionmaker(bind=make_engine(url), expire_on_commit=False)
    app = app_module.create_app(
        settings,
        factory,
        make_celery(settings),
        None,
        repos={},
        max_body_bytes=max_body,
        reporter_interval_s=None,
        reconcile=None,
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def _status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) // 1024  # MiB
    return out


async def _flood(url: str, clients: int, body: bytes) -> list[int]:
    headers = {
        "X-GitHub-Event": "push",
        "X-GitHub-Delivery": "flood",
        "X-Hub-Signature-256": "sha256=" + "0" * 64,
        "Content-Type": "application/json",
    }
    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:
        answers = await asyncio.gather(
            *(client.post(url, content=body, headers=headers) for _ in range(clients))
        )
    return [a.status_code for a in answers]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--mb", type=float, default=5.0)
    parser.add_argument("--webhook-from", help="serve jobs/api/webhook.py of this git revision")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--webhook-file", help=argparse.SUPPRESS)
    parser.add_argument("--max-body", type=int, default=25 * 1024 * 1024)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.webhook_file, args.max_body)
        return

    webhook_file = None
    if args.webhook_from:
        text = subprocess.run(
            ["git", "show", f"{args.webhook_from}:jobs/api/webhook.py"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as handle:
            handle.write(text)
        webhook_file = handle.name
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    argv = [sys.executable, __file__, "--serve", str(port), "--max-body", str(args.max_body)]
    if webhook_file:
        argv += ["--webhook-file", webhook_file]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KW_")}
    proc = subprocess.Popen(argv, env=env)
    url = f"http://127.0.0.1:{port}/webhooks/github"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        idle = _status(proc.pid)
        body = b'{"zen": "' + b"x" * int(args.mb * 1_000_000 - 11) + b'"}'
        started = time.monotonic()
        codes = asyncio.run(_flood(url, args.clients, body))
        took = time.monotonic() - started
        after = _status(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    result = {
        "webhook": args.webhook_from or "working tree",
        "clients": args.clients,
        "body_mb": args.mb,
        "rss_idle_mib": idle["VmRSS"],
        "rss_peak_mib": after["VmHWM"],
        "rss_after_mib": after["VmRSS"],
        "statuses": sorted(set(codes)),
        "seconds": round(took, 2),
    }
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
