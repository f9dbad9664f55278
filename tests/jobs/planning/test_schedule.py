"""The schedule of ``kernelwatch beat``: configuration, release listing, the noise rule.

Unit tests of the functions that decide; ``test_beat_e2e.py`` runs the whole thing.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from celery.schedules import crontab
from packaging.version import Version
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.fleet import beat
from kernelwatch.db.session import engine_for
from kernelwatch.jobs.errors import ConfigError
from kernelwatch.jobs.github.watched import parse_repos
from kernelwatch.jobs.judging.selftest import judge
from kernelwatch.jobs.planning import releases
from kernelwatch.jobs.planning.broker import make_celery, queue_depth
from kernelwatch.jobs.planning.schedule import (
    SCHEDULE_QUEUE,
    When,
    beat_entries,
    load_schedule,
    parse_schedule,
    parse_when,
)
from kernelwatch.jobs.planning.scheduled import send_selftests
from tests.helpers import make_wheel, serving

# ------------------------------------------------------------------------ configuration


def test_a_time_of_day_or_a_cron_line_and_nothing_else() -> None:
    assert parse_when("02:00") == When("0", "2")
    assert parse_when("2:30").describe() == "daily at 02:30 UTC"
    assert parse_when("30 2 * * 1-5") == When("30", "2", "1-5")
    for bad in ("25:00", "every night", "* * *", "99 * * * *"):
        with pytest.raises(ValueError, match="schedule"):
            parse_when(bad)


WATCHED = {
    "defaults": {"device_classes": ["h100"], "schedule": "02:00"},
    "repos": {
        "acme/kernels": {"source": "/srv/kernels", "branches": ["release/*", "trunk"]},
        "acme/other": {"source": "/srv/other", "schedule": "", "schedule_branch": "dev"},
    },
    "watch": {
        "releases_every_s": 600,
        "selftest": "30 3 * * *",
        "releases": [
            {"package": "flashinfer-python", "index": "https://pypi.org/simple",
             "suite": "decode", "adapter": "flashinfer", "kernels": ["decode_attention"]},
            {"package": "kwlib", "wheelhouse": "/srv/wheels", "suites": ["basic"],
             "adapter": "kwlib", "device_classes": ["cpu"]},
        ],
    },
}  # fmt: skip


def test_the_repositories_file_schedules_branches_releases_and_the_selftest() -> None:
    config = parse_schedule(WATCHED)
    [scheduled] = config.scheduled_repos()
    assert scheduled.full_name == "acme/kernels" and scheduled.scheduled_branch == "trunk"
    assert config.repos["acme/other"].scheduled_branch == "dev"
    fi, kw = config.watch.releases
    assert fi.name == "flashinfer-python" and fi.device_classes == ("h100",)  # [defaults]
    assert fi.suites == ("decode",) and fi.kernels == ("decode_attention",)
    assert kw.wheelhouse == "/srv/wheels" and kw.device_classes == ("cpu",)
    entries = beat_entries(config)
    assert set(entries) == {"main acme/kernels", "releases", "selftest"}
    assert all(e["options"] == {"queue": SCHEDULE_QUEUE} for e in entries.values())
    main = entries["main acme/kernels"]
    assert main["args"] == ["acme/kernels"] and isinstance(main["schedule"], crontab)
    assert main["schedule"].hour == {2} and main["schedule"].minute == {0}
    assert entries["releases"]["schedule"] == 600.0
    assert entries["selftest"]["schedule"].minute == {30}
    described = "\n".join(config.describe())
    assert "acme/kernels: trunk daily at 02:00 UTC" in described
    assert "release watch kwlib (/srv/wheels): every 600 s" in described


@pytest.mark.parametrize(
    ("release", "says"),
    [
        ({"package": "x", "suite": "basic", "adapter": "x"}, "exactly one of index"),
        ({"package": "x", "index": "https://i", "wheelhouse": "/w", "suite": "basic",
          "adapter": "x"}, "exactly one of index"),
        ({"package": "x", "index": "ftp://i", "suite": "basic", "adapter": "x"}, "http(s)://"),
        ({"package": "x", "wheelhouse": "rel/dir", "suite": "basic", "adapter": "x"},
         "absolute"),
        ({"package": "x", "index": "https://i", "adapter": "x"}, "name the suite"),
        ({"package": "x", "index": "https://i", "suite": "b", "adapter": "os; rm"},
         "module name"),
        ({"package": "--index-url=evil", "index": "https://i", "suite": "b", "adapter": "x"},
         "PyPI project name"),
        ({"package": "x", "index": "https://i", "suite": "b", "adapter": "x", "sutie": 1},
         "unknown keys"),
    ],
)  # fmt: skip
def test_a_bad_release_watch_is_refused_with_the_key_that_is_wrong(
    release: dict[str, object], says: str, tmp_path: Path
) -> None:
    path = tmp_path / "repos.toml"
    lines = [f"{k} = {json.dumps(v)}" for k, v in release.items()]
    path.write_text("[[watch.releases]]\n" + "\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match="repositories file") as err:
        load_schedule(path)
    assert says in str(err.value)


def test_a_bad_schedule_on_a_repository_is_refused() -> None:
    with pytest.raises(ValueError, match="acme/k: schedule: '2am'"):
        parse_repos({"repos": {"acme/k": {"source": "/s", "schedule": "2am"}}})


def test_the_beat_command_prints_the_schedule_and_refuses_a_bad_file(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    good = tmp_path / "repos.toml"
    good.write_text('[repos."acme/k"]\nsource = "/s"\nschedule = "01:15"\n')
    out = run_cli("beat", "--check", env={"KW_REPOS_FILE": str(good)}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "kernelwatch beat: acme/k: main daily at 01:15 UTC" in out.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[watch]\nreleases_every_s = 1\n")
    out = run_cli("beat", "--check", env={"KW_REPOS_FILE": str(bad)}, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"kernelwatch beat: repositories file {bad}: [watch] releases_every_s must lie "
        "between 10 s and a week"
    )


# ----------------------------------------------------------------------------- releases


def test_versions_of_a_wheelhouse(tmp_path: Path) -> None:
    house = tmp_path / "wheels"
    for v in ("0.1", "0.2", "0.3rc1"):
        make_wheel(house, "kw_lib", v)
    make_wheel(house, "other", "9.0")
    (house / "kw-lib-0.4.tar.gz").write_bytes(b"")  # an sdist counts
    (house / "notes.txt").write_text("x")
    assert releases.from_wheelhouse(house, "kw-lib") == {
        Version(v) for v in ("0.1", "0.2", "0.3rc1", "0.4")
    }
    assert releases.file_version("kw_lib-1.0-py3-none-any.whl", "KW.Lib") == Version("1.0")
    assert releases.file_version("kw_lib-1.0-py3-none-any.whl", "kw-libs") is None


SIMPLE_HTML = """<!DOCTYPE html><html><body>
<a href="../../files/kwlib-0.1-py3-none-any.whl#sha256=00">kwlib-0.1-py3-none-any.whl</a>
<a href="../../files/kwlib-0.2-py3-none-any.whl" data-yanked="broken">kwlib-0.2-py3-none-any.whl</a>
<a href="https://files.example/kwlib-0.3.tar.gz">kwlib-0.3.tar.gz</a>
<a href="kwlib-1.0.dev1-py3-none-any.whl">kwlib-1.0.dev1-py3-none-any.whl</a>
</body></html>"""


def test_versions_of_a_file_index_leave_yanked_and_prereleases_out(tmp_path: Path) -> None:
    page = tmp_path / "simple" / "kwlib"
    page.mkdir(parents=True)
    (page / "index.html").write_text(SIMPLE_HTML)
    found = releases.from_index(f"file://{tmp_path / 'simple'}", "KWLib")
    assert found == {Version("0.1"), Version("0.3"), Version("1.0.dev1")}
    from kernelwatch.jobs.planning.schedule import ReleaseWatch

    watch = ReleaseWatch("kwlib", ("basic",), "kwlib", index=f"file://{tmp_path / 'simple'}")
    assert releases.listed_versions(watch) == [Version("0.1"), Version("0.3")]


@pytest.fixture
def http_index() -> Iterator[tuple[str, list[str]]]:
    """A loopback index answering PEP 691 JSON when asked for it, else PEP 503 HTML."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Accept", ""))
            if self.path.rstrip("/") != "/simple/kwlib":
                self.send_response(404)
                self.end_headers()
                return
            if "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", ""):
                body = json.dumps({"meta": {"api-version": "1.1"}, "name": "kwlib", "files": [
                    {"filename": "kwlib-0.1-py3-none-any.whl", "url": "x", "hashes": {}},
                    {"filename": "kwlib-0.2-py3-none-any.whl", "url": "x", "hashes": {},
                     "yanked": "bad upload"},
                    {"filename": "kwlib-0.5-py3-none-any.whl", "url": "x", "hashes": {}},
                ]}).encode()  # fmt: skip
                kind = "application/vnd.pypi.simple.v1+json"
            else:
                body, kind = SIMPLE_HTML.encode(), "text/html"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with serving(Handler) as port:
        yield f"http://127.0.0.1:{port}/simple", seen


