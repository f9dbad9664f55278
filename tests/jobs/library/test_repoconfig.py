"""The one reader of ``.kernelwatch.toml``: defaults, every table, and errors that name the key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernelwatch.jobs.errors import ConfigError
from kernelwatch.jobs.library.repoconfig import Thresholds, parse, parse_install


def test_defaults_without_a_file() -> None:
    cfg = parse(None)
    assert cfg.install.recipe == "pip" and cfg.suites.names == ("basic",)
    assert cfg.thresholds.regression is None


def test_full_file() -> None:
    cfg = parse("""
[library]
name = "fa3"
module = "flash_attn_interface"
[install]
recipe = "command"
command = ["python", "setup.py", "build_ext", "--inplace"]
env = { MAX_JOBS = "16" }
timeout_s = 900
[suites]
names = ["basic", "attention"]
[thresholds]
regression = 0.02
""")
    assert cfg.library.module == "flash_attn_interface"
    # install.command (one argv) is the one-command spelling of install.commands
    assert cfg.install.commands == (("python", "setup.py", "build_ext", "--inplace"),)
    assert cfg.install.env == {"MAX_JOBS": "16"} and cfg.install.timeout_s == 900
    assert cfg.suites.names == ("basic", "attention") and cfg.thresholds.regression == 0.02


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[install\nrecipe=", ".kernelwatch.toml"),
        ('[install]\nrecipe = "curl"', "install.recipe"),
        ('[install]\nrecipe = "command"\ncommand = "make && rm -rf /"', "argv"),
        ("[suites]\nnames = []", "suites.names"),
        ("[thresholds]\nregression = -1", "positive fraction"),
        ('[library]\nmodule = "os; rm"', "module name"),
        ('[thresholds.suites]\ndecode = "fast"', "thresholds.suites.decode"),
        ("[[thresholds.cases]]\nkernel = 'a*'", "takes kernel, params"),
        ("[[thresholds.cases]]\nregression = 0.1\nshell = 'x'", "takes kernel, params"),
        ("[thresholds]\nregresion = 0.1", "unknown key"),
    ],
)
def test_bad_files_are_config_errors(text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        parse(text)


def test_thresholds_per_case_pattern_then_suite_then_repository() -> None:
    cfg = parse("""
