"""Faults of a run: killed, signalled (one process and DDP, gradient accumulation) and resumed bit for bit, Ctrl-C
or SIGTERM outside a training step, a corrupt checkpoint, a full disk. A stop or kill at an epoch's end:
test_resume_epoch_end.py."""

import signal
from pathlib import Path

import pytest

from coda_exp import results
from coda_exp.pipeline import run
from tests.e2e.helpers import CtrlCMidWrite, logged_losses, train

# the "best" checkpoint is pinned to epoch 0 (monitor epoch, mode min): a resumed run that forgot it would test the
# best epoch after the resume instead
RUN = ["task=snli", "scale=fixture", "task.epochs=4", "seed=3", "callbacks.model_checkpoint.monitor=epoch",
       "callbacks.model_checkpoint.mode=min"]
KILL = ["+callbacks.kill._target_=tests.e2e.kill_hook.KillAfterEpoch", "+callbacks.kill.epoch=1"]


@pytest.mark.slow  # ~26 s: three training processes; `make test-full` runs it (keeps `make test` within 5 minutes)
def test_killed_and_resumed_run_equals_the_uninterrupted_one(tmp_path):
    cache = tmp_path / "cache"
    whole = train([*RUN, f"hydra.run.dir={tmp_path}/whole"], tmp_path / "a", cache)
    assert whole.returncode == 0, whole.stderr[-3000:]
    killed = train([*RUN, *KILL, f"hydra.run.dir={tmp_path}/killed"], tmp_path / "b", cache)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    last = tmp_path / "killed" / "checkpoints" / "last.ckpt"
    resumed = train([*RUN, f"ckpt_path={last}", f"hydra.run.dir={tmp_path}/resume"], tmp_path / "b", cache)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    (a,) = results.load_records(tmp_path / "a" / "results" / "runs", strict=True)
    (b,) = results.load_records(tmp_path / "b" / "results" / "runs", strict=True)
    assert b["output_dir"] == str(tmp_path / "killed")  # the resumed run continued in its checkpoint's folder
    assert b["resumed_from"] == str(last)
    best = a["best_checkpoint"].rsplit("/", 1)[1]
    assert best.startswith("epoch000-") and b["best_checkpoint"] == str(tmp_path / "killed" / "checkpoints" / best)
    assert len(a["val_curve"]) == 4 and b["val_curve"] == a["val_curve"]  # bit-identical validation curve
    assert b["val_curve_steps"] == a["val_curve_steps"] and None not in a["val_curve_steps"]  # and its steps
    assert b["metrics"] == a["metrics"] and b["steps"] == a["steps"]


