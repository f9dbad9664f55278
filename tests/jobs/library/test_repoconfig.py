import pytest

from kernelwatch.jobs.errors import ConfigError
from kernelwatch.jobs.library.repoconfig import Thresholds, parse


def test_defaults_without_a_file() -> None:
    cfg = parse(None)
    assert cfg.install.recipe == "pip" and cfg.suites == ("basic",)
    assert cfg.regression_threshold is None


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
    assert cfg.module == "flash_attn_interface"
    assert cfg.install.command == ("python", "setup.py", "build_ext", "--inplace")
    assert cfg.install.env == {"MAX_JOBS": "16"} and cfg.install.timeout_s == 900
    assert cfg.suites == ("basic", "attention") and cfg.regression_threshold == 0.02


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
        ("[thresholds]\nregresion = 0.1", "unknown keys"),
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
    t = Thresholds(cfg.regression_threshold or 0.05, cfg.suite_thresholds, cfg.case_thresholds)
    assert t.for_case("prefill", "attention", "causal=True, seq=128") == 0.2  # first match
    assert t.for_case("prefill", "attention_varlen", "seq=4096") == 0.1
    assert t.for_case("decode", "decode_paged", "batch=64") == 0.02
    assert t.for_case("basic", "softmax", "rows=4") == 0.05
    assert t.smallest() == 0.02
    # what a run stores in its options and analysis reads back
    assert Thresholds.from_options(0.05, t.to_options()) == t
