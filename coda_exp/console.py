"""What a run prints on the console: quiet by default, everything with ``verbose=true`` (``coda-exp -v``).

Quiet keeps the run's own messages (``coda_exp.*`` logs, warnings of every library), Lightning's rich progress bar
and the final summary, and silences what a user cannot act on:

- Lightning's and Fabric's INFO lines on the console (``GPU available``, ``Seed set to``, the LitLogger advert,
  ``Restoring states from the checkpoint``...): they still go to the run's ``train.log``;
- the Hugging Face ``datasets`` progress bars (``Generating train split``, ``Map``, ``Filter``, ``tokenising``; a
  verbose run leaves them to ``HF_DATASETS_DISABLE_PROGRESS_BARS``);
- torch's FutureWarning about ``LeafSpec``, which Lightning's own code triggers (nothing here can change it),
  Lightning's warning that an ``IterableDataset`` with ``__len__`` may repeat examples across workers (ours do not),
  and its two warnings on a resume (a mid-epoch checkpoint with a loader it thinks is not resumable; a checkpoint
  folder that is not empty): a resumed run's loaders do resume, in its own folder; its model summary's warning that
  ``bf16-mixed`` / ``16-mixed`` precision is not supported (the weights of a mixed-precision run are float32, the
  size it then prints); and its warning that an epoch has fewer batches than ``log_every_n_steps`` (tiny data under a
  paper-scale config: the epoch's mean loss is still logged) (:data:`HIDDEN_WARNINGS`).

A line logged with ``extra=file_only()`` goes to the run's ``train.log`` but not to the console: each validation's
line (:class:`coda_exp.progress.ValidationReport`), which the progress bar shows on a terminal, and the run folder
at the start, which the summary ends with. Both reach the console of a redirected run, a ``nohup`` one or a cluster
job's, where Rich draws no live bar (:func:`on_terminal`): the run folder as the training starts
(:func:`to_console`), so that a run that fails before (a malformed data file) prints its error alone.

The model summary without its ``FLOPs`` column and ``Total FLOPs: 0`` (Lightning counts FLOPs only for a model
with an ``example_input_array``) and the progress bar without ``v_num`` are :mod:`coda_exp.progress`'s part.
:func:`configure` is called once per run (``coda_exp.pipeline.run``); a verbose run undoes what a quiet one did in
the same process.
"""

from __future__ import annotations

import logging
import warnings

#: the loggers whose INFO lines a quiet run keeps off the console (their warnings and errors still show)
#: (torch: its FakeTensor cache statistics, logged at exit, followed a Ctrl-C's one line)
LIBRARY_LOGGERS = ("pytorch_lightning", "lightning_fabric", "lightning", "torch")
#: warnings a quiet run hides: (message regex, category). Lightning's IterableDataset one warns of duplicates across
#: DataLoader workers; the only iterable datasets here (generated MLU) shard themselves per worker
#: (``coda_exp.data.seq2seq.mlu``, ``get_worker_info``), and it printed on every MLU run with no worker at all.
#: A resumed run continues in its own folder, whose checkpoints/ is not empty by design, and every loader here leaves
#: out the batches of the epoch already trained on (docs/running.md), which Lightning cannot see: its two warnings
#: on a resume said the opposite of what happens. A mixed-precision run keeps float32 weights: the model summary's
#: "Using 32 bits instead" is the right size, not an approximation (only ``*-mixed``: a ``*-true`` one is measured).
#: An epoch of fewer batches than ``log_every_n_steps`` (a paper-scale config on the fixtures) still logs its mean
#: training loss at the epoch's end (``train/loss_epoch``), which every run's CSV and record read.
HIDDEN_WARNINGS = ((r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning),
                   (r"Your `IterableDataset` has `__len__` defined", UserWarning),
                   (r"You're resuming from a checkpoint that ended before the epoch ended", UserWarning),
                   (r"Checkpoint directory .* exists and is not empty", UserWarning),
                   (r"Precision (bf)?16-mixed is not supported by the model summary", UserWarning),
                   (r"The number of training batches \(\d+\) is smaller than the logging interval", UserWarning))


#: a log record's attribute: True keeps it off the console (:func:`file_only`, :class:`FileOnlyFilter`)
FILE_ONLY = "coda_exp_file_only"


def on_terminal() -> bool:
    """Whether Rich draws on a terminal (the progress bar live): not under a redirect, ``nohup`` or a batch job."""
    from rich import get_console

    return get_console().is_terminal


def file_only(only: bool = True) -> dict:
    """``logging``'s keyword arguments for a line that goes to ``train.log`` only (``only=False``: everywhere)."""
    return {"extra": {FILE_ONLY: bool(only)}}


class FileOnlyFilter(logging.Filter):
    """Drops the records logged with :func:`file_only` (a filter on the console handlers only, verbose or not)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, FILE_ONLY, False)


class LibraryInfoFilter(logging.Filter):
    """Drops records below WARNING from :data:`LIBRARY_LOGGERS` (a filter on the console handler only)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        return not any(record.name == name or record.name.startswith(name + ".") for name in LIBRARY_LOGGERS)


def console_handlers() -> list[logging.Handler]:
    """The handlers that write to the terminal: the plain ``StreamHandler``s of the root logger (Hydra's
    ``console``) and of the libraries' own loggers (Lightning adds one when imported before logging is set up), not a
    log file nor a test framework's capturing handlers (subclasses)."""
    loggers = [logging.getLogger(), *(logging.getLogger(name) for name in LIBRARY_LOGGERS)]
    return [h for lg in loggers for h in lg.handlers if type(h) is logging.StreamHandler]


def to_console(logger: logging.Logger, message: str, level: int = logging.INFO) -> None:
    """``message`` as ``logger``'s line on the root logger's console handlers (Hydra's ``console``) only: a line the
    run's ``train.log`` has already."""
    record = logger.makeRecord(logger.name, level, __file__, 0, "%s", (message,), None)
    for handler in logging.getLogger().handlers:
        if type(handler) is logging.StreamHandler and level >= handler.level:
            handler.handle(record)


def _datasets_bars(enabled: bool) -> None:
    try:  # a declared dependency, but tasks on generated data (MLU, AlgoLisp) run without it (a GPU image's python)
        import datasets
    except ImportError:
        return

    if not enabled:
        datasets.disable_progress_bars()
        return
    with warnings.catch_warnings():  # HF_DATASETS_DISABLE_PROGRESS_BARS=1, the user's own choice, wins (and warns)
        warnings.simplefilter("ignore")
        datasets.enable_progress_bars()


def configure(verbose: bool) -> None:
    """Quiet (``verbose=False``) or everything (``True``) on the console, for the run about to start."""
    for handler in console_handlers():
        for f in [f for f in handler.filters if isinstance(f, (LibraryInfoFilter, FileOnlyFilter))]:
            handler.removeFilter(f)
        handler.addFilter(FileOnlyFilter())
    if not verbose:
        for handler in console_handlers():
            handler.addFilter(LibraryInfoFilter())
    for pattern, category in HIDDEN_WARNINGS:  # each call puts its filter first: the last run's choice wins
        warnings.filterwarnings("default" if verbose else "ignore", message=pattern, category=category)
    _datasets_bars(enabled=verbose)
