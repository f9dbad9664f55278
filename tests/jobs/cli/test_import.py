"""``kernelwatch import``: the H200 example dataset loads on a machine without a GPU."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.migrate import upgrade
from kernelwatch.db.models import Commit, Repository, Result, Run
from kernelwatch.db.session import make_engine
from kernelwatch.db.store import get_or_create_repository, upsert_commit
from kernelwatch.jobs.planning.importer import read_records, record_lines
from tests.conftest import run_cli

DATA = Path(__file__).resolve().parents[3] / "docs" / "data"
RUN1 = DATA / "bench-h200-2026-11-29.jsonl"
RUN5 = DATA / "bench-h200-2026-11-29-run5.jsonl"


def test_the_h200_records_import_as_runs_and_compare(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    upgrade(url)
    env = {"KW_DATABASE_URL": url, "KW_DATA_DIR": str(tmp_path)}
    common = ["--repo", "kernelwatch-triton", "--device-class", "h200"]
    first = run_cli("import", str(RUN1), *common, "--commit", "h200-morning", env=env)
    assert first.returncode == 0, first.stderr
    second = run_cli(
        "import", str(RUN5), *common, "--commit", "h200-afternoon", "--parent", "h200-morning",
        "--json", env=env,
    )  # fmt: skip
    assert second.returncode == 0, second.stderr
    summary = json.loads(second.stdout)
    # judged: two unpaired runs on two cards may leave a case inconclusive, which the
    # default policy (issue 13) makes the run neutral rather than silently green
    assert summary["status"] == "succeeded" and summary["verdict"] in ("pass", "fail", "neutral")
    factory = sessionmaker(bind=make_engine(url))
    with factory() as s:
        runs = s.scalars(select(Run).order_by(Run.id)).all()
        assert [r.trigger for r in runs] == ["import", "import"]
        assert runs[1].baseline_run_id == runs[0].id
        results = s.scalars(select(Result).where(Result.run_id == runs[1].id)).all()
        assert len(results) == 16 and all(r.status == "pass" for r in results)
        assert all(r.verdict is not None and r.ratio is not None for r in results)
        assert all(r.record["device"]["name"] == "NVIDIA H200" for r in results)


def test_a_file_that_is_not_records_is_refused_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"schema": 1, "suite": "basic"}\n')
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    upgrade(url)
    env = {"KW_DATABASE_URL": url, "KW_DATA_DIR": str(tmp_path)}
    out = run_cli("import", str(bad), "--repo", "x", "--commit", "c", "--device-class", "h200",
                  env=env)  # fmt: skip
    assert out.returncode != 0
    assert "bad.jsonl:1: not a result record" in out.stderr


def test_gzipped_records_import_and_a_truncated_gzip_is_refused_by_name(tmp_path: Path) -> None:
    whole = gzip.compress(RUN1.read_bytes(), mtime=0)
    (tmp_path / "run1.jsonl.gz").write_bytes(whole)
    (tmp_path / "cut.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    assert [r.case_id for r in read_records(tmp_path / "run1.jsonl.gz")] == [
        r.case_id for r in read_records(RUN1)
    ]
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    upgrade(url)
    env = {"KW_DATABASE_URL": url, "KW_DATA_DIR": str(tmp_path)}
    out = run_cli("import", str(tmp_path / "cut.jsonl.gz"), "--repo", "x", "--commit", "c",
                  "--device-class", "h200", env=env)  # fmt: skip
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "cannot read" in out.stderr and "cut.jsonl.gz" in out.stderr
    with Session(make_engine(url)) as s:
        assert s.scalars(select(Run)).all() == []  # nothing half-stored


def test_a_file_with_a_case_twice_is_two_runs_and_refused(tmp_path: Path) -> None:
    # ``bench --out`` appends: two benches into one file imported as one run with every
    # case twice (an audit, 2026-12-05)
    lines = RUN1.read_text().splitlines()
    doubled = tmp_path / "doubled.jsonl"
    doubled.write_text("\n".join(lines + lines[:1]) + "\n")
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    upgrade(url)
    env = {"KW_DATABASE_URL": url, "KW_DATA_DIR": str(tmp_path)}
    out = run_cli("import", str(doubled), "--repo", "x", "--commit", "c", "--device-class",
                  "h200", env=env)  # fmt: skip
    assert out.returncode == 2
    case = json.loads(lines[0])["case_id"]
    assert f"doubled.jsonl:{len(lines) + 1}: case {case} " in out.stderr
    assert "again, first on line 1" in out.stderr
    with sessionmaker(bind=make_engine(url))() as s:
        assert s.scalars(select(Run)).all() == []  # nothing half-imported


def test_records_of_a_stored_repository_join_it_and_its_commit(tmp_path: Path) -> None:
    # README: records measured elsewhere go in with `import F --repo R --commit SHA`;
    # `--repo tinykern` for the stored tinykern (source a path) made a `tinykern-NNNN`
    # beside it, and `gate --repo tinykern` never saw the records (an audit, 2026-12-05);
    # a sha prefix became a commit of its own beside its full sha
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    upgrade(url)
    sha = "484a3542eb05a8845aab52cd43c0043e468943da"
    factory = sessionmaker(bind=make_engine(url))
    with factory() as s, s.begin():
        repo = get_or_create_repository(s, "tinykern", str(tmp_path / "src" / "tinykern"))
        upsert_commit(s, repo, sha, [])
    env = {"KW_DATABASE_URL": url, "KW_DATA_DIR": str(tmp_path)}
    out = run_cli("import", str(RUN1), "--repo", "tinykern", "--commit", sha[:7],
                  "--device-class", "h200", env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"as run 1 of tinykern@{sha[:12]} on h200 (pass)" in out.stdout
    with factory() as s:
        assert [r.name for r in s.scalars(select(Repository))] == ["tinykern"]
        assert [c.sha for c in s.scalars(select(Commit))] == [sha]
    gate = run_cli("gate", "--repo", "tinykern", "--sha", sha[:7], "--json", env=env)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert [c["run_id"] for c in json.loads(gate.stdout)["classes"]] == [1]


FA2_PAIRED = DATA / "service-h200-2026-12-06" / "fa2-run1.jsonl.gz"


def test_paired_records_are_judged_again_at_the_threshold_they_were_measured_at(
    tmp_path: Path,
) -> None:
    """FA2's recipe gates at 3 %; its varlen case's interval [0.990, 1.006] is
    `unchanged` there and would read `inconclusive` at the 1 % default. Imported, the
    run reads as the worker that measured it read; records measured at two thresholds
    keep the default (no one threshold to take)."""
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    upgrade(url)
    env = {"KW_DATABASE_URL": url, "KW_DATA_DIR": str(tmp_path)}
    records = [json.loads(x) for x in record_lines(FA2_PAIRED)]
    measured = [r for r in records if r["status"] == "pass"]
    assert {r["paired"]["min_effect"] for r in measured} == {0.03}
    mixed = [dict(r, paired=dict(r["paired"])) for r in measured]
    mixed[0]["paired"]["min_effect"] = 0.01
    mixed_file = tmp_path / "mixed.jsonl"
    mixed_file.write_text("".join(json.dumps(r) + "\n" for r in mixed))
    common = ["--repo", "fa2", "--device-class", "h200", "--json"]
    same = run_cli("import", str(FA2_PAIRED), *common, "--commit", "v2.8.3", env=env)
    assert same.returncode == 0, same.stderr
    other = run_cli("import", str(mixed_file), *common, "--commit", "mixed", env=env)
    assert other.returncode == 0, other.stderr
    factory = sessionmaker(bind=make_engine(url))
    with factory() as s:
        at_3, at_default = s.scalars(select(Run).order_by(Run.id)).all()
        assert at_3.options.regression_threshold == 0.03 and at_3.verdict == "pass"
        assert {r.verdict for r in at_3.results if r.status == "pass"} == {"unchanged"}
        assert at_default.options.regression_threshold is None
        assert "inconclusive" in {r.verdict for r in at_default.results}
