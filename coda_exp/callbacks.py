"""Lightning callbacks the configs use (``configs/callbacks/default.yaml``)."""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl


class LastCheckpoint(pl.callbacks.ModelCheckpoint):
    """``<dirpath>/last.ckpt``, rewritten at every checkpointing point (each validation, or each epoch end): where a
    killed run resumes (``ckpt_path=.../last.ckpt``).

    ModelCheckpoint's own ``save_last`` is not enough: pytorch-lightning 2.6 writes ``last.ckpt`` only at steps
    where a top-k (best) checkpoint is also saved, so after the monitored metric stops improving ``last.ckpt``
    stays at the best step and a resumed run would repeat the epochs since.
    """

    def __init__(self, dirpath: str | Path, filename: str = "last"):
        super().__init__(dirpath=dirpath, filename=filename, monitor=None, save_top_k=1, save_last=False,
                         enable_version_counter=False, auto_insert_metric_name=False)


class KeepBestAcrossFolders(pl.Callback):
    """A run trained on from a checkpoint of another folder (a finished run's, which it leaves as it is): each
    monitored ModelCheckpoint keeps the best-model state that checkpoint carries (its best score and the files of
    its best checkpoints), where Lightning drops all but ``best_model_path`` when the folder changed ("dirpath has
    changed") and the new run's first validation would be its best whatever its score: the best checkpoint is
    chosen over the whole run, as for a run resumed in its own folder. Lightning never deletes a checkpoint outside
    the callback's folder, so the other run's files stay; the state is kept only where each of them still exists.

    Lightning calls every callback's ``on_load_checkpoint`` before any callback's ``load_state_dict``, so this one
    sets the ModelCheckpoints' states in the loaded checkpoint to their own folder before they read them: any
    ModelCheckpoint (the configs' by ``_target_``, the periodic one, a user's ``+callbacks.x``) is kept, and its
    class, hence the key its state is saved under, stays Lightning's. It saves nothing."""

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        states = checkpoint.get("callbacks") or {}
        for callback in trainer.checkpoint_callbacks:
            if not isinstance(callback, pl.callbacks.ModelCheckpoint) or callback.monitor is None:
                continue
            key = callback.state_key if callback.state_key in states else type(callback)  # (Lightning < 1.5's key)
            state = states.get(key)
            if not state:
                continue
            files = [*(state.get("best_k_models") or {}), state.get("best_model_path")]
            there = state.get("dirpath")
            if there and there != callback.dirpath and all(f and Path(f).is_file() for f in files):
                states[key] = {**state, "dirpath": callback.dirpath, "last_model_path": ""}


