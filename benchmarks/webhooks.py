"""Benchmark: POST /webhooks/github throughput and latency at 50 concurrent senders.

Starts a real ``kernelwatch api`` process (uvicorn) on 127.0.0.1 with a throwaway
database, then 50 asyncio senders post deliveries as fast as the server answers, for a
fixed time per scenario:

- ``ping``: signed ping, a new delivery id each (stored for dedup: two small writes);
- ``ignored``: signed ``issues`` event of an unwatched repository (stored, ignored);
- ``replay``: the same signed delivery again and again (dedup answer, no write);
- ``unsigned``: no signature (401 before the body is parsed, nothing stored).

No runs are planned (nothing is watched), so this measures the HTTP + signature +
database path, not git or the broker. Every request goes to loopback only, and the
run is bounded by ``--seconds`` per scenario.

Run:  .venv/bin/python benchmarks/webhooks.py [--seconds 5] [--senders 50]
      [--database-url postgresql+psycopg://postgres@127.0.0.1:5432/kwbench]
Prints a table (also as Markdown with --markdown) of requests/s and p50/p99 latency.
This is a script, not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx

from benchmarks.gpu.host import free_port
from kernelwatch.jobs.api.signature import sign

SECRET = "benchmark-webhook-secret"
PAYLOAD = json.dumps(
    {
        "zen": "Keep it logically awesome.",
        "hook_id": 1,
        "hook": {"type": "Repository", "id": 1, "events": ["push", "pull_request"]},
        "repository": {"id": 1, "full_name": "bench/unwatched", "name": "unwatched"},
        "sender": {"login": "bench", "id": 1},
    }
).encode()


@dataclass
class Stats:
    scenario: str
    requests: int
    errors: int
    seconds: float
    latencies: list[float]

    def pct(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3

    @property
    def rate(self) -> float:
        return self.requests / self.seconds


def headers(event: str, delivery: str | None, signed: bool = True) -> dict[str, str]:
    h = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "Content-Type": "application/json",
    }
    if signed:
        h["X-Hub-Signature-256"] = sign(SECRET, PAYLOAD)
    return h


async def scenario(url: str, name: str, seconds: float, senders: int) -> Stats:
    expected = {"ping": 200, "ignored": 202, "replay": 200, "unsigned": 401}[name]
    fixed = str(uuid.uuid4())
    latencies: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=senders, max_keepalive_connections=senders)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
        if name == "replay":
            await client.post("/webhooks/github", content=PAYLOAD, headers=headers("ping", fixed))
        deadline = time.perf_counter() + seconds

        async def sender() -> None:
            nonlocal errors
            while time.perf_counter() < deadline:
                event = "issues" if name == "ignored" else "ping"
                h = headers(event, fixed if name == "replay" else None, name != "unsigned")
                t0 = time.perf_counter()
                try:
                    r = await client.post("/webhooks/github", content=PAYLOAD, headers=h)
                    ok = r.status_code == expected
                except httpx.HTTPError:
                    ok = False
                latencies.append(time.perf_counter() - t0)
                errors += not ok

        t0 = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(senders)))
        elapsed = time.perf_counter() - t0
    return Stats(name, len(latencies), errors, elapsed, latencies)


def start_server(database_url: str, data_dir: Path, port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "KW_DATABASE_URL": database_url,
        "KW_DATA_DIR": str(data_dir),
        "KW_WEBHOOK_SECRET": SECRET,
    }
    argv = [sys.executable, "-m", "kernelwatch.jobs.cli.main", "api", "--port", str(port)]
    argv += ["--log-level", "warning", "--no-reporter"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("kernelwatch api did not come up")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=5.0, help="per scenario (max 60)")
    p.add_argument("--senders", type=int, default=50)
    p.add_argument("--database-url", help="default: a SQLite file in a temporary folder")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()
    seconds = min(max(args.seconds, 0.5), 60.0)
    with tempfile.TemporaryDirectory(prefix="kw-bench-") as tmp:
        db = args.database_url or f"sqlite:///{Path(tmp) / 'kw.db'}"
        port = free_port()
        server = start_server(db, Path(tmp) / "data", port)
        try:
            url = f"http://127.0.0.1:{port}"
            results = [
                asyncio.run(scenario(url, name, seconds, args.senders))
                for name in ("ping", "ignored", "replay", "unsigned")
            ]
        finally:
            server.terminate()
            server.wait(timeout=30)
    where = db.split("://")[0].split("+")[0]
    print(
        f"POST /webhooks/github, {args.senders} concurrent senders, {seconds:g} s per scenario, "
        f"database {where}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    head = ("scenario", "requests", "errors", "req/s", "p50 ms", "p99 ms")
    rows = [
        (s.scenario, str(s.requests), str(s.errors), f"{s.rate:.0f}", f"{s.pct(0.5):.1f}",
         f"{s.pct(0.99):.1f}")
        for s in results
    ]  # fmt: skip
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + " --- |" * len(head))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        print(f"{head[0]:<10}" + "".join(f"{h:>10}" for h in head[1:]))
        for r in rows:
            print(f"{r[0]:<10}" + "".join(f"{c:>10}" for c in r[1:]))
    return 1 if any(s.errors for s in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