@pytest.mark.parametrize("task,model,stop,extra,saved", [
    ("snli", "decompatt", "step=7", [], ("interrupted", 7)),  # 5 batches of 16 an epoch (72 examples): step 7 is
    # batch 2 of epoch 1
    ("sst", "transformer_classifier", "step=5", [], ("interrupted", 5)),  # token batches (TokenBatchSampler), 3 an
    # epoch: batch 2 of epoch 1
    # trainer.limit_train_batches=3: epochs of 3 steps, so step 4 is batch 1 of epoch 1 (before, a limit made the
    # resumed loader start that epoch from its first batch again)
    ("snli", "decompatt", "step=4", ["trainer.limit_train_batches=3"], ("interrupted", 4)),
    # gradient accumulation over 2 batches: 3 steps an epoch (Lightning steps on the epoch's last batch too). The
    # signal at the end of batch 8 (epoch 1's third, which makes no step) stops after batch 9, at step 5
    ("snli", "decompatt", "batches=8", ["+trainer.accumulate_grad_batches=2"], ("interrupted", 5)),
    # the epoch's last batch: the stop waits for its validation and the epoch's checkpoints, and names last.ckpt.
    # Stopped before them, the resumed run never validated epoch 0 (Lightning counts a checkpoint from a batch's end
    # as validated): one point short, and another best checkpoint tested
    ("snli", "decompatt", "step=5", [], ("last", 5)),
    # a validation every 3 steps (MLU's generated stream): step 3 validates (make test: IWSLT's below)
    pytest.param("mlu", "coda_transformer", "step=3", ["task.max_steps=7", "task.val_check_interval=3"], ("last", 3),
                 marks=pytest.mark.slow),
    # and under accumulation, where Lightning's val_check_interval counts batches: the signal after batch 5 (no
    # step) stops after batch 6, step 3, which validates
    pytest.param("mlu", "coda_transformer", "batches=5", ["task.max_steps=4", "task.val_check_interval=3",
                                                       "+trainer.accumulate_grad_batches=2"], ("last", 3),
                 marks=pytest.mark.slow),  # ~7 s: make test has the stop at a validating step below (IWSLT)
    # T2T's checkpoint averaging (a periodic checkpoint every validation, 10 steps): stopped before them at step 10,
    # the resumed run had neither that validation nor that checkpoint, and tested its last weights (no best, nothing
    # averaged)
    ("iwslt15_envi", "transformer", "step=10", ["task.average_last=2"], ("last", 10)),
])
def test_a_run_stopped_mid_epoch_resumes_to_the_uninterrupted_run(compose, tmp_path, caplog, task, model, stop,
                                                                  extra, saved):
    """Ctrl-C mid-epoch (interrupted.ckpt, or last.ckpt where the step validates) and resumed: the training loader
    leaves out the batches of the epoch already trained on (Lightning restores the step, not a loader's place), so
    the run is the uninterrupted one, bit for bit. Before, a run resumed mid-epoch trained on the epoch's first
    batches again; under gradient accumulation it did, and a stop between two batches of one step lost the
    gradients of the first; a stop at a step that validates lost that validation."""
    import torch

    # validation by val/loss, which moves with every step (accuracy on a few examples may not tell the batches apart)
    base = [f"task={task}", f"model={model}", "scale=fixture", "logger=none", "seed=3", "save_predictions=false",
            "task.monitor=val/loss", "task.monitor_mode=min", *extra,
            *({"snli": ["task.epochs=3"], "sst": ["task.max_steps=12", "data.max_tokens=128"]}.get(task, []))]
    run(compose(base, tmp_path / "whole"))
    kind, count = stop.split("=")
    hook = [f"+callbacks.sig._target_=tests.e2e.kill_hook.{'SignalAtStep' if kind == 'step' else 'SignalAfterBatches'}",
            f"+callbacks.sig.{kind}={count}", "+callbacks.sig.signum=2"]
    with pytest.raises(SystemExit):
        run(compose([*base, *hook], tmp_path / "part"))
    checkpoints = tmp_path / "part" / "run" / "checkpoints"
    name, step = saved
    resume_from = checkpoints / f"{name}.ckpt"
    said = [r.getMessage() for r in caplog.records if "run interrupted" in r.getMessage()]
    assert len(said) == 1 and f"ckpt_path={resume_from}" in said[0]
    # where a validation follows, interrupted.ckpt is saved before it too (a kill during the validation keeps the
    # steps): the same step, so resume=auto takes last.ckpt, written after the validation
    for path in {resume_from, checkpoints / "interrupted.ckpt"}:
        assert torch.load(path, map_location="cpu", weights_only=False, mmap=True)["global_step"] == step
    run(compose([*base, f"ckpt_path={resume_from}"], tmp_path / "resumed"))
    (whole,) = results.load_records(tmp_path / "whole" / "results" / "runs", strict=True)
    (resumed,) = results.load_records(tmp_path / "resumed" / "results" / "runs", strict=True)
    assert resumed["steps"] == whole["steps"] and resumed["val_curve_steps"] == whole["val_curve_steps"]
    assert resumed["val_curve"] == whole["val_curve"] and resumed["metrics"] == whole["metrics"]
    assert resumed["best_checkpoint"].rsplit("/", 1)[1] == whole["best_checkpoint"].rsplit("/", 1)[1]


