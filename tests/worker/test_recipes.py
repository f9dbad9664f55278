"""Build recipes with profiles (trimmed for PR gating, full for nightly) and server overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kernelwatch.jobs.errors import ConfigError
from kernelwatch.jobs.library import repoconfig
from kernelwatch.worker import recipes

FA3 = Path(__file__).resolve().parents[2] / "docs" / "flash-attention.kernelwatch.toml"


def _recipes(text: str | None, server: dict[str, Any] | None = None) -> recipes.RecipeSet:
    """What the worker does: the one reader parses the file, recipes build from its model."""
    return recipes.recipe_set(repoconfig.parse(text).install, server)


def test_the_fa3_example_selects_trimmed_for_prs_and_full_nightly() -> None:
    rs = _recipes(FA3.read_text())
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
    rs = _recipes('[install]\nrecipe = "command"\ncommand = ["make"]\n')
    assert rs.base.commands == (("make",),) and rs.profiles == {}
    assert _recipes(None).base.recipe == "pip"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[install]\nrecipe = "shell"', 'recipe "shell" is not one of pip, pythonpath, command'),
        ('[install]\nrecipe = "command"', "needs install.command"),
        ('[install]\ncommand = "make all"', "argv"),
        ('[install]\ncwd = "../elsewhere"', "inside the checkout"),
        ('[install]\npythonpath = ["/abs"]', "inside the checkout"),
        ('[install]\ncommand = ["a"]\ncommands = [["b"]]', "not both"),
        ("[install]\ntimeout_s = -1", "positive"),
        ('[install]\nprofile_for = { nightly = "huge" }', "unknown profile"),
        ("[install]\nbogus = 1", r"unknown key install\.bogus; \[install\] takes recipe"),
        ("[install.profiles.trimmed]\nenv = 3", "table of strings"),
    ],
)
def test_bad_recipes_are_config_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _recipes(text)


def test_unknown_profile_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="known: default, trimmed, full"):
        _recipes(FA3.read_text()).select("tiny")


def test_server_config_overrides_the_repository() -> None:
    server = {
        "env": {"MAX_JOBS": "8"},
        "profiles": {"trimmed": {"timeout_s": 300, "env": {"NVCC_THREADS": "2"}}},
        "profile_for": {"push": "full"},
    }
    rs = _recipes(FA3.read_text(), server=server)
    trimmed = rs.select("trimmed")
    assert trimmed.timeout_s == 300
    assert trimmed.env["MAX_JOBS"] == "8" and trimmed.env["NVCC_THREADS"] == "2"
    assert trimmed.env["FLASH_ATTENTION_DISABLE_FP8"] == "TRUE"  # repo's profile env kept
    assert rs.select(trigger="push").profile == "full"
    assert rs.select(trigger="pull_request").profile == "trimmed"


def test_a_resolved_recipe_is_the_same_type_and_survives_a_round_trip() -> None:
    """One type for [install]: the file's table and what a build runs (its profile chosen)."""
    install = repoconfig.parse(FA3.read_text()).install
    trimmed = _recipes(FA3.read_text()).select("trimmed")
    assert type(trimmed) is type(install) is recipes.BuildRecipe
    assert recipes.BuildRecipe(**trimmed.__dict__) == trimmed  # what test_venvs relies on
    assert trimmed.profiles == {} and trimmed.profile_for == {}  # nothing left to choose


def test_a_profile_that_empties_the_commands_of_a_command_recipe_is_refused() -> None:
    text = '[install]\nrecipe = "command"\ncommand = ["make"]\n'
    text += "[install.profiles.none]\ncommands = []\n"
    with pytest.raises(ConfigError, match=r"install\.profiles\.none\.recipe = \"command\" needs"):
        _recipes(text)


def test_server_overrides_are_validated_like_the_file_and_either_command_spelling_wins() -> None:
    rs = _recipes(FA3.read_text(), server={"command": ["{python}", "build.py"]})
    assert rs.base.commands == (("{python}", "build.py"),)  # replaces the file's commands
    assert rs.select("trimmed").commands == (("{python}", "build.py"),)
    with pytest.raises(ConfigError, match=r"^server \[install\]: install\.timeout_s must be"):
        _recipes(FA3.read_text(), server={"timeout_s": "soon"})
