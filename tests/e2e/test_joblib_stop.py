"""Ctrl-C in a sweep of the joblib launcher (jobs in worker processes): every job stops after its step with its
checkpoint, and the sweep lists them with the command to go on (it stopped the workers at once: a job killed before
its checkpoint, no summary); so does a SIGTERM to the main process. A job that stops at once (in a validation, before
its training) leaves the others their step and checkpoint (``coda_exp.sweep_workers``). Slow: real sweeps of two
worker processes (three: one with no job), stopped by a SIGINT to the process group or a SIGTERM to the main one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests import ROOT

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("signum,to_group", [(signal.SIGINT, True), (signal.SIGTERM, False)])
def test_ctrl_c_stops_a_joblib_sweeps_jobs_after_their_step_and_lists_them(tmp_path, signum, to_group):
    """SIGTERM to the main process alone (a scheduler's, ``kill``): it ended at once, its workers running on and
    holding their run folders against the resume; it is sent on to the workers, the same stop as a Ctrl-C."""
    sweep, out = _signalled_sweep(
        tmp_path, ["model=decompatt,decompatt_coda", "seed=4", "task.epochs=5000", "hydra.launcher.n_jobs=2"],
        lambda: len(list(tmp_path.glob("outputs/multiruns/*/*/checkpoints/last.ckpt"))) >= 2,  # both training
        signum, to_group)
    assert sweep.returncode == 128 + signum, out[-3000:]
    assert "sweep: 2 job(s), 0 failed, 2 interrupted" in out, out[-3000:]
    jobs = list(tmp_path.glob("outputs/multiruns/*/*/checkpoints"))
    assert len(jobs) == 2  # each stopped after its step (interrupted.ckpt) or, signalled in a validation, there
    assert all((job / "interrupted.ckpt").is_file() or (job / "last.ckpt").is_file() for job in jobs)
    assert ("to go on (finished jobs skipped, stopped ones resumed): "
            f"python {ROOT / 'train.py'} -m hydra/launcher=joblib") in out  # train.py as typed, outside the checkout


TWO_MODELS = ["model=decompatt,decompatt_coda", "seed=4"]


@pytest.mark.parametrize("signum,to_group,first,workers,jobs", [
    # Lightning's stop in a validation: at once; a third job waits for a worker
    (signal.SIGTERM, False, "validation", 2, ["model=decompatt", "seed=4,5,6"]),
    (signal.SIGINT, True, "setup", 3, TWO_MODELS),  # Ctrl-C before the training's handler; a worker with no job
    (signal.SIGTERM, False, "setup", 3, TWO_MODELS),  # SIGTERM before Lightning's handler (it ended the worker)
])
def test_a_job_that_stops_at_once_leaves_the_others_their_step_and_checkpoint(tmp_path, signum, to_group, first,
                                                                             workers, jobs):
    """Job 0 is signalled where it stops at once (SIGTERM in a validation: Lightning's stop; Ctrl-C or SIGTERM as
    its training is set up, before any step), job 1 in a training step that goes on until job 0 has ended
    (``kill_hook.HoldForSweepSignal``). Job 0's end made joblib abort the sweep: its ``SystemExit`` (or, SIGTERM in
    its setup, the worker's death) was the parallel call's error, and loky killed job 1's worker before its step
    ended; the summary listed job 0 alone. A worker with no job died of the signal too (a broken pool: the same
    kill). A job waiting for a worker does not start once the sweep is stopped (as the basic launcher's)."""
    sweep, out = _signalled_sweep(
        tmp_path, [*jobs, "task.epochs=50", f"hydra.launcher.n_jobs={workers}",
                   "+callbacks.hold._target_=tests.e2e.kill_hook.HoldForSweepSignal",
                   f"+callbacks.hold.roles=[{first},step,none]", f"+callbacks.hold.folder={tmp_path}"],
        lambda: all((tmp_path / f"ready-{n}").exists() for n in (0, 1)),  # job 0 where it stops at once, job 1 in
        signum, to_group)  # a step
    assert sweep.returncode == 128 + signum, out[-3000:]
    assert "sweep: 2 job(s), 0 failed, 2 interrupted" in out, out[-3000:]
    assert "outside a training step" in out, out[-3000:]  # job 0: at once
    (stepped,) = tmp_path.glob("outputs/multiruns/*/1-*/checkpoints")
    assert (stepped / "interrupted.ckpt").is_file(), out[-3000:]  # job 1: its step ended, with its checkpoint
    assert "at step 2, its checkpoint" in out, out[-3000:]
    if len(jobs[1].split(",")) == 3:  # job 2, which waited for a worker
        assert "job #2 not started: the sweep was stopped (SIGTERM)" in out, out[-3000:]
        assert not list(tmp_path.glob("outputs/multiruns/*/2-*"))


def test_a_sigterm_to_one_worker_alone_stops_its_job_alone_and_says_so(tmp_path):
    """``kill <worker pid>``: that job stops after its step with its checkpoint and the other one runs to its end
    (loky's pool survives); both the job's message and the summary said the sweep stopped there."""
    sweep, out = _signalled_sweep(
        tmp_path, ["model=decompatt", "seed=4", "task.epochs=50,2", "hydra.launcher.n_jobs=2",
                   "+callbacks.hold._target_=tests.e2e.kill_hook.HoldForSweepSignal", "+callbacks.hold.roles=[step,none]",
                   f"+callbacks.hold.folder={tmp_path}", "+callbacks.hold.linger=0"],
        lambda: (tmp_path / "ready-0").exists() and (tmp_path / "ready-0").read_text(),
        signal.SIGTERM, False, pid=lambda: int((tmp_path / "ready-0").read_text()))
    assert sweep.returncode == 143, out[-3000:]
    assert "sweep: 2 job(s), 0 failed, 1 interrupted" in out, out[-3000:]
    assert "this job alone stops (a signal to its worker process)" in out and "the sweep stops here" not in out
    assert "the sweep ran on (a signal reached the worker of the stopped job alone); to resume it" in out, out[-3000:]
    (stopped,) = tmp_path.glob("outputs/multiruns/*/0-*/checkpoints")
    assert (stopped / "interrupted.ckpt").is_file(), out[-3000:]
    assert len(list(tmp_path.glob("outputs/fixture_results/runs/*.json"))) == 1, out[-3000:]  # job 1 ran to its end


def _signalled_sweep(tmp_path, overrides: list[str], ready, signum: int, to_group: bool, pid=None):
    """A joblib sweep of WikiQA fixture runs with ``overrides``, in its own process group (as a terminal's Ctrl-C
    reaches it), signalled once ``ready()`` (the process ``pid()`` alone where given): (the process, its output)."""
    env = {**os.environ, "CODA_EXP_ROOT": str(tmp_path), "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    sweep = subprocess.Popen([sys.executable, str(ROOT / "train.py"), "-m", "task=wikiqa", "scale=fixture",
                              "logger=none", "hydra/launcher=joblib", *overrides], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.time() + 240
        while not ready():
            assert sweep.poll() is None and time.time() < deadline, sweep.stdout.read()[-3000:]
            time.sleep(0.2)
        if pid is not None:
            os.kill(pid(), signum)
        else:
            (os.killpg if to_group else os.kill)(sweep.pid, signum)
        out, _ = sweep.communicate(timeout=120)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
    return sweep, out
