"""Ctrl-C in a sweep of the joblib launcher (jobs in worker processes): every job stops after its step with its
checkpoint, and the sweep lists them with the command to go on (it stopped the workers at once: a job killed before
its checkpoint, no summary). Slow: a real sweep of two processes, stopped by a SIGINT to its process group."""

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
    env = {**os.environ, "CODA_EXP_ROOT": str(tmp_path), "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    sweep = subprocess.Popen([sys.executable, str(ROOT / "train.py"), "-m", "task=wikiqa",
                              "model=decompatt,decompatt_coda", "seed=4", "scale=fixture", "task.epochs=5000",
                              "logger=none", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
                             cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)  # its own process group, as a terminal's Ctrl-C reaches
    try:
        deadline = time.time() + 240
        while len(list(tmp_path.glob("outputs/multiruns/*/*/checkpoints/last.ckpt"))) < 2:  # both training
            assert sweep.poll() is None and time.time() < deadline, sweep.stdout.read()[-3000:]
            time.sleep(0.5)
        (os.killpg if to_group else os.kill)(sweep.pid, signum)
        out, _ = sweep.communicate(timeout=120)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
    assert sweep.returncode == 128 + signum, out[-3000:]
    assert "sweep: 2 job(s), 0 failed, 2 interrupted" in out, out[-3000:]
    jobs = list(tmp_path.glob("outputs/multiruns/*/*/checkpoints"))
    assert len(jobs) == 2  # each stopped after its step (interrupted.ckpt) or, signalled in a validation, there
    assert all((job / "interrupted.ckpt").is_file() or (job / "last.ckpt").is_file() for job in jobs)
    assert ("to go on (finished jobs skipped, stopped ones resumed): "
            f"python {ROOT / 'train.py'} -m hydra/launcher=joblib") in out  # train.py as typed, outside the checkout
