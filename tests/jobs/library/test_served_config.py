"""Service-side ``.kernelwatch.toml`` files (``KW_REPO_CONFIGS``) for libraries without one.

The table's two spellings and its errors, how sources match the way ``Mirror`` spells
them, that the one reader takes the service's file over the repository's at every
commit, and that a run through the executor measures what that file says and says so in
its build log.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.migrate import upgrade
from kernelwatch.db.models import Result, Run
from kernelwatch.db.session import make_engine
from kernelwatch.jobs.errors import ConfigError
from kernelwatch.jobs.library import repoconfig, served
from kernelwatch.jobs.library.mirror import Mirror
from kernelwatch.jobs.planning.broker import make_celery
from kernelwatch.jobs.planning.plan import RunRequest, plan
from kernelwatch.worker.executor import execute
from tests.helpers import make_repo
from tests.worker.test_repo_config_run import ONLY_SOFTMAX
from tests.worker.test_repo_config_run import TOML as SERVED

URL = "https://github.com/linkedin/Liger-Kernel"


def test_the_table_reads_as_json_or_as_pairs_and_matches_sources_as_mirrors_spell_them(
    tmp_path: Path,
) -> None:
    f = tmp_path / "liger.toml"
    as_json = served.parse_table(json.dumps({URL + ".git": str(f)}))
    as_pairs = served.parse_table(f"{URL}/={f},\n{tmp_path / 'repo'}={f}\n")
    assert served.served_file(URL, as_json) == f
    assert served.served_file(URL + "/", as_pairs) == f
    assert served.served_file(str(tmp_path / "x" / ".." / "repo"), as_pairs) == f
    assert served.served_file("https://github.com/other/lib", as_pairs) is None
    assert served.parse_table("") == {} and served.served_file(URL, None) is None


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("https://x/y=relative.toml", "must be an absolute path"),
        ("no-equals-sign", "is not source=path"),
        ("{not json", "KW_REPO_CONFIGS:"),
        ('{"https://x/y": 3}', "source: path strings"),
        ("--upload-pack=/x.toml", "refusing source"),
    ],
)
def test_a_malformed_table_is_an_error_naming_the_variable(text: str, why: str) -> None:
    with pytest.raises(ConfigError, match="KW_REPO_CONFIGS") as err:
        served.parse_table(text)
    assert why in str(err.value)


def test_the_settings_take_the_table_and_the_offline_switch_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KW_REPO_CONFIGS", f"{URL}=/etc/kw/liger.toml")
    monkeypatch.setenv("KW_OFFLINE", "1")
    s = Settings()
    assert s.offline is True
    assert served.served_file(URL, served.parse_table(s.repo_configs)) == Path("/etc/kw/liger.toml")
    monkeypatch.delenv("KW_OFFLINE")
    assert Settings().offline is False


def test_the_reader_takes_the_services_file_over_the_repositorys(tmp_path: Path) -> None:
    src = tmp_path / "lib"
    own = '[library]\nmodule = "own"\n[suites]\nnames = ["basic"]\n'
    sha = make_repo(src, {"lib/__init__.py": "", ".kernelwatch.toml": own})
    mirror = Mirror(tmp_path / "mirrors", str(src))
    mirror.sync()
    assert repoconfig.read_at(mirror, sha).library.module == "own"
    f = tmp_path / "served.toml"
    f.write_text(SERVED)
    table = served.parse_table(f"{src}={f}")
    config = repoconfig.read_at(mirror, sha, table)
    assert config.library.module == "onlysoftmax" and config.suites.kernels == ("softmax",)
    f.write_text('[suite]\nnames = ["basic"]\n')  # a typo there names that file
    with pytest.raises(ConfigError, match=f"^{f}: unknown table \\[suite\\]"):
        repoconfig.read_at(mirror, sha, table)
    f.unlink()
    with pytest.raises(ConfigError, match="cannot read"):
        repoconfig.read_at(mirror, sha, table)


@pytest.mark.slow
def test_a_run_of_a_library_without_a_file_measures_what_the_services_file_says(
    tmp_path: Path,
) -> None:
    f = tmp_path / "onlysoftmax.kernelwatch.toml"
    f.write_text(SERVED)
    src = tmp_path / "onlysoftmax"
    sha = make_repo(src, {"onlysoftmax/__init__.py": ONLY_SOFTMAX})  # no .kernelwatch.toml
    settings = Settings(
        data_dir=tmp_path / "data",
        suite_timeout_s=300,
        repo_configs=json.dumps({str(src): str(f)}),
        offline=True,
    )
    settings.ensure_dirs()
    upgrade(settings.resolved_database_url)
    factory: sessionmaker[Session] = sessionmaker(
        bind=make_engine(settings.resolved_database_url), expire_on_commit=False
    )
    req = RunRequest(source=str(src), commits=[sha], measure_baseline=False)
    (planned,) = plan(factory, settings, make_celery(settings), req)
    assert execute(factory, settings, planned.id, worker="test@host") == "succeeded"
    with factory() as s:
        run = s.get(Run, planned.id)
        assert run is not None
        kernels = {r.record["kernel"] for r in s.scalars(select(Result)).all()}
        log = run.build_log or ""
    # without the service's file: the basic suite's four kernels, three of them errors
    assert kernels == {"softmax"}
    assert f"configuration: {f} (KW_REPO_CONFIGS, the service's)" in log