class EarlyStopping(pl.callbacks.EarlyStopping):
    """EarlyStopping whose ``patience`` is the configured one even after resuming from a checkpoint (Lightning
    restores the patience saved in the checkpoint, so ``task.epochs`` raised on resume would still stop at the old
    budget). The wait count and best score are restored as usual.

    One check per optimizer step: a run resumed from a checkpoint written at an epoch's end (checkpoints saved at
    train-epoch ends, as with a validation every epoch) runs that epoch's end hooks again, and Lightning's check
    there raised "conditioned on metric val/acc which is not available" (no validation since the resume: the run
    could never go on) or, with the metric there, counted the same validation twice. The step of the last check
    rides in the checkpoint; a second check at that step is the one already made.

    The last validation's value of the monitored metric rides in the checkpoint too (``last_value``): a step budget
    that ends an epoch before its validation checks at that epoch's end on the last validation's value, still among
    Lightning's metrics; a run resumed after that validation had none there (the same RuntimeError) and now checks
    the value the uninterrupted run checked, which stays among the metrics, as it did there. A checkpoint saved
    after this callback stopped the run (the last validation's, before the test) stops a run resumed from it at
    once, as the uninterrupted run had stopped there (Lightning restores no ``should_stop``)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.checked_at_step: int | None = None
        self.last_value = None  # the monitored metric at the last validation (a CPU tensor)
        self.stopped_before = False  # the checkpoint resumed from was saved after this callback stopped the run

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.stopped_before:  # Lightning keeps no should_stop in a checkpoint: a run killed after an early stop
            trainer.should_stop = True  # (its test, say) trained on when resumed, past the uninterrupted run's end

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        value = trainer.callback_metrics.get(self.monitor)
        if value is not None and not trainer.sanity_checking:
            self.last_value = value.detach().cpu().clone()
        super().on_validation_end(trainer, pl_module)

    def _run_early_stopping_check(self, trainer: pl.Trainer) -> None:
        if self.checked_at_step is not None and trainer.global_step == self.checked_at_step:
            return
        self.checked_at_step = int(trainer.global_step)
        if self.monitor not in trainer.callback_metrics and self.last_value is not None:  # resumed, not validated
            trainer.callback_metrics[self.monitor] = self.last_value.clone()
        super()._run_early_stopping_check(trainer)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "checked_at_step": self.checked_at_step, "last_value": self.last_value}

    def load_state_dict(self, state_dict: dict) -> None:
        patience = self.patience
        super().load_state_dict(state_dict)
        self.patience = patience
        self.checked_at_step = state_dict.get("checked_at_step")
        self.last_value = state_dict.get("last_value")
        # stopped there, unless by a patience the resumed run raised (task.epochs raised on resume trains on)
        reason = self.stopping_reason.name
        self.stopped_before = reason != "NOT_STOPPED" and not (reason == "PATIENCE_EXHAUSTED"
                                                               and self.wait_count < self.patience)


class ElapsedTime(pl.Callback):
    """The run's time so far rides in every checkpoint (``elapsed_s``: the earlier processes' time, each up to the
    checkpoint the next one resumed from, plus this process's since ``start``), so a resumed run's record counts
    the whole run's time (``wall_time_s``), not the last process's alone. ``earlier``: the time restored."""

    def __init__(self, start: float) -> None:
        self.start, self.earlier = float(start), 0.0

    def state_dict(self) -> dict:
        import time

        return {"elapsed_s": self.earlier + time.time() - self.start}

    def load_state_dict(self, state_dict: dict) -> None:
        self.earlier = float(state_dict.get("elapsed_s") or 0.0)

    def so_far(self) -> float:
        """The run's time until now, the earlier processes' included."""
        return self.state_dict()["elapsed_s"]


class RandomState(pl.Callback):
    """Saves the global random states (Python, NumPy, torch CPU and CUDA) in every checkpoint and restores them when
    training resumes, so that dropout after a resume draws what the uninterrupted run drew (Lightning restores the
    weights, optimiser and loops, not the generators; ``seed_everything`` would restart them from the seed)."""

    def __init__(self) -> None:
        self._restored: dict | None = None

    def state_dict(self) -> dict:
        import random

        import numpy as np
        import torch

        kind, keys, pos, has_gauss, gauss = np.random.get_state()  # plain values: checkpoints load weights_only
        numpy_state = [kind, keys.tolist(), int(pos), int(has_gauss), float(gauss)]
        state = {"python": random.getstate(), "numpy": numpy_state, "torch": torch.get_rng_state()}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        self._restored = dict(state_dict)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Applied here, the last point before the first resumed step (after the sanity check and data setup)."""
        import random

        import numpy as np
        import torch

        state, self._restored = self._restored, None
        if not state:
            return
        random.setstate(state["python"])
        kind, keys, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
        torch.set_rng_state(state["torch"])
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])


class ValidationHistory(pl.Callback):
    """The monitored metric after every validation of the fit (not the sanity check), in order, and the global step
    (optimizer steps done) of each: the run record's ``val_curve`` and ``val_curve_steps``. Kept in checkpoints, so
    a resumed run reports the whole curve; a checkpoint written before the steps were kept restores its values with
    step None (unknown), and the validations after the resume have their steps."""

    def __init__(self, monitor: str) -> None:
        self.monitor = monitor
        self.values: list[float] = []
        self.steps: list[int | None] = []

    @property
    def state_key(self) -> str:
        return self._generate_state_key(monitor=self.monitor)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        value = trainer.callback_metrics.get(self.monitor)
        if trainer.sanity_checking or value is None or trainer.state.fn != "fit":
            return
        self.values.append(float(value))
        self.steps.append(int(trainer.global_step))

    def state_dict(self) -> dict:
        return {"values": list(self.values), "steps": list(self.steps)}

    def load_state_dict(self, state_dict: dict) -> None:
        self.values = [float(v) for v in state_dict.get("values", [])]
        steps = [None if s is None else int(s) for s in state_dict.get("steps", [])][:len(self.values)]
        self.steps = steps + [None] * (len(self.values) - len(steps))  # an older checkpoint: steps unknown


