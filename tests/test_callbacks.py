"""coda_exp.callbacks: the validation curve with its steps, and CoDA's gate statistics (hooks, hand-checked values).
Whole runs with them: tests/e2e/test_pipeline.py (records, CSV logs, resuming)."""

from __future__ import annotations

import math
import warnings
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from coda_exp.attention import CoDACrossAttention, CoDAScoring, SoftmaxScoring
from coda_exp.attention.multihead import MultiHeadAttention
from coda_exp.callbacks import GateStats, ValidationHistory


def _validated(history: ValidationHistory, value: float, step: int) -> None:
    trainer = SimpleNamespace(callback_metrics={"val/acc": torch.tensor(value)}, sanity_checking=False,
                              state=SimpleNamespace(fn="fit"), global_step=step)
    history.on_validation_end(trainer, None)


def test_validation_history_keeps_the_step_of_each_value():
    history = ValidationHistory("val/acc")
    _validated(history, 0.25, 10)
    _validated(history, 0.5, 20)
    assert history.values == [0.25, 0.5] and history.steps == [10, 20]
    restored = ValidationHistory("val/acc")
    restored.load_state_dict(history.state_dict())
    assert restored.values == [0.25, 0.5] and restored.steps == [10, 20]


def test_an_old_checkpoint_without_steps_still_loads_and_fills_what_it_can():
    history = ValidationHistory("val/acc")
    history.load_state_dict({"values": [0.1, 0.2]})  # written before the steps were kept
    assert history.values == [0.1, 0.2] and history.steps == [None, None]
    _validated(history, 0.5, 30)  # the resumed run's validations have their steps
    assert history.state_dict() == {"values": [0.1, 0.2, 0.5], "steps": [None, None, 30]}


class _Net(nn.Module):
    """The module paths of a Transformer: ``encoder.layers.<i>.self_attn`` (one head, d = 2, identity q/k maps)."""

    def __init__(self, scoring: nn.Module):
        super().__init__()
        layer = nn.Module()
        layer.self_attn = MultiHeadAttention(2, 1, scoring, bias=False)
        for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
            proj.weight.data.copy_(torch.eye(2))
        self.encoder = nn.Module()
        self.encoder.layers = nn.ModuleList([layer])

    def forward(self, x: torch.Tensor, mask: torch.Tensor, causal: bool = False) -> torch.Tensor:
        return self.encoder.layers[0].self_attn(x, x, x, key_padding_mask=mask, causal=causal)


