"""``coda-exp eval ... logger=wandb``: the evaluation's W&B run names its trained run (its run id, W&B id and the
checkpoint), has the configuration a training run has, logs its metrics at the checkpoint's step; its record counts
the checkpoint's epochs as the training record does."""

from __future__ import annotations

import pytest

from coda_exp import loggers, results
from coda_exp.evaluate import eval_main
from tests.wandb_files import logged, offline_runs

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def wandb_model(compose, tmp_path_factory):
    """A fixture model trained for 3 epochs, logged to W&B (offline): (its run folder, its record)."""
    from coda_exp.pipeline import run

    folder = tmp_path_factory.mktemp("trained")
    run(compose(["task=snli", "scale=fixture", "logger=wandb", "task.epochs=3", "save_predictions=false"], folder))
    (record,) = results.load_records(folder / "results" / "runs", strict=True)
    return folder / "run", record


def _evaluate(ckpt, out) -> dict:
    assert eval_main([f"ckpt_path={ckpt}", f"paths.results_dir={out}/results", f"paths.log_dir={out}/outputs",
                      f"paths.cache_dir={out}/cache", "logger=wandb", "save_predictions=false"]) == 0
    (record,) = results.load_records(out / "results" / "runs", strict=True)
    return record


def test_an_evaluations_wandb_run_names_its_trained_run_at_the_checkpoints_step(wandb_model, tmp_path):
    """Its W&B config was empty (only _wandb), nothing named the trained run but a shared group and name, and its
    metrics were logged at step 0, epoch 0."""
    folder, trained = wandb_model
    ckpt = folder / "checkpoints" / "last.ckpt"
    record = _evaluate(ckpt, tmp_path)
    trained_id = (folder / loggers.WANDB_ID_FILE).read_text().strip()
    assert record["trained_run_id"] == trained["run_id"] and record["trained_wandb_id"] == trained_id
    assert record["wandb"]["id"] != trained_id and record["wandb"]["group"] == trained["wandb"]["group"]
    (run,) = offline_runs(tmp_path / "outputs" / "evals")
    assert run["run"]["job_type"] == "eval" and run["config"]["seed"] == 1 and run["config"]["task"]["name"] == "snli"
    fields = run["config"]["run"]
    assert fields["trained_run_id"] == trained["run_id"] and fields["trained_wandb_id"] == trained_id
    assert fields["checkpoint"] == str(ckpt.resolve()) and fields["run_id"] == record["run_id"]
    assert fields["fingerprint"] == trained["fingerprint"] and fields["scale"] == trained["scale"]
    step = trained["steps"]  # 15: the checkpoint's global step, where the training logged its test
    assert logged(run, "val/acc") == [(step, pytest.approx(record["metrics"]["val/acc"]))]
    assert logged(run, "test/acc") == [(step, pytest.approx(record["metrics"]["test/acc"]))]
    assert [row["epoch"] for row in run["history"] if "val/acc" in row] == [2]  # as the training logged epoch 2's
    assert run["summary"]["record/trained_run_id"] == trained["run_id"]
    assert run["summary"]["record/trained_wandb_id"] == trained_id


def test_an_evaluations_epochs_are_the_training_records_for_its_last_checkpoint(wandb_model, tmp_path):
    """The training record counts the epochs trained (3); the evaluation of the same checkpoint said 2, the
    checkpoint's 0-based epoch index."""
    folder, trained = wandb_model
    record = _evaluate(folder / "checkpoints" / "last.ckpt", tmp_path)
    assert (record["epochs"], record["steps"]) == (trained["epochs"], trained["steps"]) == (3, 15)


def test_checkpoint_epochs_count_a_part_trained_epoch():
    """A step budget or a stop ends an epoch part way: the training record counts it (7 steps of 5 a epoch: 2)."""
    from coda_exp.trained import checkpoint_epochs

    def ckpt(epoch, batches, step):
        return {"epoch": epoch, "global_step": step, "loops": {"fit_loop": {
            "epoch_loop.batch_progress": {"current": {"completed": batches}}}}}

    assert checkpoint_epochs(ckpt(1, 2, 7)) == 2 and checkpoint_epochs(ckpt(2, 5, 15)) == 3
    assert checkpoint_epochs(ckpt(1, 0, 5)) == 1  # saved as its epoch began: that epoch trained nothing yet
    assert checkpoint_epochs({"epoch": 0, "global_step": 3}) == 1 and checkpoint_epochs({"epoch": 0}) == 0