def test_versions_of_an_http_index_through_pep_691(http_index: tuple[str, list[str]]) -> None:
    url, seen = http_index
    assert releases.from_index(url, "kwlib") == {Version("0.1"), Version("0.5")}
    assert seen[-1].startswith("application/vnd.pypi.simple.v1+json")
    assert releases.from_index(url, "not-there") == set()  # 404: not published (yet)


def test_what_a_poll_measures() -> None:
    v = [Version(x) for x in ("0.1", "0.2", "0.3", "0.4")]
    assert releases.to_measure([], []) == ([], None)
    assert releases.to_measure(v, []) == ([v[3]], None)  # a first point, nothing to compare
    assert releases.to_measure(v, [v[3]]) == ([], None)  # nothing new
    assert releases.to_measure(v, [v[1]]) == ([v[2], v[3]], v[1])  # each after the one before
    # the previous release is the one listed just before the new one, measured or not
    assert releases.to_measure(v, [v[0]]) == ([v[1], v[2], v[3]], v[0])
    assert releases.to_measure(v[:2] + v[3:], [v[0], v[2]]) == ([v[3]], v[2])


# -------------------------------------------------------------------------- self-test


def test_a_card_whose_noise_grew_is_flagged_and_a_steady_one_is_not() -> None:
    steady = [0.004, 0.005, 0.0045, 0.0042]
    assert not judge(0.006, 0.998, 1.003, steady).flagged  # within its own spread
    grew = judge(0.02, 0.99, 1.01, steady)
    assert (
        grew.flagged
        and "noise grew: cv 2.00 % against 0.43 % over its last 4 nights" in grew.reason
    )
    assert not judge(0.02, 0.99, 1.01, steady[:2]).flagged  # too little history to say
    assert not judge(0.0009, 0.999, 1.001, [0.0001, 0.0002, 0.0001]).flagged  # floor
    biased = judge(0.004, 1.008, 1.02, steady)
    assert biased.flagged and "A/A interval [1.0080, 1.0200] excludes 1" in biased.reason


