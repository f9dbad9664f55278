import pytest

from kernelwatch.jobs.errors import ConfigError
from kernelwatch.jobs.repoconfig import parse


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
    ],
)
def test_bad_files_are_config_errors(text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        parse(text)
