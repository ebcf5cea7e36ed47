"""``coda-exp eval`` and ``coda-exp predict``: a trained model's checkpoint on another split, folder or file.

``coda-exp eval ckpt_path=RUN/checkpoints/epochNNN-stepN.ckpt [split=all|test|validation] [key=value ...]`` (the
run's best checkpoint, whose path the run's end prints and its record keeps as ``best_checkpoint``; or
``last.ckpt``) evaluates the checkpoint as a training run's end does (``split=all``: the validation split, then
the test split, sequence tasks decoding as their test decodes) and writes a run record, test predictions and its
own folder (``<paths.log_dir>/evals/<task>-<model>/<time>``: ``eval.log``, the loggers' files) like a training run.
As a training run's, the folder of an evaluation that fails (a data error, a crash) stays, its ``eval.log`` ending
with ``evaluation failed: <error>`` (a crash: and its traceback); one refused before it began (an output folder
that cannot be written) goes.
The record is the trained run's configuration: its task, model, attention, seed, scale and fingerprint (the trained
run's overrides plus this command's changes of its configuration: ``data.dir`` is a location and changes nothing),
with ``mode: "eval"``, ``checkpoint`` (the file evaluated), ``trained_run_id`` (the run that wrote it),
``trained_run_state`` (:func:`coda_exp.trained.trained_run_state`), ``checkpoints_averaged`` (how many the file averages),
``eval_split``, ``eval_data`` (``dir``, ``trained_dir``, ``same_data``: whether it read the trained run's data
folder), ``trained_overrides``, ``trained_wandb_id`` (the trained run's W&B id, kept in its folder) and the
checkpoint's ``steps`` and ``epochs``: its global step, and the epochs its weights trained in, the last perhaps in
part, as the training record counts them (``coda_exp.trained.checkpoint_epochs``: a run's last checkpoint gives its
record's ``epochs``, not the 0-based epoch index the checkpoint keeps). Its loggers get the configuration as a
training run's do, with the trained run's id, W&B id and the checkpoint, and its metrics at the checkpoint's step. Tables (``coda_exp.tables``) count one sample per trained model: an evaluation
stands in for its run only when that run's own record is absent and it read the same data; otherwise it is listed
under the table, never pooled (docs/tables.md).

``coda-exp predict ckpt_path=... input=FILE [output=FILE]`` runs the model on a file of new inputs (the formats:
:mod:`coda_exp.predict_io`) and writes one prediction per input (default ``<input>.predictions.jsonl`` beside it).
It needs no data folder: the checkpoint carries its tokenizers.

Both read the checkpoint alone (``coda_exp.trained``: its configuration and tokenizers ride along), take this
machine's ``paths``, ``logger``, ``trainer`` (``trainer=gpu`` for a GPU; one device) and report a user's mistake
(a key, a file, a line) as one message, exit status 2, before any data loads where it can be known then.
Without the ``coda-exp`` dispatcher: ``python -m coda_exp.evaluate eval|predict key=value ...``.
"""

from __future__ import annotations

import logging
import shlex
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities.exceptions import SIGTERMException

from coda_exp import results, run_folder
from coda_exp.attention import kernels_used
from coda_exp.config_checks import ConfigError
from coda_exp.data.common.errors import DataError
from coda_exp.errors import USER_ERROR_EXIT, UserError, exit_status, print_error
from coda_exp.experiments import earlier_defaults, run_configuration
from coda_exp.fingerprint import FINGERPRINT_RULE, amend_scale, scale_label, world_size_of
from coda_exp.loggers import build_loggers, finish, log_config, trained_wandb_id, wandb_reference
from coda_exp.predict_io import (
    csv_input,
    default_output,
    other_inputs_output,
    prediction_rows,
    read_inputs,
    unknown_inputs,
    write_predictions,
)
from coda_exp.run_checks import batch_limits, check_loggers
from coda_exp.run_record import new_record, save_outputs
from coda_exp.stops import EXIT_STATUS
from coda_exp.sweep_data import data_problem
from coda_exp.threads import pin_threads
from coda_exp.trained import (
    Invocation,
    Prepared,
    build,
    checkpoint_epochs,
    data_module,
    parse,
    prepare,
    same_folder,
    trained_run_state,
    trainer_for,
)

