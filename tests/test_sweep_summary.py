"""coda_exp.hydra_callbacks' sweep summary: a failed job's whole error, its further lines indented under it; a job a signal
stopped, listed as interrupted with the commands that resume it."""

from __future__ import annotations

import json
import sys

import pytest
from hydra.core.utils import JobReturn, JobStatus
from hydra.types import RunMode
from omegaconf import OmegaConf

from coda_exp import hydra_callbacks
from coda_exp.config_checks import ConfigError
from coda_exp.data.common.errors import DataError
from coda_exp.hydra_callbacks import JobReport, SweepUserError, job_outcome, sweep_summary


def test_a_config_errors_keys_are_in_the_summary_not_only_its_first_line():
    """It used to show "invalid config values (fix the override or the YAML):" alone, without the key."""
    err = ConfigError("invalid config values (fix the override or the YAML):\n  task.epochs = -1: expected an int >= 1"
                      "\n  seed = -2: expected an int in [0, 4294967295] (2**32 - 1)")
    failed = JobReturn(overrides=["task.epochs=-1"], status=JobStatus.FAILED,
                       _return_value=SweepUserError(f"ConfigError: {err}"))
    assert sweep_summary([job_outcome(failed)]).splitlines()[1:] == [
        "  job #0 [task.epochs=-1]: exit status 1: ConfigError: invalid config values (fix the override or the YAML):",
        "      task.epochs = -1: expected an int >= 1",
        "      seed = -2: expected an int in [0, 4294967295] (2**32 - 1)"]


def test_a_long_error_is_cut():
    failed = JobReturn(overrides=[], status=JobStatus.FAILED, _return_value=ValueError("x" * 5000))
    assert job_outcome(failed)["error"].endswith("x ...") and len(job_outcome(failed)["error"]) < 2100


@pytest.mark.parametrize("errors,status", [([None, None], 0), ([DataError("no folder"), None], 2),
                                           ([DataError("no folder"), RuntimeError("a bug")], 1)])
def test_failed_jobs_are_listed_not_raised_and_the_sweep_exits_with_their_status(tmp_path, errors, status, capsys,
                                                                                 monkeypatch):
    """Hydra's sweeper used to raise the first failure: its message once more, the advice to set HYDRA_FULL_ERROR for
    a missing data folder, exit status 1 whatever failed. The job is handed back as done once its outcome is kept;
    the summary lists it and the entry point exits with the sweep's status."""
    monkeypatch.setattr(hydra_callbacks, "sweep_exit", None)  # restored after: no later test sees this sweep's
    report = JobReport()
    cfg = OmegaConf.create({"hydra": {"mode": RunMode.MULTIRUN, "sweep": {"dir": str(tmp_path)},
                            "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"}}})
    report.on_multirun_start(cfg)
    for num, err in enumerate(errors):
        job = JobReturn(overrides=[f"seed={num}"], status=JobStatus.FAILED if err else JobStatus.COMPLETED,
                        _return_value=err if err is None or not isinstance(err, DataError)
                        else SweepUserError(f"DataError: {err}"))
        if isinstance(err, DataError):
            job._return_value.code = 2
        job.hydra_cfg = OmegaConf.create({"hydra": {"job": {"num": num}, "runtime": {"output_dir": str(tmp_path)}}})
        report.on_job_end(cfg, job)
        assert job.status == JobStatus.COMPLETED and (err is None or job.return_value is None)
        assert json.loads((tmp_path / ".jobs" / f"{num}.json").read_text())["status"] == ("failed" if err else
                                                                                           "completed")
    report.on_multirun_end(cfg)
    assert hydra_callbacks.sweep_exit == status
    assert f"sweep: 2 job(s), {sum(e is not None for e in errors)} failed" in capsys.readouterr().err


