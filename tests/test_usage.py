"""coda_exp.usage: the help lists every group a user chooses with all its options (read from the configs), no
internal group, every command, and five examples that compose."""

from __future__ import annotations

import pytest

from coda_exp import commands, usage
from tests import ROOT

CONFIGS = ROOT / "configs"


def test_every_config_group_is_either_a_users_or_an_internal_one():
    """A new config group must say whether the help lists it."""
    groups = {p.name for p in CONFIGS.iterdir() if p.is_dir()} | {
        f"model/{p.name}" for p in (CONFIGS / "model").iterdir() if p.is_dir()}
    classified = set(usage.USER_GROUPS) | set(usage.INTERNAL_GROUPS)
    assert groups - {"local"} <= classified and not set(usage.USER_GROUPS) & set(usage.INTERNAL_GROUPS)
    assert set(usage.USER_GROUPS) <= groups


def test_the_help_lists_the_users_groups_their_options_and_the_commands():
    text = usage.help_text()
    lines = text.splitlines()
    for group in usage.USER_GROUPS:
        (i,) = [i for i, line in enumerate(lines) if line.startswith(f"  {group} ")]
        listed = lines[i + 1].strip()
        while lines[i + 2].startswith(" " * 19) and lines[i + 2].strip():  # wrapped options
            i += 1
            listed += " " + lines[i + 1].strip()
        assert listed.split(", ") == usage.options(group), group
    section = lines[lines.index("Config groups (group=option; the defaults: configs/train.yaml):"):
                    next(i for i, line in enumerate(lines) if line.startswith("Any key"))]
    assert not [g for g in usage.INTERNAL_GROUPS if any(line.startswith(f"  {g} ") for line in section)]
    assert all(f"  {name} " in text for name in commands.COMMANDS)
    assert "fixture" in text and "-v, --verbose" in text


def _overrides(example: str) -> list[str]:
    """A training example's overrides, a sweep's first value of each."""
    args = [a for a in example.split()[1:] if not a.startswith("-")]
    return [a.split("=", 1)[0] + "=" + a.split("=", 1)[1].split(",")[0] for a in args]


@pytest.mark.parametrize("example", [e for e, _ in usage.EXAMPLES])
def test_each_example_runs_as_written(example, make_cfg):
    assert example.startswith("coda-exp ")
    word = example.split()[1]
    if commands.is_command_word(word):
        assert word in commands.COMMANDS
        return
    cfg = make_cfg(*_overrides(example))  # composes: every group option and key exists
    assert cfg.task.name and cfg.model.name


def test_five_examples():
    assert len(usage.EXAMPLES) == 5