log = logging.getLogger(__name__)

EVAL_LOG = "eval.log"
EVAL_FAILED = "evaluation failed:"  # + the error: the last line of a failed evaluation's eval.log


def _metrics(outputs: list[dict]) -> dict[str, float]:
    return {k: float(v.item() if hasattr(v, "item") else v) for d in outputs for k, v in d.items()}


def trained_data_module(prep: Prepared):
    """The checkpoint's data module (``coda_exp.trained.data_module``), told that the network takes the checkpoint's
    weights: its word vectors are the trained ones, so no warning says they are randomly initialised."""
    datamodule = data_module(prep)
    datamodule.trained_weights = True
    return datamodule


def eval_identity(prep: Prepared) -> dict:
    """The evaluation record's identity: a new run id; the trained run's task, model, seed, experiment (and what it
    set), scale and vectors; its fingerprint over the trained run's experiment settings and overrides (less its
    ``fingerprint_defaults``) and this command's configuration changes (a checkpoint of an earlier fingerprint rule:
    its experiment's file today)."""
    cfg, trained = prep.cfg, prep.identity or {}
    if not trained:
        log.warning("%s names no training run (written before checkpoints carried it): the record's fingerprint "
                    "knows only this command's changes, and tables list it apart", prep.path)
    overrides = list(trained.get("overrides") or []) + prep.inv.config_strings()
    if trained and trained.get("fingerprint_rule") != FINGERPRINT_RULE:  # trained under other defaults?
        attention = cfg.model.get("scoring") or cfg.model.get("attention") or {}
        overrides += earlier_defaults(str(cfg.task.name), str(cfg.model.name), attention.get("n_fn"),
                                      attention.get("gate_scale"))
    vectors = trained.get("vectors")
    settings = trained.get("experiment_overrides")
    world = trained.get("world_size") or world_size_of(list(trained.get("overrides") or []))  # how it was trained
    return {"run_id": results.make_run_id(cfg.task.name, cfg.model.name, cfg.seed), "task": str(cfg.task.name),
            "model": str(cfg.model.name), "seed": int(cfg.seed),
            "scale": trained.get("scale") or scale_label(cfg.scale_name, []), "overrides": overrides,
            **run_configuration(overrides, vectors, trained.get("experiment"),
                                settings if isinstance(settings, list) else None, world,
                                trained.get("fingerprint_defaults")),  # the trained run's defaults typed out
            "vectors": vectors, "world_size": world}


def _eval_folder(prep: Prepared) -> Path:
    """Claim this evaluation's folder and check every folder it writes to (before any data loads)."""
    cfg = prep.cfg
    stamp = results.utc_now_iso().replace(":", "").replace("+0000", "Z")
    folder = Path(cfg.paths.log_dir) / "evals" / f"{cfg.task.name}-{cfg.model.name}" / stamp
    folder = run_folder.claim(folder)
    cfg.paths.output_dir = str(folder)
    run_folder.check_outputs(cfg, folder, claimed=True)  # refused: the folder, holding only the claim, goes
    return folder


@contextmanager
def _failure_logged():
    """An evaluation that fails once its folder holds its ``eval.log`` keeps the folder, as a training run that
    fails keeps its own, with why at the end of the log (:data:`EVAL_FAILED` and the error; the console has the
    ``error:`` line or the traceback already)."""
    from coda_exp.console import file_only

    try:
        yield
    except UserError as err:
        log.error("%s %s", EVAL_FAILED, err, **file_only())
        raise
    except Exception:  # a crash: its traceback follows the line, the error last
        log.exception("%s", EVAL_FAILED.rstrip(":"), **file_only())
        raise
    except BaseException as err:  # a Ctrl-C, a SIGTERM: the console says so, with the command that runs it again
        log.warning("evaluation stopped (%s): nothing recorded", type(err).__name__, **file_only())
        raise