@pytest.mark.slow  # ~9 s: a training process; make test's in-process signal tests cover the stop itself
def test_ctrl_c_in_a_sweep_stops_the_sweep_with_a_checkpoint_and_says_so(tmp_path):
    """A real SIGINT to a sweep's process: its running job saves interrupted.ckpt, the later job never starts, the
    exit status is 130 and the message gives the job's own overrides to resume it."""
    hook = ["+callbacks.sig._target_=tests.e2e.kill_hook.SignalAtStep", "+callbacks.sig.step=3",
            "+callbacks.sig.signum=2"]
    proc = train(["-m", "task=snli", "scale=fixture", "task.epochs=2", "seed=1,2", *hook,
                  f"hydra.sweep.dir={tmp_path}/sweep"], tmp_path)
    assert proc.returncode == 130, proc.stderr[-3000:]
    (job,) = (tmp_path / "sweep").glob("0-snli-decompatt-s1-*")  # (tagged by the hook's overrides: run_tag.py)
    saved = job / "checkpoints" / "interrupted.ckpt"
    assert saved.is_file() and not list((tmp_path / "sweep").glob("1-snli-decompatt-s2*"))
    out = proc.stdout + proc.stderr  # the log's console lines go to stdout, the Ctrl-C notice to stderr
    assert "seed=1 +callbacks.sig._target_" in out and f"ckpt_path={saved}" in out
    assert "the sweep stops here, its later jobs not run" in out and "Ctrl-C: stopping after this step" in out
    # the sweep's summary lists the job as interrupted (it was left out), with the command that goes on with the sweep
    assert "sweep: 1 job(s), 0 failed, 1 interrupted\n  job #0 [task=snli scale=fixture task.epochs=2 seed=1 " in out
    assert f"interrupted (Ctrl-C, exit status 130) at step 3, its checkpoint {saved}\n" in out
    assert "resume=auto" in out.rsplit("the sweep stopped there; to go on", 1)[-1]
    assert not (tmp_path / "results" / "runs").exists() or not list((tmp_path / "results" / "runs").iterdir())


def test_a_sigterm_between_two_steps_stops_at_the_next_steps_end_with_a_checkpoint(make_cfg, caplog):
    """A SIGTERM after GracefulStop's check at a step's end and before Lightning's (the schedulers' update, the
    loggers' save, the next batch's loading): Lightning stopped the run "outside a training step", nothing saved
    and the step lost. Now it stops at the next step's end with interrupted.ckpt, as in a step."""
    import torch

    hook = ["+callbacks.sig._target_=tests.e2e.kill_hook.SigtermBetweenSteps", "+callbacks.sig.step=2"]
    cfg = make_cfg("task=snli", "scale=fixture", "logger=none", "task.epochs=3", *hook)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stopped:
        run(cfg)
    assert stopped.value.code == 143 and "outside a training step" not in caplog.text
    saved = Path(cfg.paths.output_dir) / "checkpoints" / "interrupted.ckpt"
    assert f"run interrupted (SIGTERM) at step 3, its checkpoint saved (no test, no record): {saved}" in caplog.text
    assert torch.load(saved, map_location="cpu", weights_only=False, mmap=True)["global_step"] == 3
    assert signal.getsignal(signal.SIGTERM) == before  # every handler put back


def test_a_sigterm_outside_a_training_step_exits_143_not_0(make_cfg, caplog):
    """Lightning stops a validation that meets a SIGTERM with an exception that exits with status 0, as a finished
    run would (a cluster's scheduler would count the preempted job done)."""
    hook = ["+callbacks.sig._target_=tests.e2e.kill_hook.SigtermInValidation", "+callbacks.sig.step=5"]
    with pytest.raises(SystemExit) as stopped:
        run(make_cfg("task=snli", "scale=fixture", "logger=none", "task.epochs=3", *hook))
    assert stopped.value.code == 143
    assert "run stopped by SIGTERM outside a training step" in caplog.text and "last.ckpt" in caplog.text