class _Task(nn.Module):
    """What the callback sees of a task module: the network as ``model``; ``logged``: what its loggers received,
    ``{logger step: metrics}``."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.model = net
        self.logged: dict[int, dict[str, float]] = {}

    def log_metrics(self, metrics: dict, step: int) -> None:
        self.logged.setdefault(step, {}).update(metrics)


def _trainer(step: int, task: _Task):
    """A trainer after ``step`` optimizer steps whose one logger is ``task.log_metrics``."""
    return SimpleNamespace(global_step=step, loggers=[task])


def _step(callback: GateStats, task: _Task, step: int, x: torch.Tensor, mask: torch.Tensor) -> None:
    """One training batch that completes ``step``: the callback's hooks around the network's forward."""
    callback.on_train_batch_start(_trainer(step - 1, task), task, None, 0)
    task.model(x, mask)
    callback.on_train_batch_end(_trainer(step, task), task, None, None, 0)


# token 0 at the origin, token 1 at L1 distance 3 from it, token 2 padding; a second token 1 far away (distance 20)
X = torch.tensor([[[0.0, 0.0], [1.0, 2.0], [7.0, 7.0]],
                  [[0.0, 0.0], [10.0, 10.0], [7.0, 7.0]]])
MASK = torch.tensor([[True, True, False], [True, True, False]])


def _gate(distance: float, dk: int = 2) -> float:
    """Eq. 5 by hand: 2 sigmoid(N), N = -||q_i - k_j||_1 / sqrt(dk) (alpha = beta = 1, scale on)."""
    return 2.0 / (1.0 + math.exp(distance / math.sqrt(dk)))


def test_gate_statistics_equal_a_hand_computation():
    task = _Task(_Net(CoDAScoring()))
    callback = GateStats(every_n_steps=2, max_examples=1)
    callback.on_fit_start(_trainer(0, task), task)
    _step(callback, task, 1, X, MASK)  # step 1: not measured, no hook left behind
    assert callback.series == {} and task.logged == {}
    _step(callback, task, 2, X, MASK)
    # the first example only (max_examples=1): valid pairs (0,0), (0,1), (1,0), (1,1), distances 0, 3, 3, 0
    mean = (2 * _gate(0.0) + 2 * _gate(3.0)) / 4
    layer = "encoder.layers.0.self_attn"
    assert callback.series == {layer: {"steps": [2], "mean": [pytest.approx(mean)], "frac_lt_0.01": [0.0]}}
    # logged at the logger step of the measured batch's training loss (Lightning's: one less than the step count)
    assert task.logged == {1: {f"gate/{layer}/mean": pytest.approx(mean), f"gate/{layer}/frac_lt_0.01": 0.0}}
    callback.max_examples = 2
    _step(callback, task, 4, X, MASK)
    # both examples: the second's pairs (0,1), (1,0) are 20 apart, a gate of ~1e-6, i.e. closed
    assert _gate(20.0) < 0.01
    assert callback.series[layer]["mean"][1] == pytest.approx((4 * _gate(0.0) + 2 * _gate(3.0) + 2 * _gate(20.0)) / 8)
    assert callback.series[layer]["frac_lt_0.01"][1] == 2 / 8 and callback.series[layer]["steps"] == [2, 4]
    assert all(not m._forward_pre_hooks for m in task.modules())  # hooks only during measured batches


def test_gate_statistics_of_a_causal_layer_count_the_visible_pairs_only():
    """MultiHeadAttention hands CoDA the key mask and ``causal=True`` (no L x L mask): pair (0, 1) is the future."""
    task = _Task(_Net(CoDAScoring()))
    callback = GateStats(every_n_steps=1, max_examples=1)
    callback.on_fit_start(_trainer(0, task), task)
    callback.on_train_batch_start(_trainer(0, task), task, None, 0)
    task.model(X, MASK, causal=True)
    callback.on_train_batch_end(_trainer(1, task), task, None, None, 0)
    mean = (2 * _gate(0.0) + _gate(3.0)) / 3  # (0,0), (1,0), (1,1)
    assert callback.series["encoder.layers.0.self_attn"]["mean"] == [pytest.approx(mean)]


def test_gate_statistics_use_the_scoring_options():
    task = _Task(_Net(CoDAScoring(beta=0.5, scale=False, gate_scale=1.0)))
    callback = GateStats(every_n_steps=1, max_examples=1)
    callback.on_fit_start(_trainer(0, task), task)
    _step(callback, task, 1, X, MASK)
    expected = (2 * 0.5 + 2 / (1 + math.exp(0.5 * 3.0))) / 4  # g = 1, N = -0.5 ||.||_1 unscaled
    assert callback.series["encoder.layers.0.self_attn"]["mean"] == [pytest.approx(expected)]


class _Pairs(nn.Module):
    """A pairwise model's CoDA: ``attend`` = CoDACrossAttention (hidden 2, F_N = F_E the identity)."""

    def __init__(self, projection: str = "linear"):
        super().__init__()
        self.attend = CoDACrossAttention(2, hidden=2, projection=projection, dropout=0.5)
        linear = next(m for m in self.attend.proj_n.modules() if isinstance(m, nn.Linear))
        linear.weight.data.copy_(torch.eye(2))
        linear.bias.data.zero_()

    def forward(self, a, mask_a, b, mask_b):
        return self.attend(a, b, mask_a, mask_b)