class EvalInterrupted(Exception):
    """``coda-exp eval`` or ``predict`` stopped by Ctrl-C (SIGINT) or SIGTERM: it exits with :attr:`status` (130 or
    143, as training), having written no record and no predictions."""

    def __init__(self, signal_name: str):
        super().__init__(signal_name)
        self.signal_name, self.status = signal_name, EXIT_STATUS[signal_name]


def _raise_sigterm(signum, frame) -> None:
    raise SIGTERMException


@contextmanager
def _stoppable():
    """A Ctrl-C or SIGTERM anywhere in an evaluation or prediction (the checkpoint's and data's loading, the
    validation, the test, the predictions) as :class:`EvalInterrupted`. Lightning's own stops are a SystemExit of
    status 1 for a Ctrl-C (its cause a KeyboardInterrupt) and of status 0 for a SIGTERM (``SIGTERMException``): a
    script or cluster saw an evaluation that never ended succeed. SIGTERM stops at once here: nothing is saved."""
    previous = None
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        previous = signal.signal(signal.SIGTERM, _raise_sigterm)  # Lightning's own handler calls it too
    try:
        yield
    except SIGTERMException:
        raise EvalInterrupted("SIGTERM") from None
    except KeyboardInterrupt:
        raise EvalInterrupted("SIGINT") from None
    except SystemExit as err:
        if isinstance(err.__context__, KeyboardInterrupt):
            raise EvalInterrupted("SIGINT") from None
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def evaluate(inv: Invocation) -> dict:
    """Run ``coda-exp eval``; return its record (module docstring)."""
    start = time.time()
    prep = prepare(inv)
    cfg = prep.cfg
    check_loggers(cfg)  # the extra to install, an online W&B's key and server: before any data (predict logs nothing)
    wanted = ("validation", "test") if inv.command["split"] == "all" else (inv.command["split"],)
    if cfg.data.get("dir") is not None and (missing := data_problem(cfg, wanted)):  # before the folder is made
        raise DataError(missing)
    folder = _eval_folder(prep)
    with run_folder.log_file(folder, EVAL_LOG), _failure_logged():
        log.info("evaluating %s in %s", prep.path, folder)
        commit = results.code_commit()
        pin_threads(cfg.get("threads"))
        pl.seed_everything(cfg.seed, workers=True)
        datamodule = trained_data_module(prep)
        datamodule.warnings.extend(prep.warnings)  # kept in the record (the precision it evaluates in)
        task = build(prep, datamodule, build_splits=True)
        identity = eval_identity(prep)
        identity["scale"] = amend_scale(identity["scale"], datamodule.scale_notes())  # e.g. a shorter MLU test file
        loggers = build_loggers(cfg, identity, job_type="eval")
        record, trained = None, {"trained_run_id": (prep.identity or {}).get("run_id"),
                                 "trained_wandb_id": trained_wandb_id(prep.path), "checkpoint": str(prep.path.resolve())}
        try:
            log_config(loggers, cfg, identity, commit, **trained)  # the config as in training, and the trained run
            trainer = trainer_for(cfg, folder, loggers, prep.checkpoint)  # logged at the checkpoint's step
            task.prepare_final_evaluation()  # sequence tasks: validation decodes as the test does
            metrics: dict[str, float] = {}
            split = inv.command["split"]
            with batch_limits():  # a limit_*_batches fraction of less than one batch: one message
                if split in ("all", "validation"):
                    metrics.update(_metrics(trainer.validate(task, datamodule=datamodule, verbose=False)))
                if split in ("all", "test"):
                    metrics.update(_metrics(trainer.test(task, datamodule=datamodule, verbose=False)))
            ckpt = prep.checkpoint
            record = new_record(cfg, identity, metrics=metrics, kernels={"test": kernels_used(task.model)},
                                trainer=trainer, model=task.model, datamodule=datamodule,
                                steps=ckpt.get("global_step", 0), epochs=checkpoint_epochs(ckpt), start=start,
                                commit=commit, overrides=list(inv.environment) + inv.config_strings(),
                                status="finished")
            trained_dir = prep.trained_config.get("data", {}).get("dir")
            record.update({
                "mode": "eval",
                **trained,
                "best_checkpoint": str(prep.path.resolve()),
                "trained_overrides": list((prep.identity or {}).get("overrides") or []),
                "trained_run_state": trained_run_state(prep),
                "checkpoints_averaged": len(prep.checkpoint.get("averaged_checkpoints") or []),
                "eval_split": split,
                "eval_data": {"dir": cfg.data.get("dir"), "trained_dir": trained_dir,
                              "same_data": not any(o.key_or_group == "data.dir" for o in inv.config)
                              or same_folder(cfg.data.get("dir"), trained_dir)},
            })
            if (wandb_run := wandb_reference(loggers)) is not None:
                record["wandb"] = wandb_run
            save_outputs(record, task.test_predictions if split != "validation" else None, cfg)
            return record
        finally:  # the W&B run ends failed when this evaluation did not end (a crash, a Ctrl-C, a SIGTERM)
            err = sys.exc_info()[1]
            finish(loggers, record, exit_code=EXIT_STATUS["SIGTERM"] if isinstance(err, SIGTERMException)
                   else exit_status(err))


