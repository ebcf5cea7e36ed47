"""resume=auto across processes: a sweep run again goes on with what is left (finished jobs skipped, a stopped one
resumed), and a two-process DDP run resumes on every rank from the checkpoint rank 0 chose. In-process cases:
tests/test_auto_resume.py."""

import pytest

from coda_exp import results
from tests.e2e.helpers import train

STOP = ["+callbacks.sig._target_=tests.e2e.kill_hook.SignalAtStep", "+callbacks.sig.step=7",
        "+callbacks.sig.signum=15"]


@pytest.mark.slow  # ~40 s: four sweeps of two fixture jobs
def test_a_sweep_run_again_runs_only_what_is_left(tmp_path):
    """seed=1,2 with a SIGTERM at step 7 of every fresh job: each call stops the sweep once (exit 143), so the
    sweep takes three calls to finish, the same command each time, and a fourth runs nothing."""
    sweep = ["-m", "task=snli", "scale=fixture", "task.epochs=2", "seed=1,2", "resume=auto", *STOP]
    steps = []
    for expected in (143, 143, 0, 0):
        proc = train(sweep, tmp_path, tmp_path / "cache")
        assert proc.returncode == expected, proc.stderr[-3000:]
        steps.append(sorted((r["seed"], r["steps"], r["resumed_from"] is not None)
                            for r in results.load_records(tmp_path / "results" / "runs", strict=True)))
        if expected == 0 and len(steps) == 4:
            assert "this run finished already" in proc.stdout + proc.stderr
            assert "sweep: 2 job(s), 0 failed, 2 finished already (resume=auto: nothing ran)" in proc.stderr
    # call 2 resumed seed 1 and stopped seed 2 (fresh) at step 7; call 3 resumed seed 2; call 4 ran nothing
    assert steps == [[], [(1, 10, True)], [(1, 10, True), (2, 10, True)], [(1, 10, True), (2, 10, True)]]


@pytest.mark.slow  # ~30 s: two two-process runs
def test_a_ddp_run_resumes_by_itself_on_every_rank(tmp_path):
    base = ["task=snli", "model=decompatt", "scale=fixture", "task.epochs=3", "seed=3", "save_predictions=false",
            "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "resume=auto",
            "+callbacks.sig._target_=tests.e2e.kill_hook.SignalAtStep", "+callbacks.sig.step=4",
            "+callbacks.sig.signum=15"]
    part = train(base, tmp_path, tmp_path / "cache")
    assert part.returncode == 143, part.stderr[-3000:]
    resumed = train(base, tmp_path, tmp_path / "cache")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    (record,) = results.load_records(tmp_path / "results" / "runs", strict=True)
    assert record["resumed_from"].endswith("interrupted.ckpt") and record["steps"] == 9
    assert "resuming the same run from" in resumed.stdout + resumed.stderr


@pytest.mark.slow  # ~35 s: a run, and a submitit_local job preempted once
def test_a_preempted_submitit_job_saves_its_step_is_requeued_and_resumes_bit_for_bit(tmp_path):
    """hydra/launcher=submitit_local (the SLURM launcher's local twin): submitit's preemption signal (USR2, as SLURM
    sends it before a time limit) at step 7. submitit's own handler requeued the job at once, losing the steps since
    the last checkpoint (the job went on from step 5, and its hook stopped it again each time); now the step's
    checkpoint is saved first, submitit requeues the job, and the requeued job (resume=auto) goes on from step 7
    to the uninterrupted run's result."""
    run = ["task=snli", "scale=fixture", "task.epochs=2", "seed=1", "save_predictions=false",
           "+callbacks.sig._target_=tests.e2e.kill_hook.SignalAtStep"]
    whole = train([*run, "+callbacks.sig.step=1000", "+callbacks.sig.signum=12"], tmp_path / "whole",
                  tmp_path / "cache")
    assert whole.returncode == 0, whole.stderr[-3000:]
    job = train(["-m", "hydra/launcher=submitit_local", "resume=auto", *run, "+callbacks.sig.step=7",
                 "+callbacks.sig.signum=12"], tmp_path / "job", tmp_path / "cache")
    assert job.returncode == 0, job.stderr[-3000:]
    (a,) = results.load_records(tmp_path / "whole" / "results" / "runs", strict=True)
    (b,) = results.load_records(tmp_path / "job" / "results" / "runs", strict=True)
    assert b["resumed_from"].endswith("interrupted.ckpt")
    for key in ("steps", "val_curve", "val_curve_steps", "metrics"):
        assert b[key] == a[key], key
