"""Before training, once the loaders exist: a step budget that ends an epoch-validated run before its first
validation (:func:`check_first_validation`), which Lightning's early stopping reported only once training ended, as
a traceback about a metric never logged; a step budget its epoch cap cuts short (:func:`warn_epoch_cap`, a warning,
and :func:`budget_cut` after training where the loader's length was not known before)."""

from __future__ import annotations

import pytorch_lightning as pl

from coda_exp.config_checks import ConfigError
from coda_exp.data.common.base import trained_per_epoch

EPOCH_CAP = "(task.epochs) ends training after"  # the warning before training: budget_cut does not say it again


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


def warn_epoch_cap(trainer: pl.Trainer, datamodule) -> None:
    """Before training: a step budget (``trainer.max_steps``) that the epoch cap (``trainer.max_epochs``, from
    ``task.epochs``) ends first, ``task.max_steps=600`` where 8 epochs of the data's batches make 200 steps: a warning
    (``datamodule.warn``: kept in the record's ``warnings``) naming the ``task.epochs`` that lets the steps count,
    where it used to be said only once training had stopped short. One process and a training loader of known
    length only (:func:`budget_cut` says it after training otherwise)."""
    steps, epochs = trainer.max_steps, trainer.max_epochs
    if trainer.world_size > 1 or steps is None or steps <= 0 or epochs is None or epochs < 0:
        return
    try:
        batches = len(datamodule.train_dataloader())
    except TypeError:  # an endless stream: no epochs to count
        return
    batches = trained_per_epoch(batches, trainer.limit_train_batches)
    per_epoch = -(-batches // max(1, int(trainer.accumulate_grad_batches or 1)))  # a step on an epoch's last batch
    if per_epoch and epochs * per_epoch < steps:
        datamodule.warn(f"trainer.max_epochs={epochs} {EPOCH_CAP} {epochs * per_epoch} steps ({per_epoch} an "
                        f"epoch), before trainer.max_steps={steps}: raise task.epochs to at least "
                        f"{-(-steps // per_epoch)} for the steps to count")


def budget_cut(trainer: pl.Trainer, datamodule) -> None:
    """After training: a step-bounded run that ended at its epoch cap first, where :func:`warn_epoch_cap` could not
    say so before (DDP, a loader of unknown length): a warning, kept in the record's ``warnings``."""
    steps, epochs = trainer.max_steps, trainer.max_epochs
    if any(EPOCH_CAP in w for w in datamodule.warnings):
        return
    if 0 < steps and trainer.global_step < steps and epochs not in (None, -1) and trainer.current_epoch >= epochs:
        datamodule.warn(f"training stopped at trainer.max_epochs={epochs} (task.epochs) after {trainer.global_step} "
                        f"steps, before trainer.max_steps={steps}: raise task.epochs too for the steps to count")


def warn_budget_overrides(cfg, datamodule) -> None:
    """Before training: a ``trainer`` budget given beside the task's and differing from it (``trainer.max_epochs=2
    task.epochs=5``: the Trainer trains 2 epochs and task.epochs is not read): a warning naming the one that counts,
    kept in the record's ``warnings``. The ``debug`` configs set the Trainer's budget on purpose: not said there."""
    from omegaconf import OmegaConf

    from coda_exp.environment import group_choice

    if group_choice("debug") is not None:
        return
    for trainer_key, task_key in (("max_epochs", "epochs"), ("max_steps", "max_steps")):
        if (trainer_key in cfg.trainer and task_key in cfg.task
                and not OmegaConf.is_interpolation(cfg.trainer, trainer_key)
                and cfg.task[task_key] is not None and cfg.trainer[trainer_key] != cfg.task[task_key]):
            datamodule.warn(f"trainer.{trainer_key}={cfg.trainer[trainer_key]} is the budget this run trains to, not "
                            f"task.{task_key}={cfg.task[task_key]} (trainer.{trainer_key} follows task.{task_key} "
                            f"unless given itself): give task.{task_key} alone")