def predict(inv: Invocation) -> Path:
    """Run ``coda-exp predict``; return the predictions file (module docstring)."""
    inputs, default = Path(inv.command["input"]), default_output(Path(inv.command["input"]))
    if problem := csv_input(inputs):  # before the output's checks: the input is what needs changing
        raise ConfigError(f"coda-exp predict: input={problem}")
    output = Path(inv.command["output"]) if inv.command["output"] else default
    if output.expanduser().resolve() == inputs.expanduser().resolve():
        raise ConfigError(f"coda-exp predict: output={inv.command['output']} is the input file: writing the "
                          f"predictions there would overwrite the inputs; name another output= (the default is "
                          f"{default})")
    if not inv.command["output"] and (owner := other_inputs_output(output, inputs)):
        raise ConfigError(f"coda-exp predict: the default output {output} holds the predictions of {owner}, not of "
                          f"input={inv.command['input']}: name the output of this input (e.g. "
                          f"output={output.with_name(inputs.name + '.predictions.jsonl')})")
    if output.is_dir():
        raise ConfigError(f"coda-exp predict: output={output} is a folder: name the predictions file (e.g. "
                          f"output={output / default.name})")
    prep = prepare(inv)
    datamodule = trained_data_module(prep)
    family = str(prep.cfg.task.get("family", type(datamodule).__name__))
    rows, wheres = read_inputs(inv.command["input"], datamodule.INPUT_FIELDS, family)
    run_folder.check_writable({"output": output.parent})
    pin_threads(prep.cfg.get("threads"))
    pl.seed_everything(prep.cfg.seed, workers=True)
    task = build(prep, datamodule, build_splits=False)
    encoded = datamodule.encode_inputs(rows)
    if note := unknown_inputs(encoded, wheres, datamodule.INPUT_IDS):  # a warning: the predictions are written
        log.warning(note)
    loader = torch.utils.data.DataLoader(encoded, batch_size=datamodule.eval_batch_size, shuffle=False,
                                         collate_fn=datamodule.collate)
    outputs = trainer_for(prep.cfg, None).predict(task, dataloaders=loader)
    preds = [p for batch in outputs for p in batch]
    labels = list(getattr(datamodule, "label_names", None) or getattr(task, "label_names", None) or []) or None
    path = write_predictions(prediction_rows(preds, rows, wheres, encoded, labels), output)
    print(f"wrote {len(preds)} predictions to {path}", flush=True)
    return path


def _configure_logging() -> None:
    root = logging.getLogger()
    if not root.handlers:  # outside Hydra: the console at INFO, as a training run's log
        logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")