def test_another_sweeper_gets_the_failure_as_hydra_gives_it(tmp_path, capsys, monkeypatch):
    """Optuna or Ax read a job's return value: only Hydra's basic sweeper is handed a failed job as done."""
    monkeypatch.setattr(hydra_callbacks, "sweep_exit", None)
    report = JobReport()
    cfg = OmegaConf.create({"hydra": {"mode": RunMode.MULTIRUN, "sweep": {"dir": str(tmp_path)},
                                      "sweeper": {"_target_": "hydra_plugins.hydra_optuna_sweeper.OptunaSweeper"}}})
    report.on_multirun_start(cfg)
    job = JobReturn(overrides=["seed=1"], status=JobStatus.FAILED, _return_value=RuntimeError("a bug"))
    job.hydra_cfg = OmegaConf.create({"hydra": {"job": {"num": 0}, "runtime": {"output_dir": str(tmp_path)}}})
    report.on_job_end(cfg, job)
    assert job.status == JobStatus.FAILED and isinstance(job._return_value, RuntimeError)
    assert json.loads((tmp_path / ".jobs" / "0.json").read_text())["status"] == "failed"
    report.on_multirun_end(cfg)  # listed now, not when pytest exits
    assert "sweep: 1 job(s), 1 failed" in capsys.readouterr().err


def test_a_job_a_signal_stopped_is_listed_as_interrupted_with_the_commands_that_resume_it(tmp_path, capsys,
                                                                                         monkeypatch):
    """A sweep stopped by Ctrl-C in a job's training step: the job's SystemExit(130) skips Hydra's on_job_end, and
    the summary at exit listed the jobs before it alone ("sweep: 1 job(s), 0 failed"), not the stopped one. It is
    listed as interrupted now (not failed), with its checkpoint, the command that resumes it and the sweep's
    command with resume=auto; the sweep's status is the signal's."""
    from hydra.core.hydra_config import HydraConfig

    from coda_exp import stops

    monkeypatch.setattr(hydra_callbacks, "sweep_exit", None)
    monkeypatch.setattr(sys, "argv", ["train.py"])
    sweep = {"mode": RunMode.MULTIRUN, "sweep": {"dir": str(tmp_path)},
             "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"}}
    cfg = OmegaConf.create({"hydra": {**sweep, "overrides": {"task": ["task=snli", "seed=1,2"]}}})
    report = JobReport()
    report.on_multirun_start(cfg)
    done = JobReturn(overrides=["task=snli", "seed=1"], status=JobStatus.COMPLETED, _return_value=0.5)
    done.hydra_cfg = OmegaConf.create({"hydra": {"job": {"num": 0}, "runtime": {"output_dir": str(tmp_path / "0")}}})
    report.on_job_end(cfg, done)
    job = {**sweep, "job": {"num": 1}, "overrides": {"task": ["task=snli", "seed=2"]},
           "runtime": {"output_dir": str(tmp_path / "1")}}
    monkeypatch.setattr(HydraConfig.instance(), "cfg", OmegaConf.create({"hydra": job}))
    ckpt = tmp_path / "1" / "checkpoints" / "interrupted.ckpt"
    with pytest.raises(SystemExit) as exit_:
        stops.stopped(stops.RunInterrupted("SIGINT", 7, ckpt), ["task=snli", "seed=2"])
    assert exit_.value.code == 130
    report.on_multirun_end(cfg)
    err = capsys.readouterr().err
    assert err[err.index("sweep: "):].splitlines() == [
        "sweep: 2 job(s), 0 failed, 1 interrupted",
        f"  job #1 [task=snli seed=2]: interrupted (Ctrl-C, exit status 130) at step 7, its checkpoint {ckpt}",
        f"    resume it with: python train.py task=snli seed=2 ckpt_path={ckpt}",
        f"    log: {tmp_path / '1' / 'train.log'}",
        ("  the sweep stopped there; to go on (finished jobs skipped, stopped ones resumed): python train.py -m "
         "task=snli seed=1,2 resume=auto")]
    assert hydra_callbacks.sweep_exit == 130


def test_a_job_stopped_outside_a_training_step_is_listed_as_interrupted_too(tmp_path, capsys, monkeypatch):
    """Ctrl-C while a job's data loads (no checkpoint yet): interrupted, to be run again as it was."""
    from hydra.core.hydra_config import HydraConfig

    from coda_exp import stops

    monkeypatch.setattr(hydra_callbacks, "sweep_exit", None)
    monkeypatch.setattr(sys, "argv", ["coda-exp"])
    job = {"mode": RunMode.MULTIRUN, "sweep": {"dir": str(tmp_path)}, "job": {"num": 0},
           "overrides": {"task": ["seed=1"]}, "runtime": {"output_dir": str(tmp_path / "0")}}
    monkeypatch.setattr(HydraConfig.instance(), "cfg", OmegaConf.create({"hydra": job}))
    with pytest.raises(SystemExit) as exit_:
        stops.stopped_outside_a_step(OmegaConf.create({"paths": {"output_dir": str(tmp_path / "0")}}), "SIGTERM")
    assert exit_.value.code == 143
    outcome = json.loads((tmp_path / ".jobs" / "0.json").read_text())
    assert sweep_summary([outcome]).splitlines()[:3] == [
        "sweep: 1 job(s), 0 failed, 1 interrupted",
        "  job #0 [seed=1]: interrupted (SIGTERM, exit status 143), no checkpoint to resume from",
        "    resume it with: coda-exp seed=1"]


