"""The committed H200 dataset (``docs/data/h200-dataset.toml``) imports whole, with its figures."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.migrate import upgrade
from kernelwatch.db.models import Commit, Repository, Result, Run
from kernelwatch.db.session import make_engine
from kernelwatch.jobs.errors import ConfigError
from kernelwatch.jobs.planning.dataset import check_cards, load_manifest
from kernelwatch.jobs.planning.importer import record_lines
from tests.conftest import run_cli

DATA = Path(__file__).resolve().parents[3] / "docs" / "data"
MANIFEST = DATA / "h200-dataset.toml"
FA3_A = "16c7f0f647db325506691e0810114ef198df0d0a"
FA3_B = "3e87e421f898c6919fa417d00e5afcec5909debe"
FA3_C = "c75d019dea9d910312974417bc28f190dfdda6d9"
FA3_CULPRIT = "59df2f9bdf029f8e837ca79e1c0fe8c5d32dea25"
FA2_V283 = "060c9188beec3a8b62b33a3bfa6d5d2d44975fab"
RUNS = 37


def _record_files() -> set[str]:
    """Every JSON-lines file under docs/data whose lines are result records (schema 1),
    but the H100's (``h100-*/``: this is the H200's manifest; README says why they stay)."""
    found = set()
    for path in [*DATA.rglob("*.jsonl"), *DATA.rglob("*.jsonl.gz")]:
        if path.relative_to(DATA).parts[0].startswith("h100-"):
            continue
        first = json.loads(record_lines(path)[0])
        if isinstance(first, dict) and "schema" in first and "case_id" in first:
            found.add(str(path.relative_to(DATA)))
    return found


# the plain record files that README examples, test_import and benchmarks/fleet.py read
PLAIN_BY_NAME = {"bench-h200-2026-11-29.jsonl", "bench-h200-2026-11-29-run5.jsonl"}
PLAIN_LIMIT = 64 * 1024


def test_the_larger_raw_files_are_gzipped_so_every_gpu_call_carries_the_tree() -> None:
    """A device call copies the whole working tree within its 64 MiB; uncompressed, this
    folder had grown to 26 MB and left the CuTe DSL wheel no room. JSON over 64 KiB is
    committed gzipped (``zcat``; ``kernelwatch import`` reads ``.jsonl.gz``), except the
    named plain files and the driver's own outputs beside a manifest row's records
    (which this module reads for their command and date)."""
    row_dirs = {(DATA / r.file).parent for r in load_manifest(MANIFEST).run}
    too_big = [
        str(p.relative_to(DATA))
        for p in DATA.rglob("*")
        if p.suffix in (".json", ".jsonl")
        and p.stat().st_size > PLAIN_LIMIT
        and p.name not in PLAIN_BY_NAME
        and not (p.suffix == ".json" and p.parent in row_dirs)
    ]
    assert too_big == [], "gzip -9n these (and point their references at .gz)"


def test_every_committed_record_file_is_in_the_manifest() -> None:
    named = {r.file for r in load_manifest(MANIFEST).run}
    assert _record_files() == named


def _driver_outputs(folder: Path) -> list[dict[str, object]]:
    """The driver's ``SUB.json`` files beside a record file (they carry argv and the date)."""
    found = []
    for path in sorted(folder.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and "argv" in doc and "machine" in doc:
            found.append(doc)
    return found


def test_the_index_agrees_with_the_files_it_names() -> None:
    """Card, date and command of each row are those the files themselves recorded."""
    manifest = load_manifest(MANIFEST)
    check_cards(manifest, DATA)  # every record naming its GPU names the row's card
    made_by_driver = 0
    for row in manifest.run:
        assert row.command.strip() and row.card.startswith("GPU-"), row.file
        for doc in _driver_outputs((DATA / row.file).parent):
            if doc["command"] == "prelude":
                continue
            made_by_driver += 1
            argv = " ".join(str(a) for a in doc["argv"])
            assert f"{doc['command']} " in row.command and all(
                str(a) in row.command for a in doc["argv"]
            ), f"{row.file}: the index's command does not say {argv}"
            machine = doc["machine"]
            assert isinstance(machine, dict)
            when = str(machine["date_utc"])
            assert str(row.measured).replace(" ", "T").startswith(when[:16].replace("Z", "")), (
                f"{row.file}: measured {row.measured}, the driver's JSON says {when}"
            )
    assert made_by_driver >= 7  # the bisection steps and the FA2 files of 2026-12-01


@dataclass(frozen=True)
class Imported:
    """The whole dataset imported once into SQLite (a module's tests share it: the import
    is the slowest part of this file), with what the import said."""

    factory: sessionmaker[Session]
    env: dict[str, str]
    runs: list[dict[str, object]]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Imported:
    tmp = tmp_path_factory.mktemp("dataset")
    url = f"sqlite:///{tmp / 'kw.db'}"
    upgrade(url)
    env = {"KW_DATABASE_URL": url, "KW_DATA_DIR": str(tmp)}
    out = run_cli("import", str(MANIFEST), "--json", env=env)
    assert out.returncode == 0, out.stderr
    return Imported(sessionmaker(bind=make_engine(url)), env, json.loads(out.stdout)["runs"])


@pytest.fixture(scope="module")
def imported(dataset: Imported) -> sessionmaker[Session]:
    """The imported dataset, for the tests that only read it."""
    return dataset.factory


def test_the_whole_dataset_imports_into_sqlite_with_its_known_figures(dataset: Imported) -> None:
    factory, env = dataset.factory, dataset.env
    assert [r["created"] for r in dataset.runs] == [True] * RUNS
    with factory() as s:
        runs = s.scalars(select(Run).order_by(Run.id)).all()
        assert len(runs) == RUNS and {r.trigger for r in runs} == {"import"}
        sizes = [16, 16, 6, 6, 1, 1, 1, 1, 1, 4, 6] + [10] * 8 + [86]  # Liger x8, SDPA
        sizes += [7, 7, 7, 86]  # 2026-12-03: Liger paired x3, SDPA cuDNN
        sizes += [7, 7, 7, 7, 86]  # 2026-12-03, later: Liger paired x4, SDPA efficient
        sizes += [204, 7, 7]  # 2026-12-04: FlashInfer 0.5.3's decode suite; 0.5.3 → 0.6.0
        sizes += [156]  # 2026-12-05: FlashInfer 0.6.0's decode suite, cut by its timeout
        sizes += [10, 10, 20]  # 2026-12-06: FA3's three commits, FA2's two tags, paired
        sizes += [24]  # 2026-12-06: the CuTe DSL GEMM's two tile recipes, paired
        assert [len(r.results) for r in runs] == sizes
        # measured dates, not the day of the import
        assert [r.created.date().isoformat() for r in runs] == [
            "2026-11-29", "2026-11-29", "2026-11-30", "2026-11-30", *["2026-12-01"] * 7,
            *["2026-12-02"] * 9, *["2026-12-03"] * 9, *["2026-12-04"] * 3, "2026-12-05",
            *["2026-12-06"] * 4,
        ]  # fmt: skip
        by_sha = {r.commit.sha: r for r in runs[:4]}
        # FA3's commits carry their own dates and are in history order
        fa3 = s.scalars(
            select(Commit).where(Commit.sha.in_([FA3_A, FA3_B, FA3_C])).order_by(Commit.sequence)
        ).all()
        assert [c.sha for c in fa3] == [FA3_A, FA3_B, FA3_C]
        assert fa3[0].committed_at is not None and fa3[0].committed_at.year == 2025

        def gqa(run: Run) -> Result:
            (hit,) = [r for r in run.results if r.record["params"].get("kv_heads") == 1]
            return hit

        # the paired file is judged by its own interleaved measurement: the GQA-8
        # prefix case regressed 16c7f0f6 → 3e87e421 (ratio 1.408, [1.011, 1.961])
        b = by_sha[FA3_B]
        assert b.options.paired and b.verdict == "fail"
        hit = gqa(b)
        assert hit.verdict == "regression"
        assert hit.ratio == pytest.approx(1.408, abs=5e-4)
        assert hit.record["paired"]["baseline_median"] * 1e6 == pytest.approx(114.8, abs=0.05)
        # c75d019d benched alone: 114.8 µs, back at 16c7f0f6's time
        c = by_sha[FA3_C]
        assert c.baseline_run_id == b.id
        assert gqa(c).median_s * 1e6 == pytest.approx(114.8, abs=0.05)
        squares = sorted(r.median_s * 1e6 for r in c.results if r.status == "pass")
        assert squares[1:] == pytest.approx([843.7, 1623.0], abs=0.05)
        # the first suite: every case passed on both cards
        morning = by_sha["h200-2026-11-29-morning"]
        assert all(r.status == "pass" for r in morning.results)
        assert {r.record["device"]["uuid"] for r in morning.results} == {
            "GPU-9731c860-4a3e-9394-8773-50358882226c"
        }
        # FlashInfer 0.6.0 against 0.5.3's run of the same 7 cases on the same card, not
        # against 0.5.3's whole suite on another card: nothing blocks
        whole, subset, newer, suite060 = runs[-8:-4]
        assert newer.baseline_run_id == subset.id and newer.verdict == "neutral"
        bases = [s.get(Result, r.baseline_result_id) for r in newer.results]
        assert {b.run_id for b in bases if b is not None} == {subset.id} and None not in bases
        assert all(r.status == "pass" for r in whole.results + newer.results)
        # FlashInfer 0.6.0's whole decode suite against 0.5.3's (2026-12-05, another
        # card): tensor-core decode (GQA groups 7 and 8) went to FA3 and is 3.6-27.6x
        # slower, the CUDA-core groups 1-4 in 16 bits are not; FP8 KV with group 8 fails
        # to build (docs/measurement.md section 22)
        assert suite060.baseline_run_id == whole.id and suite060.verdict == "error"

        def group(r: Result) -> int:
            p = r.record["params"]
            return int(p["heads"]) // int(p["kv_heads"])

        sixteen = [r for r in suite060.results
                   if r.status == "pass" and "kv_dtype" not in r.record["params"]]  # fmt: skip
        tensor_cores = [r for r in sixteen if group(r) > 4]
        assert len(tensor_cores) == 72
        assert {r.verdict for r in tensor_cores} == {"regression"}
        assert min(r.ratio for r in tensor_cores) > 3.5
        assert "regression" not in {r.verdict for r in sixteen if group(r) <= 4}
        built = [r for r in suite060.results if "Ninja build failed" in (r.error or "")]
        assert len(built) == 3 and all(group(r) == 8 for r in built)
        suite060_id, subset060_id = suite060.id, newer.id
        # FA3 and FA2 paired through the sandboxed worker (2026-12-06, docs/measurement.md
        # section 24): every measured case unchanged, the GQA-8 prefix case among them
        # (its 1.41 above was timed before the host guard)
        fa3_b, fa3_c, fa2, tiles = runs[-4:]
        assert all(r.options.paired and r.verdict == "pass" for r in (fa3_b, fa3_c, fa2))
        assert fa3_c.baseline_sha == fa3_b.commit.sha
        assert gqa(fa3_b).verdict == "unchanged"
        assert gqa(fa3_b).ratio == pytest.approx(1.0004, abs=5e-4)
        measured = [r for r in fa2.results if r.status == "pass"]
        assert len(measured) == 6 and {r.verdict for r in measured} == {"unchanged"}
        assert all(r.error for r in fa2.results if r.status == "skip")
        # CUTLASS's CuTe DSL, the default tiles against 64x64, paired through the
        # sandboxed worker on the H200 (2026-12-06, docs/measurement.md section 31): the
        # H100-tuned qkv tile is a confirmed regression there, the large GEMMs ~2.9x faster
        assert tiles.options.paired and tiles.verdict == "fail"
        bf16 = {r.record["params"]["m"]: r for r in tiles.results if r.status == "pass"
                and r.record["params"].get("layer") == "qkv"}  # fmt: skip
        assert bf16[64].verdict == "regression" and bf16[64].ratio == pytest.approx(1.063, abs=1e-3)
        assert bf16[4096].verdict == "improvement" and bf16[4096].ratio < 0.35
        assert sum(r.status == "pass" for r in tiles.results) == 10
    # each imported run reads its own row's note, though both share the commit (whose
    # message the first import wrote)
    for run_id, note in ((suite060_id, "FlashInfer 0.6.0's decode suite"),
                         (subset060_id, "FlashInfer 0.6.0 against 0.5.3")):  # fmt: skip
        shown = run_cli("show", str(run_id), "--json", env=env)
        assert json.loads(shown.stdout)["message"].startswith(note), shown.stdout[:300]
    again = run_cli("import", str(MANIFEST), "--json", env=env)
    assert again.returncode == 0, again.stderr
    assert [r["created"] for r in json.loads(again.stdout)["runs"]] == [False] * RUNS
    with factory() as s:
        assert len(s.scalars(select(Run)).all()) == RUNS


def test_the_bisection_steps_and_fa2_versions_import_with_their_verdicts(
    imported: sessionmaker[Session],
) -> None:
    with imported() as s:
        runs = s.scalars(select(Run).order_by(Run.id)).all()
        # the bisection's confirmation: 59df2f9b against its parent 3effce82, 1.68x
        (confirm,) = [r for r in runs if r.commit.sha == FA3_CULPRIT and "step3" in
                      str(r.options.imported_from)]  # fmt: skip
        (hit,) = confirm.results
        assert hit.verdict == "regression" and confirm.verdict == "fail"
        assert hit.ratio == pytest.approx(1.680, abs=5e-4)
        # FA2 v2.8.3 against v2.8.2 (only setup.py differs): every case unchanged
        (fa2,) = [r for r in runs if r.commit.sha == FA2_V283 and r.options.paired]
        assert {r.verdict for r in fa2.results} == {"unchanged"} and len(fa2.results) == 4
        assert all(abs(r.ratio - 1.0) < 0.002 for r in fa2.results)


def test_liger_kernels_history_through_the_sandboxed_worker_imports_in_commit_order(
    imported: sessionmaker[Session],
) -> None:
    """2026-12-02: Liger-Kernel's 8 replayed commits measured through ``kernelwatch
    worker`` with bubblewrap on the H200; RMSNorm, LayerNorm and GeGLU ran on a GPU for
    the first time, and every bf16 case passed its correctness check at every commit."""
    with imported() as s:
        liger = s.scalars(
            select(Run)
            .join(Commit)
            .join(Repository)
            .where(Repository.name == "Liger-Kernel")
            .order_by(Run.id)
        ).all()
        paired = [r for r in liger if r.options.paired]
        liger = [r for r in liger if not r.options.paired]
        assert len(liger) == 8
        years = [r.commit.committed_at.year if r.commit.committed_at else 0 for r in liger]
        assert years == [2025] * 2 + [2026] * 6  # the upstream dates: trends in commit order
        for run in liger:
            kernels = {r.record["kernel"] for r in run.results}
            assert kernels == {"softmax", "rmsnorm", "layernorm", "swiglu", "geglu"}
            assert {r.status for r in run.results} == {"pass"}
            assert {r.record["params"]["dtype"] for r in run.results} == {"bfloat16"}
        first = {(r.record["kernel"], r.record["params"]["rows"]): r.median_s
                 for r in liger[0].results}  # fmt: skip
        assert (first[("layernorm", 16384)] or 0) * 1e6 == pytest.approx(71.7, abs=0.05)
        assert (first[("geglu", 16384)] or 0) * 1e6 == pytest.approx(428.6, abs=0.05)
        # separate runs, judged with the case's run-to-run spread (run_spread.py): the
        # softmax 32768x1000 that jumped +3.4 % at upstream 5101e3cd with no change to
        # its code is open, not a failed run, and no run of the history fails
        assert [r.verdict for r in liger[1:]] == ["neutral"] * 7

        def case(r: Result) -> tuple[str, int]:
            return r.record["kernel"], r.record["params"]["rows"]

        (jump,) = [r for r in liger[2].results if case(r) == ("softmax", 32768)]
        assert jump.verdict == "inconclusive" and jump.ratio == pytest.approx(1.034, abs=1e-3)
        # 2026-12-03: every commit after the first paired with the one before on one GPU
        # through the sandboxed worker (two calls); the same softmax at the same commit
        # reads unchanged within ±0.3 %, and no paired run blocks
        assert [r.commit.sha for r in paired] == [r.commit.sha for r in liger[1:]]
        assert [r.verdict for r in paired] == ["pass", "neutral", "pass", *["neutral"] * 2,
                                                "pass", "pass"]  # fmt: skip
        (same,) = [r for r in paired[1].results if case(r) == ("softmax", 32768)]
        assert same.verdict == "unchanged"
        assert same.ratio_ci_low > 0.997 and same.ratio_ci_high < 1.003
        verdicts = [r.verdict for run in paired for r in run.results]
        assert verdicts.count("unchanged") == 46 and verdicts.count("inconclusive") == 3


def test_a_file_measured_on_another_card_is_refused(tmp_path: Path) -> None:
    text = MANIFEST.read_text(encoding="utf-8").replace(
        "GPU-d2859325-edbe-b61a-bba4-0c6245293d67", "GPU-00000000-0000-0000-0000-000000000000"
    )
    (tmp_path / "m.toml").write_text(text, encoding="utf-8")
    manifest = load_manifest(tmp_path / "m.toml")
    with pytest.raises(ConfigError, match="bench-h200-2026-11-29-run5.jsonl: record 1"):
        check_cards(manifest, DATA)


def test_a_parent_outside_the_manifest_is_refused(tmp_path: Path) -> None:
    text = MANIFEST.read_text(encoding="utf-8").replace(
        'parent = "h200-2026-11-29-morning"', 'parent = "h200-yesterday"'
    )
    (tmp_path / "m.toml").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match="parent 'h200-yesterday' is not a commit"):
        load_manifest(tmp_path / "m.toml")


def test_records_without_their_commit_are_refused_by_the_cli(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    upgrade(url)
    env = {"KW_DATABASE_URL": url, "KW_DATA_DIR": str(tmp_path)}
    out = run_cli("import", str(DATA / "bench-h200-2026-11-29.jsonl"), "--repo", "x", env=env)
    assert out.returncode == 2
    assert "needs --commit, --device-class" in out.stderr