USAGE = {
    "eval": """usage: coda-exp eval ckpt_path=FILE [split=all|test|validation] [key=value ...]

Evaluate a training run's checkpoint and write a run record (mode "eval") and its test predictions.
  ckpt_path=FILE      a .ckpt written by a training run: its best, RUN/checkpoints/epochNNN-stepN.ckpt
                      (the path its end printed, its record's best_checkpoint), last.ckpt, an averaged one
  split=...           all (default: validation, then test), test or validation
  data.dir=DIR        read another folder of the same format (the record says it is other data)
  data.*, task.* keys: change the trained configuration (e.g. a beam search's task.module.decoding.beam_size=8);
                      training-only keys (optimizer.*, task.epochs, ...) and model.* (the weights fit the
                      trained model only; model.*.kernel, how CoDA is computed, may change) are refused
  paths.*, logger=, trainer= (trainer=gpu), threads=, save_record=, save_predictions=: this machine's settings
  imports=[...]       your own modules (readers, models), instead of those the checkpoint names
  -v, --verbose       every library's log lines on the console, errors' tracebacks (quiet by default)
docs/running.md has the details.""",
    "predict": """usage: coda-exp predict ckpt_path=FILE input=FILE.jsonl|.tsv [output=FILE] [key=value ...]

Run a trained model on new inputs (JSON lines, or a TSV file with a header, of the task's input fields) and write
one prediction per input, in input order (default output: <input>.predictions.jsonl beside it). The fields:
text_a, text_b (pairs; ranking: and group), text (texts), src (sequences), claim, evidence (FEVER), question,
passages (span QA).
  ckpt_path=FILE      a .ckpt written by a training run
  paths.*, logger=, trainer= (trainer=gpu), threads=: this machine's settings
  imports=[...]       your own modules (readers, models), instead of those the checkpoint names
  -v, --verbose       every library's log lines on the console, errors' tracebacks (quiet by default)
docs/running.md has the formats.""",
}


def _run(mode: str, action, overrides: list[str]) -> int:
    from coda_exp import console
    from coda_exp.environment import set_environment

    if any(arg in ("-h", "--help") for arg in overrides):
        print(USAGE[mode])
        return 0
    verbose = any(arg in ("-v", "--verbose") for arg in overrides)
    set_environment()
    _configure_logging()
    console.configure(verbose=verbose)  # quiet as a training run: Lightning's INFO lines stay in eval.log
    try:
        with _stoppable():
            action(parse(mode, [arg for arg in overrides if arg not in ("-v", "--verbose")]))
    except UserError as err:  # one message naming the key, file or line; no traceback (as coda_exp.cli)
        print_error(err, verbose)
        return USER_ERROR_EXIT
    except EvalInterrupted as stop:  # exit 130 or 143, as a training run a signal stopped
        log.warning("%s interrupted (%s): %s; run it again with: %s", "evaluation" if mode == "eval" else "prediction",
                    "Ctrl-C" if stop.signal_name == "SIGINT" else stop.signal_name,
                    "nothing recorded (a partial evaluation is not a result)" if mode == "eval"
                    else "no predictions written", _command_line(mode, overrides))
        return stop.status
    return 0


def _command_line(mode: str, overrides: list[str]) -> str:
    """The command that runs this ``eval``/``predict`` again (``coda-exp``, or as it was started without it)."""
    program = "python -m coda_exp.evaluate" if Path(sys.argv[0]).name == "evaluate.py" else "coda-exp"
    return " ".join([program, mode, *(shlex.quote(arg) for arg in overrides)])


def eval_main(overrides: list[str]) -> int:
    """``coda-exp eval <overrides>``: 0, 2 for a user's mistake (its message printed), 130 or 143 when a Ctrl-C or
    SIGTERM stopped it (said, with the command that runs it again; nothing recorded); a crash raises."""
    return _run("eval", evaluate, overrides)


def predict_main(overrides: list[str]) -> int:
    """``coda-exp predict <overrides>``: 0, 2 for a user's mistake (its message printed), 130 or 143 when a Ctrl-C or
    SIGTERM stopped it (said, with the command that runs it again; no predictions written); a crash raises."""
    return _run("predict", predict, overrides)


def main(argv: list[str] | None = None) -> int:
    """``python -m coda_exp.evaluate eval|predict key=value ...``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {"eval": eval_main, "predict": predict_main}
    if not argv or argv[0] not in commands:
        print("usage: python -m coda_exp.evaluate eval ckpt_path=FILE [split=all|test|validation] [key=value ...]\n"
              "       python -m coda_exp.evaluate predict ckpt_path=FILE input=FILE [output=FILE] [key=value ...]",
              file=sys.stderr)
        return USER_ERROR_EXIT
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