@pytest.mark.parametrize("given", [["resume=auto"], ["resume=never"], ["+resume=auto", "ckpt_path=/x.ckpt"], []])
def test_the_command_to_go_on_always_resumes(given, tmp_path, monkeypatch):
    """A sweep given resume=auto was told to go on without it: that command trained its finished jobs again and
    started the stopped one from step 0, its checkpoint left behind."""
    monkeypatch.setattr(sys, "argv", ["train.py"])
    sweep = {"mode": RunMode.MULTIRUN, "sweep": {"dir": str(tmp_path)}}
    cfg = OmegaConf.create({"hydra": {**sweep, "overrides": {"task": ["experiment=table_6", *given, "seed=1"]}}})
    report = JobReport()
    report.on_multirun_start(cfg)
    assert report.again == "python train.py -m experiment=table_6 seed=1 resume=auto"


def test_the_commands_to_go_on_keep_the_searchpath_and_a_sweeps_launcher(tmp_path, monkeypatch):
    """With an experiment of one's own (hydra.searchpath=[file:///...]) the printed commands failed: "Could not find
    'experiment/my_cmp'"; a joblib sweep went on with the basic launcher."""
    from hydra.core.hydra_config import HydraConfig

    from coda_exp.stops import _resume_command

    monkeypatch.setattr(sys, "argv", ["coda-exp"])
    hydra = ["hydra.mode=MULTIRUN", "hydra.searchpath=[file:///my/configs]", "hydra/launcher=joblib",
             "hydra.launcher.n_jobs=2", "hydra.sweep.dir=/x"]
    sweep = {"mode": RunMode.MULTIRUN, "sweep": {"dir": str(tmp_path)}}
    cfg = OmegaConf.create({"hydra": {**sweep, "overrides": {"task": ["experiment=my_cmp", "seed=1,2"],
                                                             "hydra": hydra}}})
    report = JobReport()
    report.on_multirun_start(cfg)
    assert report.again == ("coda-exp -m 'hydra.searchpath=[file:///my/configs]' hydra/launcher=joblib "
                            "hydra.launcher.n_jobs=2 experiment=my_cmp seed=1,2 resume=auto")
    job = {**sweep, "job": {"num": 0}, "overrides": {"task": ["experiment=my_cmp", "seed=1"], "hydra": hydra},
           "runtime": {"output_dir": str(tmp_path / "0")}}
    monkeypatch.setattr(HydraConfig.instance(), "cfg", OmegaConf.create({"hydra": job}))
    assert _resume_command(["experiment=my_cmp", "seed=1"], tmp_path / "i.ckpt") == (
        f"coda-exp 'hydra.searchpath=[file:///my/configs]' experiment=my_cmp seed=1 ckpt_path={tmp_path / 'i.ckpt'}")


