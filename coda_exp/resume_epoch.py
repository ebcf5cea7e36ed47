"""A step-budgeted run resumed from a checkpoint written at a validated epoch's end counts that epoch once, as the
uninterrupted run did (:class:`EpochEndResume`).

pytorch-lightning 2.6 writes the checkpoints of an epoch's end (``ModelCheckpoint`` at ``on_train_epoch_end``, with
a validation every epoch: ``val_check_interval=1.0``) between the fit loop's ``processed`` and ``completed`` counts
of that epoch: its ``epoch_progress`` says ``processed = completed + 1``. Resumed from it, an epoch-bounded run
takes the epoch as ended (``completed`` raised to ``processed``). A step-budgeted run (``trainer.max_steps`` set:
SST, IMDb, every ``task.max_steps``) is always "restarting" in Lightning's eyes and, where that epoch's validation
ran, runs the epoch's end again without a batch (the end of its last batch, its validation skipped, then its
``on_train_epoch_end`` hooks), which counts twice what that end had counted before the checkpoint: the epoch
``processed``, from then on one ahead of ``completed`` (``trainer.current_epoch``), and its last batch's step for
the loggers (``_batches_that_stepped``), from then on one ahead of the global step. Lightning sets the training
samplers' epoch from ``processed`` (``set_epoch`` before each epoch), and the samplers draw each epoch's order from
``(seed, epoch)`` (``data/common/batching.py``), so every later epoch of the resumed run trained on the next epoch's
order (the weights, the curve and the test differed from the uninterrupted run's); a ``task.epochs`` cap beside the
step budget (``processed`` is what Lightning compares with ``max_epochs``) ended it an epoch early; every later
metric was logged one step late. SST at the fixture scale, whose epochs are one batch, each validated, met it at
every checkpoint. (Without a validation there, Lightning trains the next batch in that restart instead, and the
counts come out right; a mid-epoch checkpoint is restored right too.)

Its own module: ``callbacks.py`` holds the configs' callbacks; the pipeline adds this one to every resumed run.
"""

from __future__ import annotations

import pytorch_lightning as pl


class EpochEndResume(pl.Callback):
    """A resumed run whose first epoch end comes before any batch (Lightning's run again of the end of the epoch its
    checkpoint was written at, described above) with that epoch counted processed twice: the second count taken back,
    and the loggers' step the run of that end added, before any other epoch-end hook reads them (the
    ModelCheckpoints, which may write that step's checkpoints again, come after this callback). The fit loop's epoch
    counts, the training samplers' next epoch (their data order), the ``max_epochs`` test and the loggers' steps are
    then the uninterrupted run's, and so is the resumed run, bit for bit."""

    def __init__(self) -> None:
        self._trained = False  # a training batch ended in this process (after it, no epoch end is run again)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._trained = False

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        self._trained = True

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._trained:
            return
        self._trained = True  # once: the epoch end run again, at the resume
        counted_twice(trainer)


def counted_twice(trainer: pl.Trainer) -> bool:
    """In an epoch's end hooks: where the fit loop counts the epoch processed twice (``processed = completed + 2``
    in its epoch progress, ``current`` and ``total``), the second count and the loggers' step of the same run of
    the epoch's end taken back. Whether it did so."""
    loop = getattr(trainer, "fit_loop", None)
    progress = getattr(loop, "epoch_progress", None)
    counts = [getattr(progress, key, None) for key in ("current", "total")]
    if any(c is None or c.processed != c.completed + 2 for c in counts):
        return False
    for c in counts:
        c.processed -= 1
    epoch_loop = loop.epoch_loop
    if getattr(epoch_loop, "_batches_that_stepped", 0) > 0:
        epoch_loop._batches_that_stepped -= 1
    return True


def epochs_run(trainer: pl.Trainer) -> int:
    """The epochs a run trained, for its record: ``trainer.current_epoch`` (the fit loop's completed count), or the
    processed count where that is one more: a run resumed from a checkpoint written in its last epoch's end hooks
    (``processed = completed + 1``) that its step budget ended at once, before Lightning completed the epoch (a run
    killed after its final checkpoint, before its record, was recorded an epoch short)."""
    progress = getattr(getattr(trainer, "fit_loop", None), "epoch_progress", None)
    processed = getattr(getattr(progress, "current", None), "processed", None)
    return max(int(trainer.current_epoch), int(processed or 0))
