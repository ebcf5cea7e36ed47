"""coda_exp.console: a quiet run keeps Lightning's INFO lines, torch's LeafSpec warning and the datasets progress bars
off the console; verbose=true brings them back. Whole runs: tests/e2e/test_quiet_run.py."""

from __future__ import annotations

import importlib
import io
import logging
import warnings

import datasets
import pytest

from coda_exp import console

HF_BARS = importlib.import_module("datasets.utils.tqdm")  # reads HF_DATASETS_DISABLE_PROGRESS_BARS at its import
LEAFSPEC = "`isinstance(treespec, LeafSpec)` is deprecated, use `isinstance(treespec, TreeSpec)` instead."


@pytest.fixture
def terminal(monkeypatch):
    """A console handler on the root logger (as Hydra's), its output, and the datasets bars restored after."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    for name in console.LIBRARY_LOGGERS:  # as under Hydra: Lightning's records reach the root's handlers
        monkeypatch.setattr(logging.getLogger(name), "propagate", True)
        monkeypatch.setattr(logging.getLogger(name), "handlers", [])
    root = logging.getLogger()
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)
    monkeypatch.setattr(HF_BARS, "HF_DATASETS_DISABLE_PROGRESS_BARS", None)
    bars = datasets.is_progress_bar_enabled()
    with warnings.catch_warnings():
        yield stream
    root.removeHandler(handler)
    root.setLevel(level)
    (datasets.enable_progress_bars if bars else datasets.disable_progress_bars)()


def _log_everything() -> None:
    logging.getLogger("pytorch_lightning.utilities.rank_zero").info("💡 Tip: try installing litlogger")
    logging.getLogger("lightning_fabric.utilities.seed").info("Seed set to 1")
    logging.getLogger("pytorch_lightning.trainer").warning("a Lightning warning")
    logging.getLogger("coda_exp.pipeline").info("run folder: here")


def _leafspec_warning_shown() -> bool:
    with warnings.catch_warnings(record=True) as caught:
        warnings.warn(LEAFSPEC, FutureWarning, stacklevel=1)
    return any("LeafSpec" in str(w.message) for w in caught)


def test_quiet_keeps_our_logs_and_every_warning_but_not_lightnings_info(terminal):
    console.configure(verbose=False)
    _log_everything()
    out = terminal.getvalue()
    assert "litlogger" not in out and "Seed set" not in out
    assert "a Lightning warning" in out and "run folder: here" in out
    assert not _leafspec_warning_shown() and not datasets.is_progress_bar_enabled()


def test_verbose_undoes_what_a_quiet_run_did(terminal):
    console.configure(verbose=False)
    console.configure(verbose=True)
    _log_everything()
    out = terminal.getvalue()
    assert "litlogger" in out and "Seed set to 1" in out
    assert _leafspec_warning_shown() and datasets.is_progress_bar_enabled()
    console.configure(verbose=False)  # and back: one filter, not two
    assert sum(isinstance(f, console.LibraryInfoFilter) for h in console.console_handlers() for f in h.filters) == 1


def test_lightnings_own_console_handler_is_quiet_too(terminal, monkeypatch):
    """Lightning imported before logging is set up logs to its own stderr handler, not the root's."""
    own = io.StringIO()
    lightning = logging.getLogger("pytorch_lightning")
    monkeypatch.setattr(lightning, "propagate", False)
    monkeypatch.setattr(lightning, "handlers", [logging.StreamHandler(own)])
    console.configure(verbose=False)
    _log_everything()
    assert "litlogger" not in own.getvalue() and "a Lightning warning" in own.getvalue()


def test_the_log_file_and_capturing_handlers_keep_everything(terminal, tmp_path):
    """Only plain StreamHandlers (the terminal) are filtered: train.log keeps Lightning's lines."""
    file_handler = logging.FileHandler(tmp_path / "train.log")
    logging.getLogger().addHandler(file_handler)
    try:
        console.configure(verbose=False)
        _log_everything()
    finally:
        logging.getLogger().removeHandler(file_handler)
        file_handler.close()
    assert "litlogger" in (tmp_path / "train.log").read_text(encoding="utf-8")
    assert not file_handler.filters


def test_the_environment_variable_keeps_the_bars_off_even_when_verbose(terminal, monkeypatch):
    monkeypatch.setattr(HF_BARS, "HF_DATASETS_DISABLE_PROGRESS_BARS", True)  # the variable is set
    console.configure(verbose=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # datasets warns when asked to enable bars the variable disables
        console.configure(verbose=True)
    assert not datasets.is_progress_bar_enabled()


@pytest.mark.parametrize("message", [
    # printed on every MLU run (no worker at all): the generated MLU stream shards itself per DataLoader worker
    "Your `IterableDataset` has `__len__` defined. In combination with multi-process data loading",
    # printed on every mid-epoch resume, whose loaders do leave out the batches already trained on
    "You're resuming from a checkpoint that ended before the epoch ended and your dataloader is not resumable.",
    # printed on every resume: a resumed run goes on in its own folder
    "Checkpoint directory /runs/x/checkpoints exists and is not empty.",
    # trainer.precision=bf16-mixed: the weights stay float32, the size the summary prints
    "Precision bf16-mixed is not supported by the model summary.  Estimated model size in MB will not be accurate.",
    # a paper-scale config on the fixtures: the epoch's mean loss is logged all the same
    "The number of training batches (2) is smaller than the logging interval Trainer(log_every_n_steps=50).",
])
def test_quiet_hides_lightnings_warnings_that_do_not_apply_verbose_shows_them(terminal, message):
    from pytorch_lightning.utilities.rank_zero import rank_zero_warn

    for verbose, shown in ((False, False), (True, True)):
        console.configure(verbose=verbose)
        with warnings.catch_warnings(record=True) as caught:
            rank_zero_warn(message)
        assert any(message in str(w.message) for w in caught) is shown
    console.configure(verbose=False)