def test_a_joblib_sweep_lets_the_first_ctrl_c_stop_its_jobs_after_their_step(tmp_path, monkeypatch, capsys):
    """Ctrl-C in a joblib sweep stopped the workers at once: a job killed before its checkpoint, no summary. The first
    Ctrl-C is now the jobs' own (each stops after its step), the second stops at once; the sweep's end restores it."""
    import signal

    monkeypatch.setattr(sys, "argv", ["coda-exp"])
    before = signal.getsignal(signal.SIGINT)
    cfg = OmegaConf.create({"hydra": {"mode": RunMode.MULTIRUN, "sweep": {"dir": str(tmp_path)},
                                      "launcher": {"_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher."
                                                               "JoblibLauncher", "n_jobs": 2},
                                      "overrides": {"task": ["seed=1,2"]}}})
    report = JobReport()
    report.on_multirun_start(cfg)
    first = signal.getsignal(signal.SIGINT)
    try:
        assert first is not before
        first(signal.SIGINT, None)  # the first Ctrl-C: said, swallowed
        assert "the sweep's jobs stop after their current step" in capsys.readouterr().err
        assert signal.getsignal(signal.SIGINT) is before  # the second: as before
        signal.signal(signal.SIGINT, first)
        report.on_multirun_end(cfg)
        assert signal.getsignal(signal.SIGINT) is before
    finally:
        signal.signal(signal.SIGINT, before)
    basic = JobReport()  # the basic launcher runs jobs in this process: Ctrl-C is theirs already
    basic.on_multirun_start(OmegaConf.create({"hydra": {**cfg.hydra, "launcher": {"_target_": "hydra._internal."
                                                                                              "core_plugins."
                                                                                              "basic_launcher."
                                                                                              "BasicLauncher"}}}))
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.parametrize("argv0,cwd,said", [
    ("train.py", "checkout", "python train.py"),
    ("{checkout}/train.py", "checkout", "python train.py"),
    ("{checkout}/train.py", "elsewhere", "python {checkout}/train.py"),  # was python train.py: can't open file
    ("../code/train.py", "elsewhere", "python ../code/train.py"),
    ("/usr/bin/coda-exp", "elsewhere", "coda-exp"),
])
def test_the_command_to_type_again_names_train_py_as_typed(tmp_path, monkeypatch, argv0, cwd, said):
    from coda_exp.hydra_callbacks import program

    checkout, elsewhere = tmp_path / "checkout", tmp_path / "elsewhere"
    for folder in (checkout, elsewhere):
        folder.mkdir()
    (checkout / "train.py").touch()
    monkeypatch.chdir(checkout if cwd == "checkout" else elsewhere)
    monkeypatch.setattr("sys.argv", [argv0.format(checkout=checkout)])
    assert program() == said.format(checkout=checkout)


def test_a_job_stopped_with_only_its_best_checkpoint_names_that_one(tmp_path, monkeypatch, caplog):
    """Its first last.ckpt cut short by a kill, a later stop outside a step names the best checkpoint beside it
    (the one ``resume=auto`` takes: ``resume_points``), not "none to resume from"."""
    import torch
    from hydra.core.hydra_config import HydraConfig

    from coda_exp import stops

    monkeypatch.setattr(hydra_callbacks, "sweep_exit", None)
    monkeypatch.setattr(sys, "argv", ["coda-exp"])
    checkpoints = tmp_path / "0" / "checkpoints"
    checkpoints.mkdir(parents=True)
    best = checkpoints / "epoch000-step5.ckpt"
    torch.save({"global_step": 5, "state_dict": {}, "loops": {}, "callbacks": {}, "optimizer_states": []}, best)
    (checkpoints / "last.ckpt").write_bytes(b"cut")
    job = {"mode": RunMode.MULTIRUN, "sweep": {"dir": str(tmp_path)}, "job": {"num": 0},
           "overrides": {"task": ["seed=1"]}, "runtime": {"output_dir": str(tmp_path / "0")}}
    monkeypatch.setattr(HydraConfig.instance(), "cfg", OmegaConf.create({"hydra": job}))
    with pytest.raises(SystemExit):
        stops.stopped_outside_a_step(OmegaConf.create({"paths": {"output_dir": str(tmp_path / "0")}}), "SIGTERM")
    assert f"resume from its last checkpoint, {best}" in caplog.text
    assert json.loads((tmp_path / ".jobs" / "0.json").read_text())["checkpoint"] == str(best)


@pytest.mark.parametrize("verbose", [False, True])
def test_a_sweep_jobs_log_has_the_traceback_behind_a_users_mistake_with_v(verbose, make_cfg, caplog, monkeypatch):
    """-v printed the traceback behind a user's mistake (a library that could not read a file) on a single run's
    console (``errors.print_error``), but a sweep job's ``train.log``, the only place its failure stays, had the
    message alone."""
    from coda_exp import pipeline

    def train(cfg, start, left=None, made=None):
        try:
            int("not a number")
        except ValueError as err:
            raise DataError("data/x.tsv: cannot be read") from err

    monkeypatch.setattr(pipeline, "_train_and_record", train)
    monkeypatch.setattr(pipeline, "in_sweep", lambda: True)
    with pytest.raises(DataError):
        pipeline.run(make_cfg("task=snli", "scale=fixture", f"verbose={str(verbose).lower()}"))
    (failed,) = [r for r in caplog.records if r.getMessage() == "run failed: data/x.tsv: cannot be read"]
    assert (failed.exc_info is not None and failed.exc_info[0] is ValueError) == verbose
