"""A run stopped or killed at an epoch's end and resumed is the uninterrupted run, bit for bit: a stop on an epoch's
last batch (AlgoLisp: a validation every 10 steps, interrupted.ckpt put off a step), and a step-budgeted run resumed
from the checkpoint written at an epoch's end (SST and IMDb at the fixture scale: epochs of one batch, each
validated; ``coda_exp.resume_epoch``). Split from ``test_resume.py`` at its size limit."""

import signal

import pytest

from coda_exp import results
from coda_exp.pipeline import run
from tests.e2e.helpers import logged_losses, train


def _same(a, b) -> bool:
    """Whether two checkpoint values (tensors, nested in dicts and lists) are equal, bit for bit."""
    import torch

    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _same_training(a_path, b_path) -> None:
    """Two last.ckpt files hold the same weights, optimizer and scheduler states, epoch and step."""
    import torch

    a, b = (torch.load(p, map_location="cpu", weights_only=False) for p in (a_path, b_path))
    assert (a["epoch"], a["global_step"]) == (b["epoch"], b["global_step"])
    assert _same(a["state_dict"], b["state_dict"])
    assert _same(a["optimizer_states"], b["optimizer_states"]) and _same(a["lr_schedulers"], b["lr_schedulers"])


def _whole_then_stopped(compose, tmp_path, base: list[str], step: int, signum: int) -> None:
    """The uninterrupted run of ``base`` (in ``whole/``), then one signalled ``signum`` at ``step`` (in ``part/``)."""
    run(compose(base, tmp_path / "whole"))
    hook = ["+callbacks.sig._target_=tests.e2e.kill_hook.SignalAtStep", f"+callbacks.sig.step={step}",
            f"+callbacks.sig.signum={int(signum)}"]
    with pytest.raises(SystemExit):
        run(compose([*base, *hook], tmp_path / "part"))


@pytest.mark.slow  # ~25 s each: two AlgoLisp runs
@pytest.mark.parametrize("steps,signalled,saved_at", [(30, 24, 25), (32, 32, 32)])
def test_a_stop_at_an_epochs_last_batch_resumes_to_the_uninterrupted_run(compose, tmp_path, steps, signalled,
                                                                         saved_at):
    """AlgoLisp at the fixture scale: 2 batches an epoch, a validation every 10 steps. Stopped at step 24 (an
    epoch's last batch), interrupted.ckpt was saved there, and pytorch-lightning 2.6 resumed it into that epoch
    again, its data order included: the weights differed from the first resumed step. The stop is now at step 25;
    at the training's last step (32, no validation due), at the training's end, before the test."""
    import torch

    base = ["task=algolisp", "model=coda_transformer", "scale=fixture", "logger=none", "seed=1",
            "save_predictions=false", f"task.max_steps={steps}"]
    _whole_then_stopped(compose, tmp_path, base, signalled, signal.SIGTERM)
    saved = tmp_path / "part" / "run" / "checkpoints" / "interrupted.ckpt"
    assert torch.load(saved, map_location="cpu", weights_only=False, mmap=True)["global_step"] == saved_at
    run(compose([*base, f"ckpt_path={saved}"], tmp_path / "part"))
    (whole,) = results.load_records(tmp_path / "whole" / "results" / "runs", strict=True)
    (resumed,) = results.load_records(tmp_path / "part" / "results" / "runs", strict=True)
    assert (resumed["steps"], resumed["epochs"], resumed["metrics"]) == (whole["steps"], whole["epochs"],
                                                                        whole["metrics"])
    a, b = (torch.load(folder / "run" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
            for folder in (tmp_path / "whole", tmp_path / "part"))
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])


