"""Lightning's rich progress bar and model summary, legible (``configs/callbacks/default.yaml``, ``pipeline``).

- :class:`ProgressBar`: a step-bounded run (``task.max_steps``, the Transformer tasks) shows one bar of optimizer
  steps out of ``max_steps`` (``Steps 20/20``), not the batches of an epoch it never finishes (``Epoch 1/8 20/25``);
  an epoch-bounded one counts its epochs from 1 (``Epoch 8/8``), as the validation lines do; the metrics leave out
  ``v_num`` (the logger's version, 0 in every run folder) unless ``verbose``.
- :class:`ModelSummary`: the rich model summary without the ``FLOPs`` column and ``Total FLOPs`` line when Lightning
  measured none (it counts FLOPs only for a model with an ``example_input_array``: none here), and without the
  count of modules in train / eval mode. ``verbose=true`` keeps Lightning's own (``coda_exp.pipeline``).
- :class:`ValidationReport`: one line per validation of the fit (the step, the monitored metric with the best so far,
  the other ``val/*`` metrics, the time elapsed) logged to the run's ``train.log`` always, and to the console where
  no live progress bar shows them (not a terminal, or ``trainer.enable_progress_bar=false``): a redirected,
  ``nohup`` or cluster run can be followed (``tail -f``), and a finished one's log says how it went.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import RichModelSummary, RichProgressBar

from coda_exp.console import file_only, on_terminal, to_console

STEPS = "Steps"
log = logging.getLogger(__name__)


def step_bounded(trainer: pl.Trainer) -> bool:
    """Whether ``trainer.max_steps`` ends the fit before (or when) ``max_epochs`` would (one epoch =
    ``num_training_batches`` / ``accumulate_grad_batches`` optimizer steps)."""
    max_steps = trainer.max_steps
    if max_steps is None or max_steps < 0:
        return False
    if trainer.max_epochs is None or trainer.max_epochs < 0:
        return True
    batches = trainer.num_training_batches
    if batches == float("inf"):
        return True
    per_epoch = -(-int(batches) // max(int(trainer.accumulate_grad_batches), 1))
    return trainer.max_epochs * per_epoch >= max_steps


class ProgressBar(RichProgressBar):
    """:class:`~pytorch_lightning.callbacks.RichProgressBar`, with the steps of a step-bounded run and no ``v_num``
    unless ``verbose`` (module docstring). Other arguments are RichProgressBar's."""

    def __init__(self, verbose: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.verbose = verbose
        self._steps = False  # this fit shows steps (decided at its first training epoch)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        self._steps = False

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not (self._steps or step_bounded(trainer)):
            super().on_train_epoch_start(trainer, pl_module)
            return
        self._steps = True
        if self.is_disabled or self.progress is None:
            return
        if self.train_progress_bar_id is None:  # one bar for the whole fit, its steps out of max_steps
            self._initialize_train_progress_bar_id()
        self.refresh()

    def _initialize_train_progress_bar_id(self) -> None:
        if not self._steps:
            super()._initialize_train_progress_bar_id()
            return
        description = f"{STEPS:{len(self.validation_description)}}"
        self.train_progress_bar_id = self._add_task(self.trainer.max_steps, description)
        self._update(self.train_progress_bar_id, self.trainer.global_step)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch: Any,
                           batch_idx: int) -> None:
        if not self._steps and self.train_progress_bar_id is None and step_bounded(trainer):
            self._steps = True  # resumed mid-epoch: Lightning calls no on_train_epoch_start before this batch
        if not self._steps:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            return
        if not self.is_disabled and self.train_progress_bar_id is None:  # resumed mid-epoch
            self._initialize_train_progress_bar_id()
        self._update(self.train_progress_bar_id, trainer.global_step)  # where Lightning puts the batch index
        self._update_metrics(trainer, pl_module)
        self.refresh()

    def _get_train_description(self, current_epoch: int) -> str:
        """``Epoch 3/8`` counted from 1, as the validation lines say it (Lightning's bar said ``Epoch 2/7``)."""
        total = f"/{self.trainer.max_epochs}" if self.trainer.max_epochs is not None else ""
        return f"{f'Epoch {current_epoch + 1}{total}':{len(self.validation_description)}}"

    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict:
        items = super().get_metrics(trainer, pl_module)
        if not self.verbose:
            items.pop("v_num", None)
        return items