def test_one_selftest_per_live_card_on_the_direct_queue_of_its_worker(
    pg_url: str, redis_db_url: str, tmp_path: Path
) -> None:
    from tests.conftest import _truncate

    _truncate(pg_url)
    factory: sessionmaker[Session] = sessionmaker(bind=engine_for(pg_url))
    with factory() as s, s.begin():
        beat(s, "w0@n1", host="n1", queues="gpu.h100", gpu_uuid="GPU-aaa", state="busy")
        beat(s, "w0b@n1", host="n1", queues="gpu.h100", gpu_uuid="GPU-aaa", state="idle")
        beat(s, "w1@n1", host="n1", queues="gpu.h100", gpu_uuid="GPU-bbb", state="unhealthy")
        beat(s, "cpu@n2", host="n2", queues="cpu", gpu_uuid="", state="idle")
        beat(s, "build@n2", host="n2", queues="build", gpu_uuid="", state="idle")
    settings = Settings(data_dir=tmp_path, broker_url=redis_db_url)
    app = make_celery(settings)
    sent = send_selftests(factory, app, budget_s=3)
    assert sent == {"GPU-aaa": "w0@n1", "cpu:n2": "cpu@n2"}  # one per card, never unhealthy
    assert queue_depth(app, "w0@n1.dq2") == 1 and queue_depth(app, "cpu@n2.dq2") == 1
    assert queue_depth(app, "w0b@n1.dq2") == 0 and queue_depth(app, "build@n2.dq2") == 0