@pytest.mark.parametrize("task,model,steps,stop,epoch", [
    ("sst", "transformer_classifier", 8, 4, 3),  # stopped after epoch 3's end (step 4), resumed for 4 more steps
    # epochs of 3 batches: epoch 1's end (~4 s: the next case resumes there too, so make test keeps that one)
    pytest.param("imdb", "coda_transformer_classifier", 9, 6, 1, marks=pytest.mark.slow),
    # the budget ends 2 batches into epoch 2: its end checks early stopping on epoch 1's validation again (the
    # resumed run, which had not validated since, raised "conditioned on metric val/loss which is not available")
    ("imdb", "coda_transformer_classifier", 8, 6, 1),
])
def test_a_step_budgeted_run_resumed_from_an_epochs_end_checkpoint_equals_the_uninterrupted_run(
        compose, tmp_path, task, model, steps, stop, epoch):
    """SST and IMDb at the fixture scale: a step budget, a validation at each epoch's end (SST's epochs one batch
    long), so every last.ckpt is written at an epoch's end. Resumed from one (a Ctrl-C at that step stops once it
    is written), pytorch-lightning 2.6 ran that epoch's end again and counted it twice: every later epoch took the
    next epoch's data order (the samplers' epoch), and the weights, the curve and the test differed from the
    uninterrupted run's; each later step was logged a step late. Now the weights, the optimizer, the records and
    the CSV log are the uninterrupted run's, bit for bit."""
    import torch

    base = [f"task={task}", f"model={model}", "scale=fixture", "logger=csv", "seed=3", "save_predictions=false",
            "task.monitor=val/loss", "task.monitor_mode=min", f"task.max_steps={steps}", "trainer.log_every_n_steps=1"]
    _whole_then_stopped(compose, tmp_path, base, stop, signal.SIGINT)
    last = tmp_path / "part" / "run" / "checkpoints" / "last.ckpt"
    saved = torch.load(last, map_location="cpu", weights_only=False, mmap=True)
    assert (saved["global_step"], saved["epoch"]) == (stop, epoch)
    progress = saved["loops"]["fit_loop"]["epoch_progress"]["total"]
    assert progress["processed"] == progress["completed"] + 1  # written in its end hooks (Lightning's counts)
    run(compose([*base, f"ckpt_path={last}"], tmp_path / "resumed"))
    (whole,) = results.load_records(tmp_path / "whole" / "results" / "runs", strict=True)
    (resumed,) = results.load_records(tmp_path / "resumed" / "results" / "runs", strict=True)
    for key in ("steps", "epochs", "val_curve", "val_curve_steps", "metrics"):
        assert resumed[key] == whole[key], key
    assert resumed["best_checkpoint"].rsplit("/", 1)[1] == whole["best_checkpoint"].rsplit("/", 1)[1]
    _same_training(tmp_path / "whole" / "run" / "checkpoints" / "last.ckpt", last)  # (the resumed run's, written
    # in the stopped run's folder)
    logged, part, after = (logged_losses(tmp_path / f) for f in ("whole", "part", "resumed"))
    per_epoch = stop // (epoch + 1)
    assert sorted(logged["train/loss_step"]) == list(range(steps))
    assert len(logged["train/loss_epoch"]) == -(-steps // per_epoch)  # a last epoch the budget cut short too
    for name, values in logged.items():
        assert not set(part.get(name, {})) & set(after.get(name, {})), name  # no step logged twice
        assert {**part.get(name, {}), **after.get(name, {})} == values, name  # every one, bit for bit


@pytest.mark.slow  # ~30 s: four SST processes
def test_a_run_killed_after_an_epochs_end_checkpoint_resumes_to_the_uninterrupted_run(tmp_path):
    """SST at the fixture scale validates every step, its epochs one batch long, so last.ckpt is written at each
    epoch's end: killed after one, the resumed run stopped at once ("Early stopping conditioned on metric val/acc
    which is not available": Lightning runs that epoch's end again, without its validation); then it finished, but
    one epoch ahead in its data order (Lightning counted that epoch's end twice): not the uninterrupted run."""
    base = ["task=sst", "model=coda_transformer_classifier", "scale=fixture", "seed=1", "save_predictions=false",
            "task.max_steps=24"]
    whole = train([*base, f"hydra.run.dir={tmp_path}/whole"], tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr[-3000:]
    killed = train([*base, "+callbacks.kill._target_=tests.e2e.kill_hook.KillAtStep", "+callbacks.kill.step=18",
                    f"hydra.run.dir={tmp_path}/run"], tmp_path)
    assert killed.returncode == -signal.SIGKILL
    resumed = train([*base, f"ckpt_path={tmp_path}/run/checkpoints/last.ckpt", f"hydra.run.dir={tmp_path}/run"],
                    tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    (record,) = results.load_records(tmp_path / "results" / "runs", strict=True)
    (uninterrupted,) = results.load_records(tmp_path / "whole" / "results" / "runs", strict=True)
    assert record["steps"] == 24 and record["status"] == "finished"
    for key in ("steps", "epochs", "val_curve", "val_curve_steps", "metrics"):
        assert record[key] == uninterrupted[key], key
    _same_training(tmp_path / "whole" / "checkpoints" / "last.ckpt", tmp_path / "run" / "checkpoints" / "last.ckpt")


@pytest.mark.slow  # ~25 s each: three processes
@pytest.mark.parametrize("route,base", [
    ("resume=auto", ["task=snli", "model=decompatt_coda", "task.patience=2"]),
    ("ckpt_path", ["task=snli", "model=decompatt_coda", "task.patience=2"]),
    ("ckpt_path", ["task=sst", "model=transformer_classifier", "task.max_steps=8"]),
])
def test_a_run_killed_after_its_training_ended_resumes_to_the_uninterrupted_runs_end(tmp_path, route, base):
    """SNLI at the fixture scale with patience 2 stops early at step 30 of 40. Killed after that stop (as its test
    began), the resumed run trained on to step 40 (Lightning restores no ``should_stop``): its weights, curve, best
    checkpoint and test differed. Now it stops where the uninterrupted run stopped and tests the same checkpoint.
    SST, 8 steps of one-batch epochs, killed as its test began: the resumed run's record said 7 epochs, not 8
    (``resume_epoch.epochs_run``)."""
    base = [*base, "scale=fixture", "seed=3", "save_predictions=false"]
    whole = train([*base, f"hydra.run.dir={tmp_path}/whole"], tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr[-3000:]
    (uninterrupted,) = results.load_records(tmp_path / "whole" / "results" / "runs", strict=True)
    assert "task=sst" in base or uninterrupted["steps"] < 40  # it stopped early
    # resume=auto finds the killed run among the run folders (its own folder, Hydra's default); ckpt_path names it
    folder = [] if route == "resume=auto" else [f"hydra.run.dir={tmp_path}/run"]
    kill = ["+callbacks.kill._target_=tests.e2e.kill_hook.KillAtTestStart", f"+callbacks.kill.marker={tmp_path}/k"]
    killed = train([*base, *kill, *folder], tmp_path)
    assert killed.returncode == -signal.SIGKILL
    (last,) = (tmp_path / "run" / "checkpoints").glob("last.ckpt") if folder else tmp_path.glob(
        "outputs/runs/**/checkpoints/last.ckpt")
    again = "resume=auto" if route == "resume=auto" else f"ckpt_path={last}"
    resumed = train([*base, *kill, again, *folder], tmp_path)  # the same config: the kill is spent (its marker)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert route != "resume=auto" or "resume=auto: resuming the same run from" in resumed.stderr + resumed.stdout
    (record,) = results.load_records(tmp_path / "results" / "runs", strict=True)
    for key in ("status", "steps", "epochs", "val_curve", "val_curve_steps", "metrics"):
        assert record[key] == uninterrupted[key], key
    assert record["best_checkpoint"].rsplit("/", 1)[1] == uninterrupted["best_checkpoint"].rsplit("/", 1)[1]
    _same_training(tmp_path / "whole" / "checkpoints" / "last.ckpt", last)
