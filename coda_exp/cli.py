"""The entry point: ``coda-exp task=snli model=decompatt`` (installed), ``python -m coda_exp ...`` or ``python
train.py ...`` (a checkout). All three compose the same ``train`` config and call :func:`coda_exp.pipeline.run`;
``coda-exp <command> ...`` runs one of the other commands instead (tables, plots, data preparation, evaluation:
:mod:`coda_exp.commands`), ``--help`` prints :mod:`coda_exp.usage`, and ``-v``/``--verbose`` is ``verbose=true``.

The configs are the repository's top-level ``configs/`` folder in a checkout and ship inside the wheel as
``coda_exp/configs`` (``setup.py`` maps the one onto the other): :func:`coda_exp.environment.config_dir` picks whichever
exists, the checkout first. Importing this module registers the configs' resolvers (:mod:`coda_exp.resolvers`).
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from coda_exp import resolvers  # noqa: F401 (registers ${dir_if_exists:...}, ${fixture_dir:...}, ${run_tag:...})
from coda_exp.composition import check_composition, check_job_folder, sweep_variants  # noqa: F401 (API)
from coda_exp.environment import config_dir, in_sweep, set_environment

HELP_FLAGS = ("-h", "--help")
VERBOSE_FLAGS = ("-v", "--verbose")


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="train")
def _train(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    from coda_exp.errors import USER_ERROR_EXIT, UserError, print_error
    from coda_exp.hydra_callbacks import LOGGED, SweepUserError, remove_made_folders
    from coda_exp.pipeline import run
    from coda_exp.run_folder import UNTRAINED, refused, remove_job_folder

    try:
        return run_job(run, cfg)  # a job in a joblib worker: its stop is its outcome, not the sweep's end
    except UserError as err:
        if in_sweep():  # the sweep goes on and lists this job at the end
            wrapped = SweepUserError(f"{type(err).__name__}: {err}")
            setattr(wrapped, LOGGED, getattr(err, LOGGED, False))
            wrapped.code = USER_ERROR_EXIT  # the sweep summary's exit status of this job
            raise wrapped from None
        print_error(err, bool(cfg.get("verbose")))  # (the run logged it to its train.log only)
        if not getattr(err, LOGGED, False):  # refused before the run started: its Hydra folder goes, or says why
            refused(HydraConfig.get().runtime.output_dir, err)
            remove_made_folders()  # (outputs/runs/ where the run made it)
        elif getattr(err, UNTRAINED, False) and remove_job_folder(cfg.paths.output_dir, started=True):
            remove_made_folders()  # failed before its first step (a malformed data file): nothing in it to keep
        raise SystemExit(USER_ERROR_EXIT) from None  # the message alone: no traceback, no HYDRA_FULL_ERROR hint


def run_job(run, cfg: DictConfig):
    """``run(cfg)``; in a worker of a joblib sweep (``coda_exp.sweep_workers``) a stop ends the job with
    :class:`~coda_exp.hydra_callbacks.JobStopped` (its outcome written), not with the ``SystemExit`` that made joblib
    kill every other worker; a Ctrl-C or SIGTERM before the pipeline turns it into a stop (its checks) is one too, and
    a job the sweep's stop came before does not start (its Hydra folder goes; ``resume=auto`` runs it)."""
    from coda_exp import sweep_workers

    if not sweep_workers.in_worker():  # this process: the basic launcher, or joblib with one worker
        return run(cfg)
    from hydra.core.hydra_config import HydraConfig
    from pytorch_lightning.utilities.exceptions import SIGTERMException

    from coda_exp.hydra_callbacks import SIGNAL_WORDS, JobStopped, listed_as_interrupted, stop_note
    from coda_exp.run_folder import remove_job_folder
    from coda_exp.stops import stopped_outside_a_step

    job = HydraConfig.get()
    with sweep_workers.job_signals():
        try:
            try:
                if (name := sweep_workers.stopped(stop_note(job.sweep.dir))) is not None:
                    remove_job_folder(job.runtime.output_dir)
                    print(f"job #{job.job.num} not started: the sweep was stopped ({SIGNAL_WORDS.get(name, name)})",
                          file=sys.stderr, flush=True)
                    raise JobStopped("not started: the sweep was stopped", None)
                return run(cfg)
            except KeyboardInterrupt:  # a worker's KeyboardInterrupt is the sweep's error to joblib
                stopped_outside_a_step(cfg, "SIGINT")
            except SIGTERMException:
                stopped_outside_a_step(cfg, "SIGTERM")
        except SystemExit as err:
            if listed_as_interrupted():
                raise JobStopped(f"stopped by a signal (exit status {err.code})", err.code) from None
            raise