def test_beat_is_part_of_serve_and_of_every_deploy_file() -> None:
    import yaml

    from kernelwatch.jobs.cli.serve import PARTS, part_argvs

    root = Path(__file__).resolve().parents[3]
    assert "beat" in PARTS and part_argvs(8000, 8501, "127.0.0.1", None)["beat"][-1] == "beat"
    compose = yaml.safe_load((root / "deploy" / "compose.yaml").read_text())
    assert compose["services"]["beat"]["command"] == ["beat"]
    docs = list(yaml.safe_load_all((root / "deploy" / "k8s" / "beat.yaml").read_text()))
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 1  # two beats would send every entry twice
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    assert deployment["spec"]["template"]["spec"]["containers"][0]["args"] == ["beat"]
    assert "beat.yaml" in (root / "deploy" / "k8s" / "kustomization.yaml").read_text()
    unit = (root / "deploy" / "systemd" / "kernelwatch-beat.service").read_text()
    assert "ExecStart=/opt/kernelwatch/venv/bin/kernelwatch beat $BEAT_ARGS" in unit


# the crowd half of make test (it starts a worker and servers): the other half was the
# longer one (1314 s against 1166 s on a 2-core machine, 2026-12-05)
@pytest.mark.crowd
@pytest.mark.slow
def test_beat_on_the_embedded_broker_plans_a_release_run(tmp_path: Path) -> None:
    """``kernelwatch serve`` on one machine: beat on the filesystem broker and SQLite."""
    import subprocess
    import sys
    import time

    from sqlalchemy import select
    from sqlalchemy.exc import OperationalError

    from kernelwatch.db.models import Run

    house = tmp_path / "wheels"
    make_wheel(house, "kwlib", "0.3")
    repos = tmp_path / "repos.toml"
    repos.write_text(
        '[watch]\nreleases_every_s = 10\nselftest = ""\n\n[[watch.releases]]\n'
        f'package = "kwlib"\nwheelhouse = "{house}"\nsuite = "basic"\nadapter = "kwlib"\n'
    )
    data = tmp_path / "kw"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KW_")}
    env.update(KW_DATA_DIR=str(data), KW_REPOS_FILE=str(repos))
    log = tmp_path / "beat.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kernelwatch.jobs.cli.main", "beat"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        factory = sessionmaker(bind=engine_for(f"sqlite:///{data / 'kernelwatch.db'}"))
        deadline = time.monotonic() + 120
        planned: list[Run] = []
        while not planned and time.monotonic() < deadline:
            time.sleep(1)
            if (data / "kernelwatch.db").exists():
                # the file exists before beat's migration has made the tables in it
                with factory() as s, contextlib.suppress(OperationalError):
                    planned = list(s.scalars(select(Run).where(Run.trigger == "release")))
        assert planned, log.read_text()[-3000:]
        [run] = planned
        assert run.version_spec == "kwlib==0.3" and run.status == "queued"  # no worker here
    finally:
        proc.terminate()
        proc.wait(timeout=30)