[thresholds]
regression = 0.05
[thresholds.suites]
decode = 0.02
[[thresholds.cases]]
kernel = "attention*"
params = "*seq=128*"
regression = 0.2
[[thresholds.cases]]
kernel = "attention*"
regression = 0.1
""")
    t = cfg.thresholds.overrides(cfg.thresholds.regression or 0.05)
    assert t.for_case("prefill", "attention", "causal=True, seq=128") == 0.2  # first match
    assert t.for_case("prefill", "attention_varlen", "seq=4096") == 0.1
    assert t.for_case("decode", "decode_paged", "batch=64") == 0.02
    assert t.for_case("basic", "softmax", "rows=4") == 0.05
    assert t.smallest() == 0.02
    # what a run stores in its options and analysis reads back
    assert Thresholds.from_options(0.05, t.to_options()) == t


# ------------------------------------------------------------------ one model, clear errors

FA3 = Path(__file__).resolve().parents[3] / "docs" / "flash-attention.kernelwatch.toml"


def _error(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text)
    return str(info.value)


def test_a_misspelt_table_is_an_error_with_a_suggestion_not_the_default_suite() -> None:
    assert _error('[suite]\nnames = ["decode"]\n') == (
        ".kernelwatch.toml: unknown table [suite]; did you mean [suites]?"
    )
    assert _error("[flags]\nx = 1\n") == (
        ".kernelwatch.toml: unknown table [flags]; the tables are "
        "[library], [install], [gpus], [suites], [thresholds], [gate]"
    )
    assert "did you mean [suites]?" in _error("suite = 3\n")  # a top-level key, not a table


def test_an_unknown_recipe_names_the_allowed_ones() -> None:
    assert _error('[install]\nrecipe = "conda"\n') == (
        '.kernelwatch.toml: install.recipe "conda" is not one of pip, pythonpath, command'
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[thresholds]\nregression = "5%"', 'thresholds.regression must be a number, got "5%"'),
        ("[thresholds]\nregression = true", "thresholds.regression must be a number, got true"),
        ("[library]\nname = 3", "library.name must be a string, got 3"),
        ('[gpus]\nclasses = "h100"', 'gpus.classes must be a non-empty list of names, got "h100"'),
        (
            "[suites]\nkernels = ['rmsnorm', 3]",
            "suites.kernels must be a list of non-empty strings",
        ),
        ('install = "pip"', 'install must be a table, got "pip"'),
        ("[install]\nenv = { A = [1] }", "install.env.A must be a string (quote it), got [1]"),
        ('[install]\ncommands = [["a"], "b"]', "install.commands[1] must be a non-empty list"),
        ("[[thresholds.cases]]\nregression = '10%'", "thresholds.cases[0].regression must be a"),
    ],
)
def test_a_wrong_type_names_the_key_and_what_it_must_be(text: str, message: str) -> None:
    assert _error(text).startswith(f".kernelwatch.toml: {message}")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[gpus]\nclass = ['h100']",
            "unknown key gpus.class; did you mean classes? [gpus] takes classes",
        ),
        (
            "[install.profiles.trimmed]\ntimeout = 900",
            "unknown key install.profiles.trimmed.timeout; did you mean timeout_s? "
            "[install.profiles.trimmed] takes recipe, command, commands, cwd, subdirectory, "
            "pythonpath, submodules, env, timeout_s",
        ),
        (
            "[install.profile.trimmed]\nenv = {}",
            "unknown table [install.profile]; did you mean [install.profiles]?",
        ),
        # the profile a recipe was resolved to is the service's to choose, not the file's
        ('[install]\nprofile = "trimmed"', "unknown key install.profile; did you mean profiles?"),
        ("[suites]\nname = ['basic']", "unknown key suites.name; did you mean names?"),
        ("[library]\nmodules = 'x'", "unknown key library.modules; did you mean module?"),
    ],
)
def test_an_unknown_key_inside_a_table_is_named_with_what_the_table_takes(
    text: str, message: str
) -> None:
    assert message in _error(text)


def test_every_problem_of_a_file_is_reported_at_once() -> None:
    text = '[suite]\nnames = ["a"]\n[thresholds]\nregression = "5%"\n'
    assert _error(text) == (
        '.kernelwatch.toml: thresholds.regression must be a number, got "5%"; '
        "unknown table [suite]; did you mean [suites]?"
    )


def test_the_fa3_example_parses_into_one_model() -> None:
    cfg = parse(FA3.read_text())
    assert cfg.library.name == "flash-attn-3"
    assert cfg.library.module == "kernelwatch.kernels.adapters.fa3"
    assert cfg.install.recipe == "command" and len(cfg.install.commands) == 2
    assert set(cfg.install.profiles) == {"trimmed", "full"}
    assert cfg.install.profile_for["nightly"] == "full"
    assert cfg.suites.names == ("prefill", "decode") and cfg.suites.kernels is None
    assert cfg.thresholds.regression == 0.03 and cfg.gpus.classes is None
    trimmed = cfg.install.resolve("trimmed")
    assert trimmed.profile == "trimmed" and trimmed.timeout_s == 900 and not trimmed.profiles
    assert trimmed.env["MAX_JOBS"] == "16" and trimmed.env["FLASH_ATTENTION_DISABLE_FP8"] == "TRUE"


def test_suites_pick_kernels_and_gpus_pick_offered_classes() -> None:
    cfg = parse('[suites]\nnames = ["basic"]\nkernels = ["softmax", "rmsnorm"]\n'
                '[gpus]\nclasses = ["h200", "b200"]\n')  # fmt: skip
    assert cfg.suites.kernels == ("softmax", "rmsnorm")
    assert cfg.gpus.pick(["h100", "h200"]) == ["h200"]
    assert cfg.gpus.pick(["h100"]) == ["h100"]  # none offered: what the server has
    assert parse(None).gpus.pick(("cpu",)) == ["cpu"]


def test_server_install_config_is_validated_and_named_as_the_servers() -> None:
    assert parse_install({"recipe": "pip", "env": {"A": "1"}}, "server [install]").env == {"A": "1"}
    with pytest.raises(ConfigError, match=r"^server \[install\]: unknown key install\.bogus"):
        parse_install({"bogus": 1}, "server [install]")


def test_the_documented_examples_parse() -> None:
    """The README's example, the reader's docstring and the demo's file cannot drift."""
    from kernelwatch.jobs.library import repoconfig

    root = Path(__file__).resolve().parents[3]
    readme = root / "README.md"
    block = readme.read_text().split("A repository may carry `.kernelwatch.toml`", 1)[1]
    example = block.split("```toml\n", 1)[1].split("```", 1)[0]
    assert parse(example).suites.kernels == ("softmax", "rmsnorm")
    doc = (repoconfig.__doc__ or "").split("Example::\n", 1)[1].split("``[install]`` build", 1)[0]
    assert parse(doc).gpus.classes == ("h100", "h200")
    demo = root / "jobs" / "demo" / "library" / "kernelwatch.toml.tmpl"
    assert parse(demo.read_text()).library.module == "tinykern"


def test_a_mistyped_kernel_is_a_config_error_with_a_suggestion() -> None:
    assert _error('[suites]\nnames = ["gemm"]\nkernels = ["gemm_groupd"]\n') == (
        ".kernelwatch.toml: suites.kernels unknown kernel 'gemm_groupd' (did you mean "
        "'gemm_grouped'?) in suite gemm; its kernels: gemm, gemm_fp8_rowwise, "
        "gemm_fp8_tensorwise, gemm_grouped, gemm_grouped_fp8_rowwise"
    )
    # a suite from a plugin (the library's own package) is only known to the worker
    assert parse('[suites]\nnames = ["mylib"]\nkernels = ["anything"]\n').suites.kernels


