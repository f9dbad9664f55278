"""Build recipes with profiles (trimmed for PR gating, full for nightly) and server overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelwatch.jobs.errors import ConfigError
from kernelwatch.worker import recipes

FA3 = Path(__file__).resolve().parents[2] / "docs" / "flash-attention.kernelwatch.toml"


def test_the_fa3_example_selects_trimmed_for_prs_and_full_nightly() -> None:
    rs = recipes.parse(FA3.read_text())
    trimmed = rs.select(trigger="pull_request")
    assert trimmed.profile == "trimmed" and trimmed.timeout_s == 900
    assert trimmed.cwd == "hopper" and trimmed.pythonpath == ("hopper",)
    assert trimmed.submodules == ("csrc/cutlass",)
    assert trimmed.env["MAX_JOBS"] == "16"  # base env kept under the profile's
    disabled = {k for k, v in trimmed.env.items() if k.startswith("FLASH_ATTENTION_DISABLE_")}
    assert "FLASH_ATTENTION_DISABLE_HDIM128" not in disabled and len(disabled) == 18
    full = rs.select(trigger="nightly")
    assert full.profile == "full" and not any("DISABLE" in k for k in full.env)
    assert rs.select().profile == recipes.DEFAULT_PROFILE
    assert rs.select("full") == full
    assert trimmed.argv("/opt/py")[-1] == ["/opt/py", "setup.py", "build_ext", "--inplace"]
    assert trimmed.fingerprint() != full.fingerprint()


def test_single_command_form_and_defaults() -> None:
    rs = recipes.parse('[install]\nrecipe = "command"\ncommand = ["make"]\n')
    assert rs.base.commands == (("make",),) and rs.profiles == {}
    assert recipes.parse(None).base.recipe == "pip"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[install]\nrecipe = "shell"', "recipe must be one of"),
        ('[install]\nrecipe = "command"', "needs install.command"),
        ('[install]\ncommand = "make all"', "argv"),
        ('[install]\ncwd = "../elsewhere"', "inside the checkout"),
        ('[install]\npythonpath = ["/abs"]', "inside the checkout"),
        ('[install]\ncommand = ["a"]\ncommands = [["b"]]', "not both"),
        ("[install]\ntimeout_s = -1", "positive"),
        ('[install]\nprofile_for = { nightly = "huge" }', "unknown profile"),
        ("[install]\nbogus = 1", "unknown install keys"),
        ("[install.profiles.trimmed]\nenv = 3", "table of strings"),
    ],
)
def test_bad_recipes_are_config_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        recipes.parse(text)


def test_unknown_profile_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="known: default, trimmed, full"):
        recipes.parse(FA3.read_text()).select("tiny")


def test_server_config_overrides_the_repository() -> None:
    server = {
        "env": {"MAX_JOBS": "8"},
        "profiles": {"trimmed": {"timeout_s": 300, "env": {"CCACHE_MAXSIZE": "50G"}}},
        "profile_for": {"push": "full"},
    }
    rs = recipes.parse(FA3.read_text(), server=server)
    trimmed = rs.select("trimmed")
    assert trimmed.timeout_s == 300
    assert trimmed.env["MAX_JOBS"] == "8" and trimmed.env["CCACHE_MAXSIZE"] == "50G"
    assert trimmed.env["FLASH_ATTENTION_DISABLE_FP8"] == "TRUE"  # repo's profile env kept
    assert rs.select(trigger="push").profile == "full"
    assert rs.select(trigger="pull_request").profile == "trimmed"