@pytest.mark.parametrize("projection", ["linear", "mlp"])
def test_gate_statistics_of_a_pairwise_models_cross_attention(projection):
    """callbacks=gate_stats on decompatt_coda warned "no CoDA attention layer" and measured nothing: only CoDAScoring
    (the Transformers') was looked for. The mlp projection's dropout is off for the measure: no random numbers drawn,
    the training mode kept."""
    task = _Task(_Pairs(projection))
    callback = GateStats(every_n_steps=1, max_examples=1)
    callback.on_fit_start(_trainer(0, task), task)
    b = torch.tensor([[[0.0, 0.0], [3.0, 0.0]], [[9.0, 9.0], [9.0, 9.0]]])
    task.train()
    rng = torch.get_rng_state()
    callback._capture("attend", task.model.attend)(task.model.attend, (X, b, MASK, torch.ones(2, 2, dtype=bool)), {})
    assert torch.equal(rng, torch.get_rng_state()) and all(m.training for m in task.modules())
    callback._captured = {}
    callback.on_train_batch_start(_trainer(0, task), task, None, 0)
    task.model(X, MASK, b, torch.ones(2, 2, dtype=torch.bool))
    callback.on_train_batch_end(_trainer(1, task), task, None, None, 0)
    # example 0: a's real tokens (0,0), (1,2) x b's (0,0), (3,0): L1 distances 0, 3, 3, 4 (ReLU keeps them: >= 0)
    mean = (_gate(0.0) + 2 * _gate(3.0) + _gate(4.0)) / 4
    assert callback.series == {"attend": {"steps": [1], "mean": [pytest.approx(mean)], "frac_lt_0.01": [0.0]}}
    assert all(not m._forward_pre_hooks for m in task.modules())


def test_gate_statistics_survive_a_checkpoint():
    task = _Task(_Net(CoDAScoring()))
    callback = GateStats(every_n_steps=1)
    callback.on_fit_start(_trainer(0, task), task)
    _step(callback, task, 1, X, MASK)
    restored = GateStats(every_n_steps=1)
    restored.load_state_dict(callback.state_dict())
    assert restored.series == callback.series and restored.series


def test_a_model_without_coda_warns_once_and_measures_nothing():
    task = _Task(_Net(SoftmaxScoring()))
    callback = GateStats(every_n_steps=1)
    with pytest.warns(UserWarning, match="no CoDA attention layer"):
        callback.on_fit_start(_trainer(0, task), task)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for step in (1, 2):
            _step(callback, task, step, X, MASK)
    assert callback.series == {} and task.logged == {}


def test_a_bad_setting_names_itself():
    with pytest.raises(ValueError, match="every_n_steps must be an int >= 1"):
        GateStats(every_n_steps=0)
    with pytest.raises(ValueError, match="max_examples"):
        GateStats(max_examples=True)


def test_random_state_round_trip_restores_python_numpy_and_torch():
    """What a resumed run's dropout draws depends on (issue 20: only a slow kill-and-resume test caught a missing
    restore)."""
    import random

    import numpy as np
    import torch

    from coda_exp.callbacks import RandomState

    saver = RandomState()
    state = saver.state_dict()
    drawn = (random.random(), float(np.random.rand()), torch.rand(3).tolist())
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    restorer = RandomState()
    restorer.load_state_dict(state)
    restorer.on_train_start(None, None)
    assert (random.random(), float(np.random.rand()), torch.rand(3).tolist()) == drawn
    restorer.on_train_start(None, None)  # restored once: a second train start draws on
    assert torch.rand(3).tolist() != drawn[2]


def test_elapsed_time_rides_in_the_checkpoint_and_adds_up_over_resumed_runs():
    import time

    from coda_exp.callbacks import ElapsedTime

    first = ElapsedTime(start=time.time() - 100)  # a process that ran 100 s before its checkpoint
    state = first.state_dict()
    assert state["elapsed_s"] >= 100 and first.earlier == 0
    resumed = ElapsedTime(start=time.time())
    resumed.load_state_dict(state)
    assert resumed.earlier == state["elapsed_s"] and resumed.state_dict()["elapsed_s"] >= state["elapsed_s"]
    older = ElapsedTime(start=time.time())
    older.load_state_dict({})  # a checkpoint from before the time rode in it: nothing earlier known
    assert older.earlier == 0