# ----------------------------------------------------------------------------- hostile files
# Issue 24: 10 kB of arrays nested 5,000 deep raised RecursionError (HTTP 500 on every
# delivery, a run that "died" three times). Every way a file breaks the reader is a
# ConfigError naming the file, decided before tomllib recurses.


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("a = " + "[" * 5000 + "]" * 5000, "arrays and inline tables nested 5000 deep"),
        ("a = " + "{b = " * 3000 + "1" + "}" * 3000, "arrays and inline tables nested 3000 deep"),
        ("a" + ".b" * 3000 + " = 1\n", "tables nested 3001 deep"),
        ("[" + ".".join(["t"] * 3000) + "]\nx = 1\n", "tables nested 3001 deep"),
        ("a = '" + "x" * 300_000 + "'\n", "over the limit of 262144"),
    ],
    ids=["arrays", "inline-tables", "dotted-keys", "table-header", "size"],
)
def test_a_file_built_to_break_the_parser_is_a_config_error(text: str, said: str) -> None:
    with pytest.raises(ConfigError, match=r"^\.kernelwatch\.toml: ") as err:
        parse(text)
    assert said in str(err.value)


def test_brackets_inside_strings_and_comments_are_not_nesting() -> None:
    from kernelwatch.jobs.library.repoconfig import nesting

    text = (
        '[library]\nname = "[[[[{{{{"   # ]]]] [[[[ {{{{\n'
        "module = '[[[['\n"
        'x = """\n[[[[[[\n\\"""[[[["""\n'
        "y = '''[[[[\n'''\n"
        "z = [[1, 2], {a = [3]}]\n"
    )
    assert nesting(text) == 3
    assert nesting("a = " + "[" * 40 + "]" * 40) == 40


def test_a_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    from kernelwatch.jobs.library.mirror import Mirror
    from kernelwatch.jobs.library.repoconfig import read_at
    from tests.helpers import git, make_repo

    src = tmp_path / "lib"
    make_repo(src, {"README": "x\n"})
    (src / ".kernelwatch.toml").write_bytes(b"[library]\nname = '\xff\xfe'\n")
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", "latin-1")
    sha = git(src, "rev-parse", "HEAD")
    mirror = Mirror(tmp_path / "mirrors", str(src))
    mirror.sync()
    with pytest.raises(ConfigError, match=r"^\.kernelwatch\.toml: not UTF-8 text"):
        read_at(mirror, sha)
    (src / ".kernelwatch.toml").write_text("a = '" + "x" * 300_000 + "'\n")
    git(src, "commit", "-qam", "huge")
    mirror.sync()
    with pytest.raises(ConfigError, match=r"bytes, over the limit of 262144"):
        read_at(mirror, git(src, "rev-parse", "HEAD"))


# TOML's \u0000 escape parses; a NUL reached Popen as "embedded null byte", an internal
# error of the worker instead of the file's (found by an audit, 2026-12-05)
@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('[install]\ncwd = "a\\u0000b"', "install.cwd"),
        ('[install]\nenv = {X = "a\\u0000b"}', "install.env.X"),
        ('[install]\ncommands = [["make", "a\\u0000"]]', "install.commands[0][1]"),
        ('[suites]\nnames = ["basic\\u0000x"]', "suites.names[0]"),
        ('[install.profiles.t]\nsubmodules = ["c\\u0000"]', "install.profiles.t.submodules[0]"),
    ],
)  # fmt: skip
def test_a_nul_anywhere_is_a_config_error_naming_its_key(text: str, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(text)
    assert str(err.value).startswith(f".kernelwatch.toml: {key} holds a NUL character")


@pytest.mark.parametrize("path", [".", ""])
def test_a_submodule_path_must_name_a_folder_not_the_checkout(path: str) -> None:
    with pytest.raises(ConfigError, match="install.submodules.0.*not the checkout itself"):
        parse(f'[install]\nsubmodules = ["{path}"]')


@pytest.mark.parametrize("name", ["../../../../../tmp/x/grid", "/etc/grid", "a.b", "-x", "a b"])
def test_a_suite_name_must_be_a_plain_name_not_a_path(tmp_path: Path, name: str) -> None:
    # audit, 2026-12-05: a path read any *.toml on the host and the error (published to the
    # commit's status) listed its kernels; a missing file answered differently
    with pytest.raises(ConfigError) as err:
        parse(f'[suites]\nnames = ["basic", "{name}"]\nkernels = ["softmax"]\n')
    assert str(err.value) == (
        ".kernelwatch.toml: suites.names[1] must be a suite name such as basic or mylib-gemm "
        f'(letters, digits, _ and -, not starting with _ or -), got "{name}"'
    )


def test_a_suite_name_that_reaches_a_hosts_file_reads_nothing(tmp_path: Path) -> None:
    from importlib import resources

    (tmp_path / "grid.toml").write_text('[[smoke]]\nkernel = "SECRET_TOKEN_abc"\n')
    package = Path(str(resources.files("kernelwatch.kernels.suites")))
    name = os.path.relpath(tmp_path / "grid", package)
    with pytest.raises(ConfigError) as err:
        parse(f'[suites]\nnames = ["{name}"]\nkernels = ["softmax"]\n')
    assert "SECRET" not in str(err.value) and "must be a suite name" in str(err.value)
