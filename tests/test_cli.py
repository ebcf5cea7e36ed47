"""coda_exp.cli: ``--help`` is ours (usage, the groups a user chooses, commands, examples), ``-v`` is verbose=true,
and a training run still takes Hydra's arguments as before."""

from __future__ import annotations

import subprocess
import sys

import pytest

from coda_exp import cli
from tests import ROOT


@pytest.mark.parametrize("argv,expected", [
    (["task=snli", "-v"], ["task=snli", "verbose=true"]),
    (["--verbose", "-m", "seed=1,2"], ["-m", "seed=1,2", "verbose=true"]),
    (["-v", "verbose=false"], ["verbose=false"]),  # an explicit value wins
    (["task=snli", "--cfg", "job"], ["task=snli", "--cfg", "job"]),
])
def test_verbose_flag_is_the_verbose_override(argv, expected):
    assert cli.training_arguments(argv) == expected


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_is_ours(flag, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["task=snli", flag])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and out.startswith("coda-exp: ") and "Usage:" in out and "Examples:" in out
    assert "powered by Hydra" not in out and "_self_" not in out  # not Hydra's stock help and its config dump


def test_train_py_help_and_verbose_flag_from_a_shell():
    help_ = subprocess.run([sys.executable, str(ROOT / "train.py"), "--help"], capture_output=True, text=True,
                           check=False, timeout=120)
    assert help_.returncode == 0 and "coda-exp task=wikiqa model=decompatt scale=fixture" in help_.stdout
    job = subprocess.run([sys.executable, "-m", "coda_exp", "-v", "--cfg", "job", "task=wikiqa"], cwd=ROOT,
                         capture_output=True, text=True, check=False, timeout=120)
    assert job.returncode == 0 and "\nverbose: true\n" in job.stdout, job.stderr[-2000:]