def training_arguments(argv: list[str]) -> list[str]:
    """Hydra's arguments of a training run: ``-v``/``--verbose`` become the override ``verbose=true``."""
    args = [a for a in argv if a not in VERBOSE_FLAGS]
    if len(args) < len(argv) and not any(a.lstrip("+").startswith("verbose=") for a in args):
        args.append("verbose=true")
    return args


def flags_first(argv: list[str]) -> list[str]:
    """Hydra's flags (with their values) before the overrides, each list in its own order: argparse takes Hydra's
    overrides as one run of positional arguments, so ``task=snli -m seed=1,2`` or ``--cfg job model=x`` (overrides
    on both sides of a flag) would be "unrecognized arguments". A flag whose value is optional given without one
    (``--info``, ``-i``) gets its default value written out (``--info all``): moved before the overrides, argparse
    would take the first override for its value (``--info scale=fixture``: "invalid choice: 'scale=fixture'", where
    Hydra's own ``python app.py scale=fixture --info`` shows the info). A word that is not one of Hydra's flags stays
    where it is (argparse names it)."""
    from hydra._internal.utils import get_args_parser

    actions = {o: a for a in get_args_parser()._actions for o in a.option_strings}
    flags, rest, i = [], [], 0
    while i < len(argv):
        word = argv[i]
        action = actions.get(word)
        if action is None and word.startswith("--") and word.split("=", 1)[0] in actions:
            flags.append(word)  # --cfg=job: the flag and its value in one word
        elif action is None:
            rest.append(word)
        else:
            flags.append(word)
            takes = action.nargs is None or (action.nargs == "?" and i + 1 < len(argv)
                                             and argv[i + 1] in (action.choices or ()))
            if takes and i + 1 < len(argv):
                i += 1
                flags.append(argv[i])
            elif action.nargs == "?" and action.const is not None:
                flags.append(str(action.const))  # what argparse gives it bare: no override is read as its value
        i += 1
    return flags + rest


def main(argv: list[str] | None = None) -> None:
    """``coda-exp [overrides]``: train, validate and test one task x model (``-m`` for sweeps); ``coda-exp <command>
    [args]``: another command; ``coda-exp --help``: what a user can run. Ctrl-C outside a run's training steps
    (which stop with a checkpoint, :class:`coda_exp.stops.GracefulStop`) is one line and exit status 130; with
    ``-v`` its traceback too."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        _main(argv)
    except KeyboardInterrupt:  # Ctrl-C before a run starts (imports, checks) or in a command: a line, not a traceback
        if any(a in VERBOSE_FLAGS or a == "verbose=true" for a in argv):
            raise
        print("\ninterrupted (Ctrl-C)", file=sys.stderr, flush=True)
        raise SystemExit(130) from None


def _main(argv: list[str]) -> None:
    from coda_exp import commands

    set_environment()
    if argv and argv[0] == "help":  # coda-exp help [command]
        argv = [argv[1], "--help"] if len(argv) > 1 else ["--help"]
    if argv and commands.is_command_word(argv[0]):
        raise SystemExit(commands.run_command(argv[0], argv[1:]))
    if any(a in HELP_FLAGS for a in argv):
        from coda_exp.usage import help_text

        print(help_text(), end="")
        raise SystemExit(0)
    sys.argv[1:] = flags_first(training_arguments(argv))  # Hydra parses sys.argv
    configs = check_composition(sys.argv[1:])
    from coda_exp import hydra_callbacks

    hydra_callbacks.sweep_exit, hydra_callbacks.sweep_configs = None, configs  # this call's sweep, not an earlier one
    _train()
    status, hydra_callbacks.sweep_exit = hydra_callbacks.sweep_exit, None
    if status:  # a sweep whose failed jobs it has listed
        raise SystemExit(status)


if __name__ == "__main__":
    main()
