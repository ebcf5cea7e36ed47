"""Before training, once the loaders exist: a step budget that ends an epoch-validated run before its first
validation (:func:`check_first_validation`), which Lightning's early stopping reported only once training ended, as
a traceback about a metric never logged."""

from __future__ import annotations

import pytorch_lightning as pl

from coda_exp.config_checks import ConfigError


def check_first_validation(trainer: pl.Trainer, datamodule) -> None:
    """Before training: a step budget (``trainer.max_steps``) that ends an epoch-validated run before its first
    validation (``trainer.max_steps=2`` on a task that validates at the end of each epoch of 5 batches): early
    stopping would fail once training ends, on a metric never logged, with no best checkpoint chosen. One process
    and a training loader of known length only (Lightning's rules otherwise)."""
    steps, every = trainer.max_steps, trainer.check_val_every_n_epoch
    fraction, limit = trainer.val_check_interval, trainer.limit_train_batches
    if trainer.world_size > 1 or steps is None or steps < 0 or every is None or not isinstance(fraction, float):
        return
    try:
        batches = len(datamodule.train_dataloader())
    except TypeError:  # an endless stream: validation goes by batches (val_check_interval), checked before the data
        return
    batches = min(batches, int(limit)) if isinstance(limit, int) else int(batches * limit)
    first = (every - 1) * batches + max(1, int(batches * fraction))  # the batch the first validation follows
    accumulate = max(1, int(trainer.accumulate_grad_batches or 1))
    if batches and steps * accumulate < first:
        raise ConfigError(f"trainer.max_steps = {steps} ends the run before its first validation, after batch {first} "
                          f"(an epoch is {batches} batches{f', {accumulate} a step' if accumulate > 1 else ''}, "
                          f"validated every {every} epoch(s)): no best checkpoint, a metric early stopping never "
                          f"sees; give at least trainer.max_steps={-(-first // accumulate)}, or a budget in "
                          "task.epochs")
