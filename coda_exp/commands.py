"""``coda-exp <command> [args]``: everything a user runs besides training, one entry point for all of it.

Each command is a function ``main(argv: list[str]) -> int`` of a module that is imported only when the command
runs (a plot does not import the training stack, training does not import matplotlib): the tools of
:mod:`coda_exp.tools`, checkpoint averaging, and ``eval`` / ``predict`` of :mod:`coda_exp.evaluate` (a checkpoint's
metrics or predictions; Hydra overrides). Most have a script in a checkout (``scripts/make_tables.py`` for
``tables``; docs/running.md's table names each), a thin wrapper around the same function (:func:`run_command` with
its own program name), so ``make`` rules and old habits keep working.

A command's mistake the user can fix (:class:`~coda_exp.errors.UserError`: a missing optional dependency, a bad
file) is one ``error:`` line and exit status 2, as a training run's; argparse's own errors exit 2 too.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import yaml

from coda_exp.environment import set_environment
from coda_exp.errors import USER_ERROR_EXIT, UserError


@dataclass(frozen=True)
class Command:
    module: str
    function: str
    summary: str  # one line in ``coda-exp --help``


COMMANDS: dict[str, Command] = {
    "eval": Command("coda_exp.evaluate", "eval_main",
                    "evaluate a checkpoint: ckpt_path=FILE [split=all|test|validation] [data.dir=DIR]"),
    "predict": Command("coda_exp.evaluate", "predict_main",
                       "predict new inputs: ckpt_path=FILE input=FILE.jsonl|.tsv [output=FILE]"),
    "tables": Command("coda_exp.tools.tables", "main", "the paper tables from run records (results/tables/)"),
    "compare": Command("coda_exp.tools.compare", "main",
                       "a sweep's configurations over seeds vs a reference (Δ, Welch p), as Markdown"),
    "plot-curves": Command("coda_exp.tools.plot_curves", "main", "validation curves of run records, to PNG"),
    "plot-coda": Command("coda_exp.tools.plot_coda", "main", "CoDA Figure 2: f_E(E), f_N(N), M of a model"),
    "plot-attconv": Command("coda_exp.tools.plot_attconv", "main", "AttConv Figures 5 and 8 from predictions"),
    "average-checkpoints": Command("coda_exp.checkpoint_avg", "main", "average the last N checkpoints (T2T)"),
    "runs": Command("coda_exp.tools.runs", "main",
                    "the run folders under outputs/: finished, running, stopped (resumable) or failed"),
    "estimate": Command("coda_exp.tools.estimate", "main", "time a few steps, extrapolate a run's duration"),
    "warm-kernels": Command("coda_exp.tools.warm_kernels", "main",
                            "compile the numba CPU kernels into their cache, in parallel (once per install)"),
    "make-mlu": Command("coda_exp.tools.data_files", "mlu_main", "write the MLU data files (CoDA Table 6)"),
    "yelp-split": Command("coda_exp.tools.data_files", "yelp_main", "a Yelp split from review.json (AttConv)"),
    "fever-index": Command("coda_exp.tools.fever", "index_main", "index FEVER's Wikipedia dump (once)"),
    "fever-retrieve": Command("coda_exp.tools.fever", "retrieve_main", "retrieve FEVER evidence, print recall"),
}


def is_command_word(arg: str) -> bool:
    """Whether ``arg`` (the first argument) names a command rather than starting a training run: a bare word. Hydra's
    arguments are flags (``-m``, ``--cfg``) or overrides, which all hold ``=`` but ``~key`` (a deletion)."""
    return bool(arg) and "=" not in arg and not arg.startswith(("-", "~", "+"))


class UnknownCommand(UserError, ValueError):
    """``coda-exp <word>`` with a word that is neither a command nor a Hydra override."""


def find(name: str) -> Command:
    if name not in COMMANDS:
        raise UnknownCommand(f"unknown command {name!r}: the commands are {', '.join(COMMANDS)}; a training run takes "
                             "Hydra overrides (key=value, e.g. task=snli); coda-exp --help lists both")
    return COMMANDS[name]


@contextmanager
def _program_name(prog: str):
    """argparse names the program after ``sys.argv[0]``: ``coda-exp tables`` in its usage and errors."""
    saved = sys.argv[:]
    sys.argv[:] = [prog, *saved[1:]]
    try:
        yield
    finally:
        sys.argv[:] = saved


@contextmanager
def _plain_warnings():
    """Our own warnings (categories defined in ``coda_exp``: a skipped record, an unknown fingerprint) as one
    ``warning: ...`` line each, not Python's ``file:line: Category: message`` and the source line that warned;
    a library's warnings keep Python's format."""
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if category.__module__.startswith("coda_exp"):
            print(f"warning: {message}", file=file or sys.stderr, flush=True)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def run_command(name: str, argv: Sequence[str], prog: str | None = None) -> int:
    """Run command ``name`` with ``argv``; its exit status. A function that returns what it wrote (a path, a dict)
    rather than a status succeeded: 0. A :class:`UserError` prints one line and gives 2."""
    set_environment()
    try:
        command = find(name)
        with _program_name(prog or f"coda-exp {name}"), _plain_warnings():
            try:
                module = importlib.import_module(command.module)
            except ModuleNotFoundError as err:
                if err.name != command.module:
                    raise
                print(f"error: coda-exp {name} needs {command.module}, which this installation lacks", file=sys.stderr)
                return 1
            status = getattr(module, command.function)(list(argv))
    except UserError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return USER_ERROR_EXIT
    except yaml.YAMLError as err:  # a YAML file PyYAML cannot read (a config, a table spec): where, not a traceback
        from coda_exp.config_checks import yaml_error

        print(f"error: {yaml_error(err)}", file=sys.stderr, flush=True)
        return USER_ERROR_EXIT
    return status if isinstance(status, int) and not isinstance(status, bool) else 0