class GateStats(pl.Callback):
    """CoDA's gate g * f_N(N) (eq. 5) during training, per CoDA attention layer: every ``every_n_steps`` optimizer
    steps, the mean of the gate over the valid pairs and the fraction of valid pairs whose gate is below 0.01
    (a closed gate: the pair is de-attended whatever E says), on the first ``max_examples`` examples of the batch.

    Off by default; ``callbacks=gate_stats`` switches it on (``configs/callbacks/gate_stats.yaml``: the default
    callbacks plus this one). Layers are the ``CoDAScoring`` modules of the network (``pl_module.model``), named by
    the module path of their attention (``encoder.layers.0.self_attn``, ``decoder_layers.1.cross_attn``), and its
    ``CoDACrossAttention`` modules (the pairwise models' ``model/attention=coda``: DecompAtt, DecaProp, AttConv),
    named by their own path (``attend``), whose gate is of F_N(a), F_N(b) (their projections, dropout off).

    How: for the batch that completes a multiple of ``every_n_steps`` (steps ``every_n_steps``, ``2 *
    every_n_steps``...), forward pre-hooks on each scoring capture the per-head q, k and the pair mask of the training
    forward (so the gate is the one of the weights before that batch's update); at the batch's end the gate is
    recomputed from them with ``coda_components`` and the scoring's own options, without gradient. The hooks exist
    only during those batches: other steps run untouched. Nothing draws random numbers: the training is the same
    with the callback on or off.

    Logged as ``gate/<layer>/mean`` and ``gate/<layer>/frac_lt_0.01`` to every logger of the trainer (CSV, W&B,
    TensorBoard) at the logger step of the measured batch's own training loss (Lightning's, one less than the step
    count it completes), through ``logger.log_metrics``: ``pl_module.log`` would re-send the last value at every
    later logging step of the epoch (Lightning keeps on-step values until the epoch ends), reporting gates at
    steps where none was measured. Kept in :attr:`series` (``{layer: {"steps": [...], "mean": [...],
    "frac_lt_0.01": [...]}}``, the run record's ``gate_stats``; steps count the optimizer steps done after the
    measured batch) and in checkpoints, so a resumed run reports the whole series. A model without a CoDA layer:
    one warning, nothing measured. Under gradient accumulation a step is measured once (its first micro-batch).
    """

    THRESHOLD = 0.01
    FRACTION = "frac_lt_0.01"

    def __init__(self, every_n_steps: int = 100, max_examples: int = 8) -> None:
        for name, value in (("every_n_steps", every_n_steps), ("max_examples", max_examples)):
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise ValueError(f"GateStats: {name} must be an int >= 1, got {value!r}")
        self.every_n_steps = every_n_steps
        self.max_examples = max_examples
        self.series: dict[str, dict[str, list]] = {}
        self._layers: dict[str, object] | None = None  # layer name -> CoDAScoring, found at the fit's start
        self._handles: list = []
        self._captured: dict[str, list[tuple]] = {}
        self._armed_step: int | None = None

    # ------------------------------------------------------------------ layers and hooks
    @staticmethod
    def coda_layers(module) -> dict:
        """``{attention path: CoDAScoring or CoDACrossAttention}`` of ``module``'s network (``module.model`` for a
        task module)."""
        from coda_exp.attention import CoDACrossAttention, CoDAScoring

        net = getattr(module, "model", module)
        return {(name.removesuffix(".scoring") or "scoring") if isinstance(sub, CoDAScoring) else name or "attention":
                sub for name, sub in net.named_modules() if isinstance(sub, (CoDAScoring, CoDACrossAttention))}

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        from pytorch_lightning.utilities import rank_zero_warn

        self._layers = self.coda_layers(pl_module)
        if not self._layers:
            rank_zero_warn(f"GateStats: {type(getattr(pl_module, 'model', pl_module)).__name__} has no CoDA attention "
                           "layer (CoDAScoring, CoDACrossAttention): no gate statistics are measured")

    def _capture(self, name: str, layer):
        from coda_exp.attention import CoDACrossAttention

        def hook(module, args, kwargs):
            if isinstance(layer, CoDACrossAttention):
                return self._capture_cross(name, layer, args, kwargs)
            q = args[0] if len(args) > 0 else kwargs["q"]
            k = args[1] if len(args) > 1 else kwargs["k"]
            mask = args[3] if len(args) > 3 else kwargs.get("mask")
            tensors = (q, k, mask, kwargs.get("query_mask"))
            call = (*(self._first(t, self.max_examples) for t in tensors), bool(kwargs.get("causal", False)))
            self._captured.setdefault(name, []).append(call)
        return hook

    def _capture_cross(self, name: str, layer, args, kwargs) -> None:
        """A ``CoDACrossAttention``'s call ``(a, b, mask_a, mask_b)``: F_N of the first examples of a and b, computed
        here from the weights before the batch's update, with the projection's dropout off (no random numbers drawn),
        as ``(n_a, n_b, key mask (B, 1, lb), query mask (B, la, 1), False)``."""
        import torch

        given = [args[i] if len(args) > i else kwargs.get(key) for i, key in enumerate(("a", "b", "mask_a", "mask_b"))]
        a, b, mask_a, mask_b = (self._first(t, self.max_examples) for t in given)
        modes = [(m, m.training) for m in layer.proj_n.modules()]
        try:
            layer.proj_n.eval()
            with torch.no_grad():
                n_a, n_b = layer.proj_n(a), layer.proj_n(b)
        finally:
            for m, training in modes:
                m.training = training
        call = (n_a, n_b, None if mask_b is None else mask_b.to(torch.bool)[:, None, :],
                None if mask_a is None else mask_a.to(torch.bool)[:, :, None], False)
        self._captured.setdefault(name, []).append(call)

    @staticmethod
    def _first(tensor, n: int):
        """The first ``n`` examples of a (B, ...) tensor, detached (a mask broadcast over the batch, (1, ...), whole)."""
        return None if tensor is None else tensor[:n].detach()

    def _remove_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch, batch_idx: int) -> None:
        step = trainer.global_step + 1  # the step this batch completes
        if not self._layers or step % self.every_n_steps or step == self._armed_step:
            return
        self._armed_step, self._captured = step, {}
        getattr(pl_module, "request_eager_step", lambda: None)()  # the fast path: a real forward, not a replay
        self._handles = [layer.register_forward_pre_hook(self._capture(name, layer), with_kwargs=True)
                         for name, layer in self._layers.items()]

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        if not self._handles:
            return
        self._remove_hooks()
        captured, self._captured = self._captured, {}
        step = self._armed_step
        logged = {}
        for name, calls in captured.items():
            mean, frac = self.measure(self._layers[name].options, calls)
            if mean is None:  # no valid pair
                continue
            entry = self.series.setdefault(name, {"steps": [], "mean": [], self.FRACTION: []})
            entry["steps"].append(int(step))
            entry["mean"].append(mean)
            entry[self.FRACTION].append(frac)
            logged[f"gate/{name}/mean"], logged[f"gate/{name}/{self.FRACTION}"] = mean, frac
        if logged:
            for logger in trainer.loggers:
                logger.log_metrics(logged, step=max(trainer.global_step - 1, 0))

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._remove_hooks()

    @classmethod
    def measure(cls, options, calls: list[tuple]) -> tuple[float | None, float | None]:
        """(mean gate, fraction of gates < 0.01) over the valid pairs of every captured call ``(q, k, mask,
        query_mask, causal)`` of one layer (per-head q (B, H, Lq, dk), k (B, H, Lk, dk), the bool masks the scoring got),
        recomputed with ``coda_components`` and the layer's ``options``; (None, None) without any valid pair."""
        import torch

        from coda_exp.attention import coda_components, valid_pairs

        total, closed, count = 0.0, 0, 0
        with torch.no_grad():
            for q, k, mask, query_mask, *causal in calls:
                valid = valid_pairs(mask, None if query_mask is None else query_mask[..., 0], bool(causal and causal[0]),
                                    q.shape[-2], k.shape[-2], q.device)
                maps = coda_components(q.float(), k.float(), q.float(), k.float(), options, mask=valid)
                gate = maps.gate[maps.valid()]
                total += float(gate.sum())
                closed += int((gate < cls.THRESHOLD).sum())
                count += gate.numel()
        return (None, None) if count == 0 else (total / count, closed / count)

    # ------------------------------------------------------------------ checkpoint state
    def state_dict(self) -> dict:
        return {"series": {name: {key: list(values) for key, values in entry.items()}
                           for name, entry in self.series.items()}}

    def load_state_dict(self, state_dict: dict) -> None:
        self.series = {str(name): {str(key): list(values) for key, values in entry.items()}
                       for name, entry in state_dict.get("series", {}).items()}
