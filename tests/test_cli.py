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


@pytest.mark.parametrize("argv,messages", [
    (["task=snlii"], ["error: In 'train': Could not find 'task/snlii'", "Available options in 'task':\n\talgolisp"]),
    (["task=wikiqa", "task.max_stepz=5"], ["error: Could not override 'task.max_stepz'", "use +task.max_stepz=5"]),
    # a key the config has elsewhere, or spelled almost alike: named before Hydra's advice to add the key
    (["task=wikiqa", "task.batch_size=7"], [("error: Could not override 'task.batch_size'.\nDid you mean "
                                           "data.batch_size=7?\nTo append to your config use +task.batch_size=7")]),
    (["task=snli", "optimizer.lrr=0.1"], ["Could not override 'optimizer.lrr'.\nDid you mean optimizer.lr=0.1?"]),
    # ... and Hydra's advice taken: a new key that nothing refers to while the config has data.batch_size
    (["task=wikiqa", "+task.batch_size=7"], [("error: +task.batch_size=7 adds a new key task.batch_size that no "
                                            "config value refers to, while the config has data.batch_size: did you "
                                            "mean data.batch_size=7? (to add the key anyway: ++task.batch_size=7)")]),
    (["-m", "task=wikiqa", "+task.batch_size=7,8"], ["did you mean data.batch_size=7,8?"]),
    (["task=wikiqa", "data.batch_size=[1"], ["error: no viable alternative at input '[1'"]),
    (["task=wikiqa,snli"], ["error: Ambiguous value for argument 'task=wikiqa,snli'"]),
    # a sweep stops before its first job, whichever job meets the mistake
    (["-m", "task=wikiqa,snlii", "seed=1,2"], ["error: In 'train': Could not find 'task/snlii'"]),
    (["-m", "seed=1,2", "model=decompatt,nope"], ["Could not find 'model/nope'"]),
])
def test_a_config_hydra_cannot_compose_is_one_message_and_exit_2(argv, messages, capsys, monkeypatch, tmp_path):
    """It used to be Hydra's report (its config search path, the HYDRA_FULL_ERROR hint) with exit status 1."""
    monkeypatch.setattr(sys, "argv", ["train.py"])
    with pytest.raises(SystemExit) as exit_:
        cli.main([*argv, f"hydra.run.dir={tmp_path}/run", f"hydra.sweep.dir={tmp_path}/sweep"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and all(m in err for m in messages), err
    assert "Config search path" not in err and "HYDRA_FULL_ERROR" not in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())  # no job started


@pytest.mark.parametrize("argv", [["-m", "task=wikiqa,snli", "seed=1,2", "scale=fixture"], ["task=wikiqa", "-v"],
                                  ["--cfg", "job", "task=wikiqa", "hydra.run.dir=/x"],
                                  # keys added that the code reads: selected by another key (trainer's
                                  # gradient_clip_val), a Trainer's argument, a callback's, a new name, or forced
                                  ["task=snli", "+task.gradient_clip_val=1", "+trainer.accumulate_grad_batches=2",
                                   "+callbacks.gate_stats.max_examples=3", "+data.num_test=50",
                                   "++task.batch_size=7"],
                                  ["-m", "model=glob(decompatt*)", "task=snlii"]])  # glob sweeps: Hydra's report
def test_a_config_hydra_can_compose_passes_the_check(argv):
    cli.check_composition(cli.training_arguments(argv))


@pytest.mark.parametrize("multirun", [False, True])
def test_a_log_dir_where_hydra_cannot_make_the_job_folder_is_one_message(multirun, tmp_path, capsys, monkeypatch):
    """It used to be Hydra's PermissionError (or NotADirectoryError) traceback making <log_dir>/runs, exit status 1.
    A folder under a regular file stops even root; a read-only folder is simulated (tests run as root)."""
    monkeypatch.setattr(sys, "argv", ["train.py"])
    (tmp_path / "file").write_text("")
    argv = [*(["-m", "seed=1,2"] if multirun else []), "task=wikiqa", "scale=fixture",
            f"paths.log_dir={tmp_path}/file/outputs"]
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    err = capsys.readouterr().err
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    assert exit_.value.code == 2 and err.startswith(f"error: {key}: the run folder {tmp_path}/file/outputs/"), err
    assert f"{tmp_path}/file is a file, not a folder; point paths.log_dir" in err and "Traceback" not in err

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("tempfile.NamedTemporaryFile", refuse)
    with pytest.raises(SystemExit) as exit_:
        cli.main([*argv[:-1], f"paths.log_dir={tmp_path}/read-only"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"cannot be created: {tmp_path} is not writable (Permission denied)" in err
    assert not (tmp_path / "read-only").exists()
