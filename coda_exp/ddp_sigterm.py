"""Lightning's SIGTERM handling under DDP without its collective inside the signal handler (:class:`DistributedSigterm`;
``coda_exp.stops`` stops a run on a signal and re-exports it)."""

from __future__ import annotations

import signal
import threading

import pytorch_lightning as pl


class DistributedSigterm(pl.Callback):
    """Under DDP, Lightning's SIGTERM handling without its broadcast. Lightning's handler broadcasts from inside the
    signal handler, at whatever point each rank was: a rank signalled twice (a cluster signals every process, and
    rank 0 forwards its own to the processes it launched) made one collective more than rank 0 and the run hung
    for good; a rank signalled during another collective breaks its pairing too. This handler forwards the signal
    to the launched processes once, calls the other handlers Lightning composed with its own, and only notes the
    signal. The ranks act on it together at fixed points, so no rank stops alone:

    - at each training batch's end it becomes ``trainer.received_sigterm`` on the ranks that got it, just before
      :class:`GracefulStop`'s vote, which stops every rank there with a checkpoint;
    - at each validation or test batch's end the ranks vote on it (one scalar all-reduce), and every rank gets
      ``trainer.received_sigterm``, so Lightning's own check stops them all after the same batch. Setting the flag
      in the handler stopped a validation on the signalled rank alone, and the others failed at their next
      collective.

    Installed as each stage starts (Lightning registers its handler anew for each ``fit`` and ``test``; its
    teardown puts back the handler from before the run). One process: nothing to do, Lightning makes no collective
    then. Every rank has the same number of evaluation batches (each sampler and stream evens its shards out)."""

    def __init__(self) -> None:
        self._trainer: pl.Trainer | None = None
        self._lightning = None
        self.received = False  # a SIGTERM reached this process; the ranks act on it at the next batch's end

    def _install(self, trainer: pl.Trainer) -> None:
        if (trainer.world_size == 1 or not hasattr(trainer, "_signal_connector")
                or threading.current_thread() is not threading.main_thread()
                or signal.getsignal(signal.SIGTERM) == self._on_sigterm):
            return
        self._trainer = trainer
        self._lightning = signal.signal(signal.SIGTERM, self._on_sigterm)

    def on_sanity_check_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._install(trainer)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._install(trainer)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._install(trainer)

    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._install(trainer)

    def _on_sigterm(self, signum, frame) -> None:
        trainer = self._trainer
        if not self.received:
            launcher = trainer.strategy.launcher
            if launcher is not None:
                launcher.kill(signum)
        self.received = True
        notifier = getattr(type(trainer._signal_connector), "_sigterm_notifier_fn", None)
        for handler in getattr(self._lightning, "signal_handlers", []):  # Lightning's _HandlersCompose
            if callable(handler) and getattr(handler, "__func__", None) is not notifier:
                handler(signum, frame)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        if self.received and self._trainer is not None:  # GracefulStop's vote, next, stops every rank
            trainer._signal_connector.received_sigterm = True

    def _vote(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._trainer is None:
            return
        import torch

        if int(trainer.strategy.reduce(torch.tensor(int(self.received), device=pl_module.device), reduce_op="max")):
            trainer._signal_connector.received_sigterm = True  # Lightning stops every rank after this batch

    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        self._vote(trainer, pl_module)

    def on_test_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch,
                          batch_idx: int, dataloader_idx: int = 0) -> None:
        self._vote(trainer, pl_module)
