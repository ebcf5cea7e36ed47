"""What a resumed run no longer needs (coda_exp.resume_tidy): an earlier process's interrupted.ckpt once the run has
saved a later last.ckpt (or written its record), and the resuming job's own Hydra folder of a single run; a sweep
job's folder stays. Real runs through the entry point (Hydra makes the folders), and the rule on checkpoint files."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from coda_exp import cli, results
from coda_exp.resume_tidy import StaleInterrupted
from coda_exp.run_folder import RESUMED_IN, remove_job_folder

# snli's fixture: 5 steps an epoch, a validation (and last.ckpt) at steps 5, 10, 15. A Ctrl-C at step 7, and at step
# 8: the run resumed from step 7 is stopped again before its next save
STOPS = ["+callbacks.sig._target_=tests.e2e.kill_hook.SignalAtSteps", "+callbacks.sig.steps=[7,8]",
         "+callbacks.sig.signum=2"]
BASE = ["task=snli", "scale=fixture", "logger=none", "save_predictions=false", "task.epochs=3", "seed=3", *STOPS]


def _train(tmp_path: Path, *args: str, status: int | None = None) -> None:
    """``coda-exp *args`` in this process (Hydra makes the job's folder, its .hydra/ and train.log), outputs under
    ``tmp_path``; ``status``: the exit status expected (None: it returns)."""
    argv = [*args, f"paths.log_dir={tmp_path}/outputs", f"paths.results_dir={tmp_path}/results",
            f"paths.cache_dir={tmp_path}/cache"]
    if status is None:
        cli.main(argv)
        return
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert stop.value.code == status


def _step(path: Path) -> int:
    from coda_exp.checkpoint_avg import global_step

    return global_step(path)


@pytest.fixture
def argv0(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["train.py"])


def test_a_resumed_run_leaves_no_interrupted_ckpt_nor_a_hydra_folder_of_its_own(tmp_path, argv0, capsys):
    runs = tmp_path / "outputs" / "runs" / "snli-decompatt"
    _train(tmp_path, *BASE, status=130)  # Ctrl-C at step 7
    (first,) = runs.iterdir()
    interrupted, last = first / "checkpoints" / "interrupted.ckpt", first / "checkpoints" / "last.ckpt"
    assert (_step(interrupted), _step(last)) == (7, 5)
    # resumed from it, and stopped again at step 8, before its next save: a checkpoint to resume from is left, the
    # new stop's (the earlier one's went only as this one replaced it)
    _train(tmp_path, *BASE, f"ckpt_path={interrupted}", status=130)
    assert (_step(interrupted), _step(last)) == (8, 5)
    assert list(runs.iterdir()) == [first]  # the resuming job's Hydra folder went, though the run stopped
    assert f"removed {interrupted}" not in (first / "train.log").read_text()
    # the same command with resume=auto: it goes on from step 8 and finishes
    _train(tmp_path, *BASE, "resume=auto")
    (record,) = results.load_records(tmp_path / "results" / "runs", strict=True)
    assert record["output_dir"] == str(first) and record["resumed_from"] == str(interrupted) and record["steps"] == 15
    assert not interrupted.exists() and _step(last) == 15
    log = (first / "train.log").read_text()  # (Hydra's logging, set up by each call, leaves caplog out)
    (said,) = [line for line in log.splitlines() if f"removed {interrupted} " in line]
    assert said.endswith(f"[coda_exp.resume_tidy][INFO] - removed {interrupted} (where an earlier process of this "
                         "run stopped, at step 8): this run saved last.ckpt at step 10 since"), said
    assert list(runs.iterdir()) == [first]  # no Hydra folder of either resuming job
    assert log.count(f"{RESUMED_IN} {first}") == 2 and log.count("removed this job's Hydra folder") == 2
    # each resuming command's overrides beside its resolved config, under the same time
    stamps = sorted(p.name.removeprefix("overrides.resumed-") for p in first.glob("overrides.resumed-*.yaml"))
    assert len(stamps) == 2 and all((first / f"config_resolved.resumed-{s}").is_file() for s in stamps)
    from omegaconf import OmegaConf

    assert list(OmegaConf.load(first / f"overrides.resumed-{stamps[-1]}"))[:len(BASE) + 1] == [*BASE, "resume=auto"]
    # once more: it finished already, nothing runs, and this job's folder goes too
    capsys.readouterr()
    _train(tmp_path, *BASE, "resume=auto")
    assert list(runs.iterdir()) == [first] and "(Hydra's files and this job's log only): nothing ran" in \
        capsys.readouterr().out
    assert len(results.load_records(tmp_path / "results" / "runs", strict=True)) == 1


def test_a_sweep_jobs_hydra_folder_stays_listed_as_resumed(tmp_path, argv0, capsys):
    """A -m sweep's job resumed elsewhere keeps its numbered folder, which the sweep's summary lists (and coda-exp
    runs reads as resumed); the stale interrupted.ckpt goes all the same."""
    from coda_exp.tools import runs

    _train(tmp_path, "-m", *BASE, status=130)
    (stopped,) = (tmp_path / "outputs" / "multiruns").glob("*/0-snli-decompatt-s3-*")
    _train(tmp_path, "-m", *BASE, "resume=auto", status=130)  # resumed from step 7, stopped at step 8
    _train(tmp_path, "-m", *BASE, "resume=auto")
    assert not (stopped / "checkpoints" / "interrupted.ckpt").exists()
    jobs = sorted((tmp_path / "outputs" / "multiruns").glob("*/0-snli-decompatt-s3-*"))
    assert len(jobs) == 3 and jobs[0] == stopped
    for job in jobs[1:]:
        assert {p.name for p in job.iterdir()} == {".hydra", "train.log"}
        assert f"{RESUMED_IN} {stopped}" in (job / "train.log").read_text()
    capsys.readouterr()
    assert runs.main(["--log-dir", str(tmp_path / "outputs")]) == 0
    assert "1 finished, 2 resumed" in capsys.readouterr().out


def _save(path: Path, step: int) -> None:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"global_step": step, "state_dict": {}}, str(path) + ".tmp")
    Path(str(path) + ".tmp").replace(path)  # as the run writes a checkpoint: a new file in its place


def test_the_stale_file_goes_only_once_a_later_last_ckpt_of_this_process_or_the_record_is_there(tmp_path, caplog,
                                                                                                monkeypatch):
    caplog.set_level(logging.INFO, logger="coda_exp.resume_tidy")
    checkpoints = tmp_path / "run" / "checkpoints"
    interrupted, last = checkpoints / "interrupted.ckpt", checkpoints / "last.ckpt"
    _save(interrupted, 7)
    _save(last, 10)  # an earlier process's later last.ckpt: not this run's save
    stale = StaleInterrupted(tmp_path / "run")
    stale.check()
    assert interrupted.exists()
    _save(last, 7)  # this process's, not later
    stale.check()
    assert interrupted.exists() and not caplog.records
    stale.on_exception(None, None, RuntimeError("a crash before the next save"))
    assert interrupted.exists()
    _save(last, 12)
    stale.on_train_batch_end(None, None, None, None, 0)
    assert not interrupted.exists() and last.exists()
    (said,) = caplog.records
    assert said.levelname == "INFO" and said.getMessage().startswith(f"removed {interrupted} ")
    # a new stop wrote the file again: that one is kept, even once the record is written
    _save(interrupted, 7)
    again = StaleInterrupted(tmp_path / "run")
    _save(interrupted, 9)
    _save(last, 10)
    again.check()
    again.remove("the run ended, its record written")
    assert _step(interrupted) == 9
    # no later last.ckpt (checkpoints not kept): the record written, the file goes
    third = StaleInterrupted(tmp_path / "run")
    third.remove("the run ended, its record written")
    assert not interrupted.exists() and "the run ended, its record written" in caplog.records[-1].getMessage()
    # another DDP rank than 0 never removes it
    from lightning_fabric.utilities.rank_zero import rank_zero_only

    _save(interrupted, 7)
    monkeypatch.setattr(rank_zero_only, "rank", 1, raising=False)
    other = StaleInterrupted(tmp_path / "run")
    _save(last, 20)
    other.check()
    other.remove("the run ended, its record written")
    assert interrupted.exists()


def test_a_hydra_folder_holding_anything_else_is_never_removed(tmp_path):
    folder = tmp_path / "runs" / "snli-decompatt" / "job"
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text("- seed=1\n")
    (folder / "train.log").write_text("a line\n")
    (folder / "notes.txt").write_text("mine")
    assert not remove_job_folder(folder, with_log=True) and (folder / "notes.txt").is_file()
    (folder / "notes.txt").unlink()
    assert not remove_job_folder(folder)  # a log with lines: only a job whose run went elsewhere removes it
    assert remove_job_folder(folder, with_log=True)
    assert not (tmp_path / "runs" / "snli-decompatt").exists() and (tmp_path / "runs").is_dir()


def test_a_resumed_run_removes_checkpoint_writes_a_kill_cut_short(tmp_path, caplog):
    """kill -9 during a checkpoint's write leaves io.atomic_write's .last.ckpt.<random>.tmp (hundreds of KB to GBs),
    which nothing removed; the resumed run does, and nothing else."""
    caplog.set_level(logging.INFO, logger="coda_exp.resume_tidy")
    checkpoints = tmp_path / "run" / "checkpoints"
    checkpoints.mkdir(parents=True)
    cut = checkpoints / ".last.ckpt.k3j9x0.tmp"
    cut.write_bytes(b"PK\x03\x04 cut short")
    kept = [checkpoints / name for name in ("last.ckpt", "epoch000-step5.ckpt", ".notes.tmp")]
    for path in kept:
        path.write_bytes(b"x")
    StaleInterrupted(tmp_path / "run")
    assert not cut.exists() and all(path.exists() for path in kept)
    assert "a checkpoint write an earlier process of this run did not finish" in caplog.text
