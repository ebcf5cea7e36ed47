"""Shared LightningModule plumbing: optimiser/scheduler factories, gradient clipping, logging, test predictions."""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Callable

import pytorch_lightning as pl
import torch
from torch import nn

from coda_exp.fast_step import FastOptions, FastStep, with_fused
from coda_exp.metrics import IndexedMean

log = logging.getLogger(__name__)

CHECKPOINT_CONFIG = "coda_exp.run_config"  # the checkpoint key of the run's resolved config
CHECKPOINT_DATA = "coda_exp.data_state"  # its tokenizers (the data module's encoder_state)
CHECKPOINT_RUN = "coda_exp.run"  # which run wrote it: run id, overrides, fingerprint, scale, vectors


class TaskModule(pl.LightningModule):
    """A task family owns loss, decoding and metrics; the network (``model``) is any nn.Module.

    ``optimizer`` is a factory ``params -> Optimizer`` (e.g. ``functools.partial(torch.optim.Adam, lr=3e-4)``);
    ``scheduler`` optionally ``optimizer -> LRScheduler`` (stepped every ``scheduler_interval``).
    Gradient clipping is the trainer's (``task.gradient_clip_val`` -> ``trainer.gradient_clip_val``, by global L2
    norm). Each family defines :meth:`forward` (its batch keys -> the network's output).
    After ``trainer.test``, ``test_predictions`` holds one dict per test example (index, label, prediction...).
    """

    #: the ``task.family`` a subclass serves: a task YAML whose ``family`` is another is refused before any data
    #: loads (:mod:`coda_exp.node_keys`); None (a class that does not say): not checked
    FAMILY: str | None = None

    def __init__(self, model: nn.Module, optimizer: Callable, scheduler: Callable | None = None,
                 scheduler_interval: str = "step", fast: dict | FastOptions | None = None):
        super().__init__()
        self.model = model
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.scheduler_interval = scheduler_interval
        self.test_predictions: list[dict] = []
        self._test_buffer: list[dict[str, torch.Tensor]] = []
        self.diverged_at: int | None = None  # the step whose training loss was not finite (training stopped there)
        self.run_config: dict | None = None  # the run's resolved config (the pipeline sets it): saved in checkpoints
        self.checkpoint_extras: dict = {}  # more of what a checkpoint carries (CHECKPOINT_DATA, CHECKPOINT_RUN)
        options = FastOptions.from_config(fast)
        # the fast path steps the optimizer itself (Lightning's manual optimization), through FastStep
        self.fast_step = FastStep(self, options) if options is not None else None
        self.automatic_optimization = self.fast_step is None
        self.means = nn.ModuleDict()  # the example-weighted means of evaluation (add_means, log_mean)

    @classmethod
    def validation_metrics(cls, options: dict) -> set[str] | None:
        """The names this family may log under ``val/`` (``val/<name>``: what ``task.monitor`` can watch) with the
        constructor options ``options`` (the config's ``task.module``), those the data decides included; None when a
        family does not say (its monitor is then only checked to be a ``val/`` metric)."""
        return None

    @abstractmethod
    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The network's output for a batch of this family (which keys it reads is the family's business)."""

    @abstractmethod
    def train_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | int]:
        """(the training loss of ``batch``, its weight in the logged mean: tokens or examples)."""

    def training_step(self, batch, batch_idx):
        if self.fast_step is not None:
            self.fast_step.step(batch)
            return None
        loss, weight = self.train_loss(batch)
        if not bool(torch.isfinite(loss)):  # never step on it: stop here, the run is recorded as diverged
            self.diverge(self.trainer.global_step + 1)
            return None
        self.log_loss("train", loss, int(weight))
        return loss

    def diverge(self, step: int) -> None:
        """The training loss of optimizer step ``step`` is not finite: stop training (the pipeline then records
        the run as diverged instead of testing it)."""
        if self.diverged_at is None:
            self.diverged_at = int(step)
            log.error("training diverged at step %d: the training loss is not finite; training stops (the run is "
                      "recorded with status 'diverged', listed by the tables, never pooled)", step)
        self.trainer.should_stop = True

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """A checkpoint knows what it is: the run's resolved config rides along (``coda_exp.run_config``), so a
        ``.ckpt`` alone rebuilds its model and data settings (``offline.load_trained``), with the tokenizers
        (``coda_exp.data_state``: ``coda-exp eval`` / ``predict`` read new text with them) and which run wrote it
        (``coda_exp.run``: an evaluation's record takes the run's fingerprint and scale from it)."""
        if self.run_config is not None:
            checkpoint[CHECKPOINT_CONFIG] = self.run_config
        checkpoint.update(self.checkpoint_extras)

    @abstractmethod
    def predict_step(self, batch, batch_idx, dataloader_idx: int = 0) -> list[dict]:
        """One dict per example of ``batch`` (``index`` and the family's prediction): ``coda-exp predict``."""

    def request_eager_step(self) -> None:
        """The next training step must run its real forward (a callback's hooks will read it): the fast path
        replays no graph for it. A no-op on the plain path."""
        if self.fast_step is not None:
            self.fast_step.request_eager()

    def step_schedulers(self, interval: str) -> None:
        """Manual optimization (the fast path) steps its schedulers itself: those of ``interval`` ("step", "epoch")."""
        schedulers = self.lr_schedulers() if interval == self.scheduler_interval else None
        for scheduler in schedulers if isinstance(schedulers, list) else [schedulers] if schedulers else []:
            scheduler.step()

    def on_train_epoch_end(self) -> None:
        if self.fast_step is not None:
            self.step_schedulers("epoch")

    def configure_optimizers(self):
        params = [p for p in self.parameters() if p.requires_grad]
        if self.fast_step is not None and self.fast_step.options.fused_optimizer:
            opt = with_fused(self.optimizer_factory, params)
        else:
            opt = self.optimizer_factory(params)
        if self.scheduler_factory is None:
            return opt
        return {"optimizer": opt,
                "lr_scheduler": {"scheduler": self.scheduler_factory(opt), "interval": self.scheduler_interval}}

    def log_loss(self, stage: str, loss: torch.Tensor, batch_size: int) -> None:
        """The training loss of a batch (this process's: evaluation logs its means with :meth:`log_mean`)."""
        self.log(f"{stage}/loss", loss, prog_bar=stage == "train", on_step=stage == "train", on_epoch=True,
                 batch_size=batch_size, sync_dist=stage != "train")

    def add_means(self, *names: str) -> None:
        """Example-weighted means an evaluation logs under ``names`` (``val/loss``, ``test/nll``...), made in
        ``__init__``: Lightning finds a logged metric among the module's attributes."""
        for name in names:
            self.means[_mean_key(name)] = IndexedMean()

    def log_mean(self, name: str, total: torch.Tensor, weight: torch.Tensor | float, index: torch.Tensor) -> None:
        """Log under ``name`` (one of :meth:`add_means`) the epoch's mean of the batch's examples: ``total`` per
        example (its mean times its ``weight``: tokens, 1), by example ``index``. Every process's examples weigh
        by their weight and each example counts once (:class:`~coda_exp.metrics.IndexedMean`): a per-batch mean
        with ``sync_dist=True`` changed with the number of processes."""
        metric = self.means[_mean_key(name)]
        metric.update(total, weight, index)
        self.log(name, metric, on_step=False, on_epoch=True, add_dataloader_idx=False)

    def prepare_final_evaluation(self) -> None:
        """Called by the pipeline after training, before the final validation and test of the chosen checkpoint.

        A no-op here; a task whose cheap in-training evaluation differs from its test protocol (sequence tasks:
        greedy model selection, beam test) switches to the test protocol.
        """

    # test predictions: kept so tests/metrics can be recomputed without retraining
    def on_test_epoch_start(self) -> None:
        self._test_buffer = []

    def buffer_predictions(self, **tensors: torch.Tensor) -> None:
        self._test_buffer.append({k: v.detach().cpu() for k, v in tensors.items()})

    def on_test_epoch_end(self) -> None:
        rows: list[dict] = []
        if self._test_buffer:
            cols = {k: torch.cat([b[k] for b in self._test_buffer]).tolist() for k in self._test_buffer[0]}
            rows = [dict(zip(cols, vals)) for vals in zip(*cols.values())]
        self.test_predictions = self.gather_rows(rows, key=lambda r: (r.get("test_set", 0), r["index"]))
        self._test_buffer = []

    def gather_rows(self, rows: list, key: Callable) -> list:
        """Every process's ``rows`` on every process (under DDP each one evaluated a shard), each ``key`` once
        (the distributed sampler pads the shards with repeats), sorted by ``key``. A single process: ``rows``."""
        trainer = self._trainer
        world = trainer.world_size if trainer is not None else 1
        if world <= 1 or not torch.distributed.is_available() or not torch.distributed.is_initialized():
            return rows
        parts: list = [None] * world
        torch.distributed.all_gather_object(parts, rows)
        unique = {}
        for row in (r for part in parts for r in part):
            unique.setdefault(key(row), row)
        return [unique[k] for k in sorted(unique)]


def _mean_key(name: str) -> str:
    """A logged name (``val/loss``) as a module name (no dots)."""
    return name.replace("/", "__").replace(".", "_")