class ModelSummary(RichModelSummary):
    """The rich model summary without what Lightning did not measure (module docstring)."""

    @staticmethod
    def summarize(summary_data: list[tuple[str, list[str]]], total_parameters: int, trainable_parameters: int,
                  model_size: float, total_training_modes: dict[str, int], total_flops: int,
                  **summarize_kwargs: Any) -> None:
        from pytorch_lightning.utilities.model_summary.model_summary import (
            get_formatted_model_size,
            get_human_readable_count,
        )
        from rich import get_console
        from rich.table import Table

        columns = [(name, values) for name, values in summary_data if name != "FLOPs" or total_flops]
        table = Table(header_style=summarize_kwargs.get("header_style", "bold magenta"))
        for i, (name, _) in enumerate(columns):
            table.add_column(name, style="dim" if i == 0 else None, no_wrap=name == "Name",
                             justify="right" if name not in (" ", "Name", "Type", "Mode") else "left")
        for row in zip(*(values for _, values in columns)):
            table.add_row(*row)
        console = get_console()
        console.print(table)
        counts = {"Trainable params": trainable_parameters,
                  "Non-trainable params": total_parameters - trainable_parameters, "Total params": total_parameters}
        lines = [(label, get_human_readable_count(int(n)).strip()) for label, n in counts.items()]
        lines.append(("Total estimated model params size (MB)", get_formatted_model_size(model_size)))
        if total_flops:
            lines.append(("Total FLOPs", get_human_readable_count(int(total_flops)).strip()))
        for label, value in lines:
            console.print(f"[bold]{label}[/]: {value}")


def _number(value: float) -> str:
    return f"{value:.4f}" if abs(value) < 1e4 else f"{value:.4g}"


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


class ValidationReport(pl.Callback):
    """Each validation of the fit as one line (module docstring), e.g. ``validation at step 50/300: val/acc_seq
    0.4000 (best 0.4000), val/loss 1.7083; 0:00:41 elapsed``; an epoch-bounded run says ``epoch 3/20 (step 150)``.
    ``history``: the monitored metric after each validation so far (a ``ValidationHistory``: its ``values``,
    restored on a resume), for the best; ``elapsed``: the run's time so far (``ElapsedTime.so_far``); ``mode``:
    ``min`` or ``max``. Placed after the history among the callbacks, so that the best counts this validation."""

    def __init__(self, monitor: str, mode: str, history: Any, elapsed: Callable[[], float],
                 header: str | None = None) -> None:
        self.monitor, self.mode, self.history, self.elapsed = monitor, mode, history, elapsed
        self.header = header

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """``header`` (``run folder: ...``, in ``train.log`` from the start) on the console too, where the
        validations' lines go there: said once the training starts, so that a run failing before (a malformed data
        file) is its error alone, its folder gone (``coda_exp.cli``)."""
        if self.header is not None and trainer.is_global_zero and not _live(trainer):
            to_console(log, self.header)

    def line(self, trainer: pl.Trainer) -> str | None:
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()
                   if k == self.monitor or k.startswith("val/")}
        if not metrics:
            return None
        if step_bounded(trainer):
            where = f"step {trainer.global_step}/{trainer.max_steps}"
        else:
            total = "" if trainer.max_epochs in (None, -1) else f"/{trainer.max_epochs}"
            where = f"epoch {trainer.current_epoch + 1}{total} (step {trainer.global_step})"
        parts = []
        for key in sorted(metrics, key=lambda k: (k != self.monitor, k)):
            text = f"{key} {_number(metrics[key])}"
            seen = [v for v in self.history.values if math.isfinite(v)]  # NaN: never the best
            if key == self.monitor and seen:
                text += f" (best {_number(min(seen) if self.mode == 'min' else max(seen))})"
            parts.append(text)
        return f"validation at {where}: {', '.join(parts)}; {_clock(self.elapsed())} elapsed"

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit" or not trainer.is_global_zero:
            return
        line = self.line(trainer)
        if line is None:
            return
        log.info("%s", line, **file_only(_live(trainer)))  # a live bar shows the metrics already


def _live(trainer: pl.Trainer) -> bool:
    """Whether the console shows a live progress bar (a terminal, the bar on)."""
    bar = trainer.progress_bar_callback
    return bar is not None and not bar.is_disabled and on_terminal()