def test_a_run_trained_on_from_another_folders_checkpoint_keeps_its_best_where_the_files_exist(tmp_path):
    """Trained on in a new folder from a finished run's checkpoint, Lightning dropped the best score ("dirpath has
    changed"), so the new run's first validation was its best whatever its score. Every monitored ModelCheckpoint
    (Lightning's own class, so its state's key in the checkpoint stays the one older checkpoints carry) keeps it;
    the unmonitored last.ckpt writer is left alone."""
    import pytorch_lightning as pl
    import torch

    from coda_exp.callbacks import KeepBestAcrossFolders, LastCheckpoint

    theirs = tmp_path / "finished" / "checkpoints"
    theirs.mkdir(parents=True)
    (theirs / "epoch000-step5.ckpt").write_bytes(b"x")
    best = str(theirs / "epoch000-step5.ckpt")
    state = {"dirpath": str(theirs), "best_model_score": torch.tensor(0.9), "best_model_path": best,
             "best_k_models": {best: torch.tensor(0.9)}, "kth_best_model_path": best, "kth_value": torch.tensor(0.9),
             "last_model_path": ""}
    new = str(tmp_path / "new" / "checkpoints")
    for exists in (True, False):
        if not exists:
            (theirs / "epoch000-step5.ckpt").unlink()
        callback = pl.callbacks.ModelCheckpoint(dirpath=new, monitor="val/acc")
        last = LastCheckpoint(dirpath=new)
        assert callback.state_key.startswith("ModelCheckpoint{")  # the key of every checkpoint written so far
        trainer = pl.Trainer(callbacks=[callback, last, KeepBestAcrossFolders()], logger=False, accelerator="cpu",
                             enable_progress_bar=False, enable_model_summary=False)
        checkpoint = {"callbacks": {callback.state_key: dict(state), last.state_key: dict(state)}}
        for each in trainer.callbacks:  # Lightning's order: every on_load_checkpoint, then every load_state_dict
            each.on_load_checkpoint(trainer, None, checkpoint)
        for each in (callback, last):
            each.load_state_dict(checkpoint["callbacks"][each.state_key])
        assert (callback.best_model_score is not None) == exists and callback.best_k_models == (
            {best: torch.tensor(0.9)} if exists else {})
        assert callback.dirpath == new and last.dirpath == new
        assert last.best_model_score is None  # not monitored: Lightning's own handling of another folder


def test_early_stopping_checks_once_per_step_across_a_resume():
    """A run resumed from a checkpoint written at an epoch's end runs that epoch's end hooks again: Lightning's check
    there raised "not available" (no validation since the resume) or counted one validation twice."""
    from coda_exp.callbacks import EarlyStopping

    def trainer(step, metrics):
        return SimpleNamespace(global_step=step, callback_metrics=metrics, fast_dev_run=False, should_stop=False,
                               current_epoch=0, strategy=SimpleNamespace(reduce_boolean_decision=lambda d, all: d))

    stopping = EarlyStopping(monitor="val/acc", mode="max", patience=5)
    stopping._run_early_stopping_check(trainer(10, {"val/acc": torch.tensor(0.5)}))
    stopping._run_early_stopping_check(trainer(20, {"val/acc": torch.tensor(0.4)}))
    assert stopping.wait_count == 1
    saved = stopping.state_dict()
    resumed = EarlyStopping(monitor="val/acc", mode="max", patience=5)
    resumed.load_state_dict(saved)
    resumed._run_early_stopping_check(trainer(20, {}))  # the epoch's end again, no metric yet: the check made
    resumed._run_early_stopping_check(trainer(20, {"val/acc": torch.tensor(0.4)}))  # not counted twice
    assert resumed.wait_count == 1 and resumed.checked_at_step == 20
    resumed._run_early_stopping_check(trainer(30, {"val/acc": torch.tensor(0.4)}))
    assert resumed.wait_count == 2
    with pytest.raises(RuntimeError, match="not available"):  # a later step without the metric: Lightning's error
        resumed._run_early_stopping_check(trainer(40, {}))
