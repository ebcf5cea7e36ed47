"""coda_exp.progress: a step-bounded fit shows its optimizer steps out of max_steps, an epoch-bounded one Lightning's
epochs; no v_num unless verbose; the model summary without the FLOPs Lightning does not measure."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from coda_exp.progress import STEPS, ModelSummary, ProgressBar, ValidationReport, step_bounded


class _Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(bar: ProgressBar, **trainer) -> pl.Trainer:
    loader = DataLoader(TensorDataset(torch.randn(10, 2)), batch_size=2)  # 5 batches an epoch
    fit = pl.Trainer(callbacks=[bar], logger=pl.loggers.CSVLogger("unused"), enable_checkpointing=False,
                     enable_model_summary=False, accelerator="cpu", **trainer)
    fit.fit(_Tiny(), loader)
    return fit


def _train_task(bar: ProgressBar):
    return bar.progress.tasks[bar.train_progress_bar_id]


@pytest.mark.parametrize("max_steps,max_epochs,accumulate,expected", [
    (-1, 8, 1, False), (20, 8, 1, True), (100, 3, 1, False), (75, 3, 1, True), (20, None, 1, True),
    (20, 3, 4, True), (20, 2, 4, False),  # 25 batches, 4 per step: 7 steps an epoch
])
def test_step_bounded(max_steps, max_epochs, accumulate, expected):
    trainer = SimpleNamespace(max_steps=max_steps, max_epochs=max_epochs, num_training_batches=25,
                              accumulate_grad_batches=accumulate)
    assert step_bounded(trainer) is expected


def test_a_step_bounded_fit_shows_its_steps_out_of_max_steps(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bar = ProgressBar()
    fit = _fit(bar, max_steps=7, max_epochs=10)  # ends in its second epoch: "Epoch 1/9 2/5" before
    task = _train_task(bar)
    assert fit.global_step == 7 and (task.completed, task.total) == (7, 7)
    assert task.description.strip() == STEPS
    assert "v_num" not in bar.get_metrics(fit, fit.lightning_module)


def test_an_epoch_bounded_fit_keeps_lightnings_epochs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bar = ProgressBar(verbose=True)
    fit = _fit(bar, max_epochs=2)
    task = _train_task(bar)
    assert (task.completed, task.total) == (5, 5) and task.description.strip() == "Epoch 2/2"  # as the log lines count
    assert "v_num" in bar.get_metrics(fit, fit.lightning_module)  # verbose: as Lightning shows it


def test_the_model_summary_leaves_out_flops_it_did_not_measure(capsys):
    data = [(" ", ["0"]), ("Name", ["model"]), ("Type", ["DecompAtt"]), ("Params", ["401 K"]), ("Mode", ["train"]),
            ("FLOPs", ["0"])]
    ModelSummary.summarize(data, 401_000, 401_000, 1.6, {"train": 33, "eval": 0}, total_flops=0)
    out = capsys.readouterr().out
    assert "FLOPs" not in out and "DecompAtt" in out and "Total params: 401 K" in out and "train mode" not in out
    ModelSummary.summarize(data[:-1] + [("FLOPs", ["1.2 M"])], 401_000, 401_000, 1.6, {"train": 33, "eval": 0},
                           total_flops=1_200_000)
    out = capsys.readouterr().out
    assert "FLOPs" in out and "1.2 M" in out


class _Validated(_Tiny):
    def validation_step(self, batch, batch_idx):
        self.log("val/loss", self.layer(batch[0]).pow(2).mean())
        self.log("val/acc", 0.5)


@pytest.mark.parametrize("terminal,bar,on_console", [(True, True, False), (False, True, True), (True, False, True)])
def test_each_validation_is_one_line_in_the_log_and_on_the_console_without_a_live_bar(tmp_path, monkeypatch,
                                                                                     terminal, bar, on_console):
    """A redirected run (nohup, a cluster job, make run > log) printed nothing between the model summary and the final
    table, and its train.log held no validation value: now a line each, on the console only where no live bar is,
    after the run folder (said there as the training starts: train.log has it from the run's start)."""
    import io
    import logging

    from coda_exp import progress
    from coda_exp.callbacks import ElapsedTime, ValidationHistory
    from coda_exp.console import FileOnlyFilter

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(progress, "on_terminal", lambda: terminal)
    screen, logfile = io.StringIO(), io.StringIO()
    console_handler, file_handler = logging.StreamHandler(screen), logging.StreamHandler(logfile)
    console_handler.addFilter(FileOnlyFilter())
    console_handler.addFilter(logging.Filter("coda_exp"))  # (not Lightning's lines)
    logger = logging.getLogger("coda_exp.progress")
    logging.getLogger().addHandler(console_handler)  # Hydra's console handler is the root logger's
    logger.addHandler(file_handler)
    level = logger.level
    logger.setLevel(logging.INFO)  # (setLevel clears the logger's isEnabledFor cache; an earlier test's call filled it)
    history, timer = ValidationHistory("val/loss"), ElapsedTime(0.0)
    report = ValidationReport("val/loss", "min", history, lambda: 65.0, header="run folder: /runs/x")
    loader = DataLoader(TensorDataset(torch.randn(12, 2)), batch_size=2)  # 6 batches an epoch: validated at 3 and 6
    callbacks = [history, report, timer] + ([ProgressBar()] if bar else [])
    try:
        fit = pl.Trainer(callbacks=callbacks, logger=False, enable_checkpointing=False, enable_model_summary=False,
                         accelerator="cpu", max_steps=6, max_epochs=10, val_check_interval=3,
                         enable_progress_bar=bar)
        fit.fit(_Validated(), loader, loader)
    finally:
        logging.getLogger().removeHandler(console_handler)
        logger.removeHandler(file_handler)
        logger.setLevel(level)
    lines = logfile.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines] == ["validation at step 3/6", "validation at step 6/6"]
    best = min(history.values)
    assert lines[1].startswith(f"validation at step 6/6: val/loss {history.values[1]:.4f} (best {best:.4f}), "
                               "val/acc 0.5000; 0:01:05 elapsed")
    assert screen.getvalue().splitlines() == (["run folder: /runs/x", *lines] if on_console else [])


def test_a_step_bounded_fit_resumed_mid_epoch_shows_its_steps(tmp_path, monkeypatch):
    """A resumed step-bounded run showed ``Epoch 7/999 300/25``: Lightning's epoch bar with the steps in it."""
    class SaveAt7(pl.Callback):  # a checkpoint of a fit still running, as a stopped run's
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 7:
                trainer.save_checkpoint(tmp_path / "mid.ckpt")

    monkeypatch.chdir(tmp_path)
    loader = DataLoader(TensorDataset(torch.randn(10, 2)), batch_size=2)
    pl.Trainer(callbacks=[SaveAt7()], logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False, accelerator="cpu", max_steps=9, max_epochs=10).fit(_Tiny(), loader)
    bar = ProgressBar()
    fit = pl.Trainer(callbacks=[bar], logger=pl.loggers.CSVLogger("unused"), enable_checkpointing=False,
                     enable_model_summary=False, accelerator="cpu", max_steps=12, max_epochs=10)
    fit.fit(_Tiny(), loader, ckpt_path=tmp_path / "mid.ckpt")
    task = _train_task(bar)
    assert fit.global_step == 12 and (task.completed, task.total) == (12, 12) and task.description.strip() == STEPS