@pytest.mark.parametrize("content,expected", [
    (None, "the file is empty"),
    (b"not a checkpoint at all\n", "cannot be read (not the zip archive torch.save writes: truncated, or another "),
    ("truncated", "cannot be read (not the zip archive torch.save writes"),
    ("foreign", "no 'state_dict'"),
])
def test_a_corrupt_checkpoint_is_one_line_naming_it_before_any_data(make_cfg, tmp_path, monkeypatch, content,
                                                                    expected):
    import torch

    from coda_exp.checkpoint_avg import CheckpointError

    bad = tmp_path / "bad.ckpt"
    if content == "truncated":
        torch.save({"state_dict": {"w": torch.zeros(1000)}, "epoch": 1}, bad)
        bad.write_bytes(bad.read_bytes()[:300])
    elif content == "foreign":
        torch.save({"weights": torch.zeros(3)}, bad)
    else:
        bad.write_bytes(content or b"")
    monkeypatch.setattr("coda_exp.pipeline.instantiate", lambda *a, **k: pytest.fail("data loaded before the check"))
    with pytest.raises(CheckpointError) as err:
        run(make_cfg("task=snli", "scale=fixture", "logger=none", f"ckpt_path={bad}"))
    message = str(err.value)
    assert "\n" not in message and message.startswith(str(bad)) and expected in message
    assert "expected a Lightning checkpoint" in message and "mmap" not in message  # not torch's advice to re-save


@pytest.mark.slow  # ~45 s: three two-process runs each; the sampler's sharding and skip are tested in tests/data
@pytest.mark.parametrize("task,model,step,extra,saved", [
    ("snli", "decompatt", 4, ["task.epochs=3"], "interrupted"),  # 36 examples a rank, 3 batches: step 4 is batch 1
    # of epoch 1
    ("sst", "transformer_classifier", 3, ["task.max_steps=8", "data.max_tokens=128"], "interrupted"),  # 2 token
    # batches a rank
    ("snli", "decompatt", 3, ["task.epochs=3"], "last"),  # epoch 0's last batch: every rank stops after its
    # validation and checkpoints
])
def test_a_ddp_run_stopped_mid_epoch_resumes_to_the_uninterrupted_run(tmp_path, task, model, step, extra, saved):
    """trainer=ddp, two CPU processes: a SIGTERM mid-epoch (interrupted.ckpt) and the resumed run equal the
    uninterrupted run. Each rank leaves out its batches of the epoch already trained on; before, Lightning's own
    DistributedSampler replaced ours and the resumed run trained on the epoch's first batches again."""
    base = [f"task={task}", f"model={model}", "scale=fixture", "seed=3", "save_predictions=false", "trainer=ddp",
            "trainer.accelerator=cpu", "trainer.devices=2", "task.monitor=val/loss", "task.monitor_mode=min", *extra]
    cache = tmp_path / "cache"
    whole = train([*base, f"hydra.run.dir={tmp_path}/whole"], tmp_path / "a", cache)
    assert whole.returncode == 0, whole.stderr[-3000:]
    hook = ["+callbacks.sig._target_=tests.e2e.kill_hook.SignalAtStep", f"+callbacks.sig.step={step}",
            "+callbacks.sig.signum=15"]
    part = train([*base, *hook, f"hydra.run.dir={tmp_path}/part"], tmp_path / "b", cache)
    assert part.returncode == 143, part.stderr[-3000:]
    saved = tmp_path / "part" / "checkpoints" / f"{saved}.ckpt"
    assert f"ckpt_path={saved}" in part.stdout + part.stderr
    resumed = train([*base, f"ckpt_path={saved}", f"hydra.run.dir={tmp_path}/resumed"], tmp_path / "b", cache)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    (a,) = results.load_records(tmp_path / "a" / "results" / "runs", strict=True)
    (b,) = results.load_records(tmp_path / "b" / "results" / "runs", strict=True)
    assert b["resumed_from"] == str(saved) and b["steps"] == a["steps"]
    assert b["val_curve_steps"] == a["val_curve_steps"] and b["val_curve"] == a["val_curve"]
    assert b["metrics"] == a["metrics"]


@pytest.mark.slow  # ~14 s: a two-process run
def test_a_sigterm_in_a_ddp_test_stops_every_rank_cleanly(tmp_path):
    """Every rank signalled during the test (and rank 1 twice: rank 0 forwards its own): before, Lightning's handler
    broadcast inside the signal handler and rank 1 died with gloo's "Connection closed by peer" traceback."""
    proc = train(["task=snli", "model=decompatt", "scale=fixture", "task.epochs=1", "data.eval_batch_size=4",
                  "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
                  "+callbacks.sig._target_=tests.e2e.kill_hook.SigtermInTest", f"hydra.run.dir={tmp_path}/run"],
                 tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 143, out[-3000:]
    assert "Traceback" not in out and "Connection closed" not in out, out[-3000:]
    assert out.count("run stopped by SIGTERM outside a training step") == 1


def test_ctrl_c_outside_a_training_step_is_one_message_and_exit_130(make_cfg, monkeypatch, caplog):
    """Ctrl-C while the data loads: a traceback and Hydra's exit 1 before; in Lightning's sanity check: Lightning's
    own stop, exit 1. Now one message (no checkpoint was saved then) and 130, which stops a sweep too."""
    from coda_exp import pipeline

    base = ["task=snli", "scale=fixture", "logger=none", "task.epochs=1"]

    def interrupted(cfg):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(pipeline, "build_data", interrupted)
        with pytest.raises(SystemExit) as stop:
            run(make_cfg(*base))
    assert stop.value.code == 130
    assert "run stopped by Ctrl-C outside a training step, with no checkpoint saved then: it has none" in caplog.text
    with pytest.raises(SystemExit) as stop:
        run(make_cfg(*base, "+callbacks.c._target_=tests.e2e.kill_hook.CtrlCInSanityCheck"))
    assert stop.value.code == 130 and caplog.text.count("run stopped by Ctrl-C outside a training step") == 2


def test_a_second_ctrl_c_while_interrupted_ckpt_is_written_is_one_message_and_exit_130(make_cfg, tmp_path,
                                                                                       monkeypatch, caplog):
    """The second Ctrl-C inside torch's writer was RuntimeError "unexpected pos", a traceback and exit 1: now the
    stop at once (one message, 130), with no partial interrupted.ckpt or temporary file left."""
    import torch

    real_save = torch.save

    from coda_exp.checkpoint_io import AtomicCheckpointIO

    real_checkpoint, target = AtomicCheckpointIO.save_checkpoint, {}

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        target["name"] = Path(path).name
        return real_checkpoint(self, checkpoint, path, storage_options)

    def save(obj, f):
        return real_save(obj, CtrlCMidWrite(f) if target.get("name") == "interrupted.ckpt" else f)

    monkeypatch.setattr(AtomicCheckpointIO, "save_checkpoint", save_checkpoint)
    monkeypatch.setattr(torch, "save", save)
    with pytest.raises(SystemExit) as stop:
        run(make_cfg("task=snli", "scale=fixture", "logger=none", "task.epochs=1", f"paths.output_dir={tmp_path}/run",
                     "+callbacks.sig._target_=tests.e2e.kill_hook.SignalAtStep", "+callbacks.sig.step=3",
                     "+callbacks.sig.signum=2"))
    assert stop.value.code == 130 and "run stopped by Ctrl-C outside a training step" in caplog.text
    assert "Traceback" not in caplog.text and "unexpected pos" not in caplog.text
    assert not [p.name for p in (tmp_path / "run" / "checkpoints").iterdir() if p.name.startswith((".", "interr"))]


def test_ctrl_c_before_a_run_starts_is_one_line(monkeypatch, capsys):
    """Ctrl-C while the imports or the checks run (the first seconds of every command): one line and 130, not a
    70-line traceback; with -v the traceback too."""
    from coda_exp import cli

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_main", interrupted)
    with pytest.raises(SystemExit) as stop:
        cli.main(["task=snli"])
    assert stop.value.code == 130 and capsys.readouterr().err.strip() == "interrupted (Ctrl-C)"
    with pytest.raises(KeyboardInterrupt):
        cli.main(["task=snli", "-v"])


def test_a_full_disk_is_one_message_naming_the_checkpoint_to_resume_from(make_cfg, tmp_path, monkeypatch, caplog):
    """The second checkpoint write finds the disk full: a traceback (exit 1) before, and Lightning's move of its
    temporary file left that checkpoint cut short; now one message (a user's error, exit 2) naming the file and the
    whole last.ckpt to resume from, and the run resumes from it."""
    import errno

    from coda_exp.checkpoint_io import AtomicCheckpointIO
    from coda_exp.run_folder import OutputDirError

    real, calls = AtomicCheckpointIO.save_checkpoint, []

    def save(self, checkpoint, path, storage_options=None):
        calls.append(path)
        if len(calls) == 3:  # epoch 0: best and last written; epoch 1's best finds the disk full
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(self, checkpoint, path, storage_options)

    base = ["task=snli", "scale=fixture", "logger=none", "task.epochs=2"]
    with monkeypatch.context() as patch:
        patch.setattr(AtomicCheckpointIO, "save_checkpoint", save)
        with pytest.raises(OutputDirError) as err:
            run(make_cfg(*base))
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert str(err.value) == (f"No space left on device writing {calls[2]}: free space on that disk (or write "
                              f"elsewhere: hydra.run.dir=..., paths.results_dir=..., paths.cache_dir=...), then "
                              f"resume with ckpt_path={last}")
    assert "Traceback" not in caplog.text
    run(make_cfg(*base, f"ckpt_path={last}"))
    (record,) = results.load_records(tmp_path / "results" / "runs", strict=True)
    assert record["steps"] == 10 and record["resumed_from"] == str(last)


@pytest.mark.parametrize("step", [2, 5])  # mid-epoch (interrupted.ckpt); the epoch's last step (last.ckpt)
def test_a_stopped_and_resumed_run_logs_every_step_and_epoch_once(compose, tmp_path, step):
    """A Ctrl-C stop raised in a hook before Lightning sent the step's metrics: the step's ``train/loss_step``
    (mid-epoch) or the epoch's ``train/loss_epoch`` (at its end) was missing from every logger. (Lightning's epoch
    mean of a stopped epoch covers the batches after the resume only: its value is not the uninterrupted one.)"""
    base = ["task=snli", "model=decompatt", "scale=fixture", "logger=csv", "seed=3", "save_predictions=false",
            "task.epochs=2", "trainer.log_every_n_steps=1"]
    run(compose(base, tmp_path / "whole"))
    whole = logged_losses(tmp_path / "whole")
    assert len(whole["train/loss_epoch"]) == 2 and sorted(whole["train/loss_step"]) == list(range(10))  # 5 an epoch
    hook = ["+callbacks.sig._target_=tests.e2e.kill_hook.SignalAtStep", f"+callbacks.sig.step={step}",
            "+callbacks.sig.signum=2"]
    with pytest.raises(SystemExit):
        run(compose([*base, *hook], tmp_path / "part"))
    checkpoint = tmp_path / "part" / "run" / "checkpoints" / ("last.ckpt" if step == 5 else "interrupted.ckpt")
    run(compose([*base, f"ckpt_path={checkpoint}"], tmp_path / "resumed"))
    part, resumed = logged_losses(tmp_path / "part"), logged_losses(tmp_path / "resumed")
    for name, values in whole.items():
        joined = {**part.get(name, {}), **resumed.get(name, {})}
        assert not set(part.get(name, {})) & set(resumed.get(name, {})), name  # no step logged twice
        assert sorted(joined) == sorted(values), name
        if name == "train/loss_epoch" and step == 2:  # the stopped epoch's mean: over the batches after the resume
            joined, values = (dict(sorted(d.items())[1:]) for d in (joined, values))
        assert joined == pytest.approx(values, abs=1e-6), name
