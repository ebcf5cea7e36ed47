"""From a composed config to a finished run: data, model, task, trainer; fit, test the best checkpoint, record.

This is the only module that knows about Hydra configs; everything it builds is plain PyTorch / Lightning.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.utilities.exceptions import SIGTERMException

# resolvers: registered on import
from coda_exp import auto_resume, checkpoint_avg, console, progress, resolvers, results, run_folder  # noqa: F401
from coda_exp.attention import kernels_used
from coda_exp.callbacks import ElapsedTime, GateStats, KeepBestAcrossFolders, RandomState, ValidationHistory
from coda_exp.checkpoint_avg import CheckpointError, load_checkpoint
from coda_exp.checkpoint_io import AtomicCheckpointIO, peer_lost, write_failed
from coda_exp.config_checks import check_config
from coda_exp.data.common.errors import DataError
from coda_exp.environment import in_sweep
from coda_exp.errors import UserError, exit_status
from coda_exp.fingerprint import amend_scale, scale_label
from coda_exp.hydra_callbacks import LOGGED  # marks an exception run() logged: Hydra logs it once
from coda_exp.instantiation import instantiate  # a UserError a constructor raises stays one
from coda_exp.loggers import build_loggers, finish, log_config, wandb_reference, without_loggers
from coda_exp.optim import schedule_node
from coda_exp.resolved_config import save_resolved_config
from coda_exp.resume_data import CHECKPOINT_DATA_FILES, files_of
from coda_exp.resume_epoch import EpochEndResume, epochs_run
from coda_exp.resume_points import beside, check_best_checkpoints
from coda_exp.resume_tidy import ResumedFromBest, StaleInterrupted, leave_hydra_folder
from coda_exp.run_checks import (  # noqa: F401 (unknown_model_keys, check_compatible: part of this module's API)
    META_KEYS,
    accepted_keys,
    batch_limits,
    check_checkpoint_fits,
    check_compatible,
    check_eval_batch_limits,
    check_kernels,
    check_loggers,
    check_same_configuration,
    check_same_run,
    check_trainer,
    fast_options,
    unknown_model_keys,
)
from coda_exp.run_record import attention_options, device_description, new_record, run_identity, save_outputs
from coda_exp.stops import (
    EXIT_STATUS,
    DistributedSigterm,
    GracefulStop,
    RunInterrupted,
    stopped,
    stopped_outside_a_step,
)
from coda_exp.sweep_data import data_problem
from coda_exp.tasks.base import CHECKPOINT_DATA, CHECKPOINT_RUN
from coda_exp.threads import pin_threads
from coda_exp.validation_checks import (
    budget_cut,
    check_first_validation,
    warn_budget_overrides,
    warn_epoch_cap,
)

__all__ = ["attention_options", "build_loggers", "device_description", "run", "scale_label"]

log = logging.getLogger(__name__)


def _hydra_overrides() -> list[str]:
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return list(HydraConfig.get().overrides.task)
    return []


def _strip(node: dict) -> dict:
    return {k: (_strip(v) if isinstance(v, dict) else v) for k, v in node.items() if k not in META_KEYS}


def build_model(cfg: DictConfig, datamodule) -> torch.nn.Module:
    """The network from ``cfg.model`` plus what only the data knows (``datamodule.model_kwargs()``: vocabulary
    sizes, number of classes, pretrained vectors...)."""
    check_compatible(cfg)
    spec = _strip(OmegaConf.to_container(cfg.model, resolve=True))
    return instantiate(spec, **datamodule.model_kwargs())


def build_data(cfg: DictConfig):
    """The data module of ``cfg.data``; on the fast path with ``fast.static_shapes``, batches of one shape (a
    family without static batches trains as it is, one CUDA graph per batch shape) and ``fast.eval_batch_size``."""
    fast, extra = fast_options(cfg), {}
    if fast is not None:
        accepted = accepted_keys(cfg.data._target_)
        if fast.static_shapes and (accepted is None or "static_shapes" in accepted):
            extra["static_shapes"] = True
        elif fast.static_shapes:
            log.warning("fast path: %s has no static batches: one CUDA graph per batch shape (at most "
                        "fast.max_graphs, eager beyond)", cfg.data._target_)
        if fast.eval_batch_size is not None:
            extra["eval_batch_size"] = fast.eval_batch_size
    return instantiate(cfg.data, **extra)


def build_task(cfg: DictConfig, model: torch.nn.Module, datamodule) -> pl.LightningModule:
    """The task's LightningModule around ``model``, with the optimiser/scheduler factories and what the data
    tells the task (``datamodule.task_kwargs()``: number of classes, tokenizers for decoding...), on the fast path
    when ``cfg.fast`` is set."""
    scheduler = instantiate(node) if (node := schedule_node(cfg)) is not None else None
    fast = fast_options(cfg)
    extra = {} if fast is None else {"fast": fast}
    return instantiate(cfg.task.module, model=model, optimizer=instantiate(cfg.optimizer), scheduler=scheduler,
                       **extra, **datamodule.task_kwargs())


def build_callbacks(cfg: DictConfig, with_logger: bool = True) -> list[pl.Callback]:
    callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c is not None]
    if not with_logger:  # logger=none: nothing to send learning rates to
        callbacks = [c for c in callbacks if not isinstance(c, pl.callbacks.LearningRateMonitor)]
    return callbacks


def _metrics(outputs: list[dict]) -> dict[str, float]:
    out: dict[str, float] = {}
    for d in outputs:
        for k, v in d.items():
            out[k] = float(v.item() if hasattr(v, "item") else v)
    return out


RESUME_KEYS = ("state_dict", "epoch", "global_step", "loops")  # what ckpt_path must hold to resume from


def prepare_run_folder(cfg: DictConfig) -> Path | None:
    """Before any data loads: check ``ckpt_path`` (one line naming a corrupt file), choose and claim the run's
    folder (``coda_exp.run_folder``: a resumed run continues in its checkpoint's folder, unless that run finished:
    then a new folder; a taken folder is never shared) and check every folder the run will write to. Sets ``paths.output_dir`` when the folder is not Hydra's;
    returns that folder (where this run also logs), else None."""
    hydra_dir = Path(cfg.paths.output_dir)
    folder, resume = hydra_dir, False
    if cfg.get("ckpt_path"):
        try:
            ckpt = load_checkpoint(cfg.ckpt_path, mmap=True, need=RESUME_KEYS)
        except CheckpointError as err:  # a last.ckpt a kill left missing or cut short: name the one to resume from
            raise CheckpointError(f"{err}{beside(cfg.ckpt_path)}") from None
        theirs = run_folder.resume_folder(cfg.ckpt_path)
        check_same_run(cfg, theirs, ckpt)
        check_same_configuration(cfg, ckpt)
        auto_resume.check_budget(cfg, ckpt)  # a budget the checkpoint has reached trains nothing
        finished = auto_resume.check_not_finished(cfg, theirs, ckpt)  # a finished run trained and tested again
        if theirs is None:
            log.warning("ckpt_path=%s lies outside a run folder (<run>/checkpoints/): this run trains in a folder of "
                        "its own, its best checkpoint so far the one the checkpoint names where that file still "
                        "exists", cfg.ckpt_path)
        elif finished is not None:  # a new run from it: that run's folder and files stay as they are
            log.warning("ckpt_path=%s: its run %s already (record %s), so this run trains on from it in a new run "
                        "folder, leaving %s as it is", cfg.ckpt_path, finished[1].get("status"), finished[0], theirs)
        else:  # its own folder, even where that is this job's Hydra folder (hydra.run.dir=<run>, a requeued job)
            folder, resume = theirs, True
    if pl.utilities.rank_zero_only.rank == 0:
        folder = run_folder.claim(folder, resume=resume, quiet=True)  # run() says where, in the log
    if folder != hydra_dir:
        cfg.paths.output_dir = str(folder)
    run_folder.check_outputs(cfg, folder, claimed=folder != hydra_dir and not resume)
    return None if folder == hydra_dir else folder


def run(cfg: DictConfig) -> float | None:
    """Train, validate and test; write the run record. Returns the best monitored value (for sweepers).

    Every config value, the checkpoint to resume from and the output folders are checked before any data loads."""
    start = time.time()
    check_config(cfg)
    console.configure(verbose=cfg.get("verbose", False))  # quiet unless verbose=true (coda-exp -v)
    fast_options(cfg)
    check_kernels(cfg)
    check_compatible(cfg)
    check_loggers(cfg)  # the extras they need, an online W&B's key and server
    check_trainer(cfg)
    if cfg.data.get("dir") is not None and not in_sweep() and (missing := data_problem(cfg)):  # (a sweep: JobReport)
        raise DataError(missing)  # a data.dir without the reader's files: refused before the run's folder is chosen
    hydra_dir = Path(cfg.paths.output_dir)
    finished = auto_resume.apply(cfg)  # resume=auto: ckpt_path set to where this run stopped, or nothing to run
    if finished is not None:
        leave_hydra_folder(hydra_dir, "nothing ran")
        return (finished.get("metrics") or {}).get(cfg.task.monitor)
    folder = prepare_run_folder(cfg)
    # moved away from a folder another run holds: Hydra's train.log there is that run's, not ours
    resumed = folder is not None and bool(cfg.get("ckpt_path")) and run_folder.resume_folder(cfg.ckpt_path) == folder
    leave = hydra_dir if folder is not None and not resumed else None
    with run_folder.log_file(folder, leave=leave):
        if leave is not None:
            log.warning("output folder %s belongs to another run (%s); this run writes to %s", hydra_dir,
                        run_folder.owner_of(hydra_dir) or "unknown owner", folder)
        if folder is not None and leave is None:  # resumed in its checkpoint's folder (coda-exp runs reads the line)
            log.info("%s %s (its Hydra folder %s keeps only this log)", run_folder.RESUMED_IN, folder, hydra_dir)
        elif folder is not None:
            log.info("run folder: %s (this job's Hydra folder: %s)", folder, hydra_dir, **console.file_only())
        else:  # the console has it as the training starts (ValidationReport), where the validations' lines go: a run
            log.info("run folder: %s", hydra_dir, **console.file_only())  # failing before says its error alone
        made: dict = {}  # the trainer, once there is one
        try:
            return _train_and_record(cfg, start, hydra_dir if resumed else None, made)  # resumed: its job folder goes
        except SIGTERMException:  # Lightning's own stop outside a training step (a validation, the test): it exits 0
            stopped_outside_a_step(cfg, "SIGTERM")
        except KeyboardInterrupt:  # Ctrl-C while the data loads or the model is built
            stopped_outside_a_step(cfg, "SIGINT")
        except SystemExit as err:
            if isinstance(err.__context__, KeyboardInterrupt):  # Lightning's own Ctrl-C stop (its sanity check, the
                stopped_outside_a_step(cfg, "SIGINT")  # test, a second Ctrl-C) exits 1
            raise
        except Exception as err:
            full = None if isinstance(err, UserError) else write_failed(err, Path(cfg.paths.output_dir))
            shown = full or err  # a full disk, a read-only run folder: a user's error (not a bug), one message
            if isinstance(shown, UserError):  # the message says it all (file, line or key); a single run's console
                log.error("run failed: %s", shown, exc_info=_verbose_cause(cfg, shown),  # has the `error:` line
                          **console.file_only(not in_sweep()))
            else:
                log.exception("run failed")
                if (lost := peer_lost(err, Path(cfg.paths.output_dir))) is not None:  # a DDP rank died: resume line
                    log.error("%s", lost)
            try:
                setattr(shown, LOGGED, True)
                if isinstance(shown, UserError) and not resumed and not getattr(made.get("trainer"), "global_step", 0):
                    setattr(shown, run_folder.UNTRAINED, True)  # no step trained: nothing in its folder to keep
            except AttributeError:
                pass
            if full is not None:
                raise full from None
            raise


def _verbose_cause(cfg: DictConfig, err: UserError):
    """With ``verbose=true`` (``-v``), the traceback of the error behind a user's mistake (a library that could not
    read a file, a module of the user's own that raised) for the run's log, as ``errors.print_error`` prints it on
    the console: a sweep job's ``train.log`` had the message alone. None otherwise."""
    cause = err.__cause__
    if not cfg.get("verbose", False) or cause is None or isinstance(cause, UserError):
        return None
    return type(cause), cause, cause.__traceback__


def _train_and_record(cfg: DictConfig, start: float, left: Path | None = None,
                      made: dict | None = None) -> float | None:
    """The run once its folder is chosen; ``left``: the job's Hydra folder a resumed run leaves; ``made``: gets the
    trainer once built (whether a step was trained when the run fails)."""
    commit = results.code_commit()  # the code that runs: read now, not when the run ends
    overrides = _hydra_overrides()
    identity = run_identity(cfg, overrides)  # saved in every checkpoint: an evaluation of one is this configuration
    pin_threads(cfg.get("threads"))  # before anything computes: CPU results depend on the thread counts
    pl.seed_everything(cfg.seed, workers=True)
    save_resolved_config(cfg, overrides)  # a resumed run's overrides beside its config
    datamodule = build_data(cfg)
    datamodule.setup("fit")
    identity["scale"] = amend_scale(identity["scale"], datamodule.scale_notes())  # MLU files of another size
    model = build_model(cfg, datamodule)
    task = build_task(cfg, model, datamodule)
    task.run_config = OmegaConf.to_container(cfg, resolve=True)  # saved in every checkpoint
    task.checkpoint_extras = {CHECKPOINT_DATA: datamodule.encoder_state(), CHECKPOINT_RUN: identity,
                              CHECKPOINT_DATA_FILES: files_of(cfg.data.get("dir"))}  # what a resumed run compares
    loggers = build_loggers(cfg, identity)
    history, timer = ValidationHistory(cfg.task.monitor), ElapsedTime(start)
    report = progress.ValidationReport(  # a line each; a fresh run's folder first, as the training starts
        cfg.task.monitor, cfg.task.monitor_mode, history, timer.so_far,
        header=None if left is not None else f"run folder: {cfg.paths.output_dir}")
    callbacks = [*build_callbacks(cfg, with_logger=bool(loggers)), history, report, RandomState(), timer,
                 DistributedSigterm()]
    periodic = checkpoint_avg.periodic_checkpoints(cfg)
    if periodic is not None:
        callbacks.append(periodic)
    if not cfg.get("verbose", False) and cfg.trainer.get("enable_model_summary", True):
        callbacks.append(progress.ModelSummary())  # without the FLOPs Lightning does not measure here
    stale = None  # an earlier stop's interrupted.ckpt in this run's folder
    if cfg.get("ckpt_path"):
        check_checkpoint_fits(cfg.ckpt_path, task)
        check_best_checkpoints(cfg.ckpt_path)  # tested at the end: a damaged one said now, not after training
        stale = StaleInterrupted(cfg.paths.output_dir)
        # (a finished run's checkpoint, trained on in a new folder; an epoch's end Lightning runs again, counted once)
        callbacks += [KeepBestAcrossFolders(), stale, EpochEndResume(),
                      ResumedFromBest(cfg.ckpt_path, cfg.paths.output_dir)]
    if cfg.trainer.get("enable_checkpointing", True):  # +trainer.enable_checkpointing=false: no checkpoint at all
        # last: a checkpoint callback after every other (Lightning runs those last, in this order), after
        # DistributedSigterm (a SIGTERM noted, then the ranks' vote)
        callbacks.append(GracefulStop())
    trainer: pl.Trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False,
                                      plugins=[AtomicCheckpointIO()])  # whole checkpoints, whatever the disk
    if made is not None:
        made["trainer"] = trainer
    if left is not None and trainer.world_size == 1:  # (under DDP the ranks rank 0 launches log into it)
        leave_hydra_folder(left, f"the run goes on in {cfg.paths.output_dir}, this command's overrides in its "
                           "overrides.resumed-<time>.yaml")
    check_eval_batch_limits(trainer, datamodule, test=cfg.get("test_after_fit", True))  # not after the training
    check_first_validation(trainer, datamodule)
    warn_epoch_cap(trainer, datamodule)  # a step budget the epoch cap ends first: said before training
    warn_budget_overrides(cfg, datamodule)  # trainer.max_epochs=2 beside task.epochs=5
    record = None
    try:
        log_config(loggers, cfg, identity, commit)  # what names the run, before anything is logged
        try:
            with batch_limits():  # a limit_*_batches fraction of less than one batch: one message
                trainer.fit(task, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path") or None)
        except RunInterrupted as stop:  # Ctrl-C or SIGTERM: its checkpoint is saved; no test, no record
            stopped(stop, overrides)
        budget_cut(trainer, datamodule)
        # before validate/test restore the callbacks' states from `best`
        val_curve, val_curve_steps = list(history.values), list(history.steps)
        earlier = timer.earlier  # the earlier processes' time of a resumed run
        gate_stats = next((c.state_dict()["series"] for c in callbacks if isinstance(c, GateStats)), None)
        kernels = {"fit": kernels_used(model)}  # the CoDA kernels that actually ran (empty for softmax)
        ckpt = next((c for c in trainer.checkpoint_callbacks if isinstance(c, pl.callbacks.ModelCheckpoint)), None)
        best = ckpt.best_model_path if ckpt is not None and ckpt.best_model_path else None
        averaged = checkpoint_avg.average_last(cfg, trainer)
        if averaged is not None:
            best = averaged[0]
        metrics: dict[str, float] = {}
        diverged = task.diverged_at is not None  # a non-finite training loss: nothing to test, the record says so
        val_curve = [v if math.isfinite(v) else None for v in val_curve]  # JSON has no NaN
        if cfg.get("test_after_fit", True) and not diverged:
            task.prepare_final_evaluation()  # e.g. sequence tasks: validate the tested checkpoint with beam search
            with batch_limits(), without_loggers(trainer):  # the curves hold the validations made in training
                metrics.update(_metrics(trainer.validate(task, datamodule=datamodule, ckpt_path=best, verbose=False)))
            with batch_limits():
                metrics.update(_metrics(trainer.test(task, datamodule=datamodule, ckpt_path=best, verbose=False)))
            kernels["test"] = kernels_used(model)
        status = "diverged" if diverged else "finished"
        record = new_record(cfg, identity, metrics=metrics, kernels=kernels, trainer=trainer, model=model,
                            datamodule=datamodule, steps=trainer.global_step, epochs=epochs_run(trainer),
                            start=start - earlier, commit=commit, overrides=overrides, status=status)
        record.update({
            "val_curve": val_curve,
            "val_curve_steps": val_curve_steps,
            "val_curve_metric": str(cfg.task.monitor),
            "resumed_from": cfg.get("ckpt_path"),
            "best_checkpoint": best,
            "checkpoints_averaged": averaged[1] if averaged else 0,
            "wall_time_segment_s": round(record["wall_time_s"] - earlier, 3),  # this process's (wall_time_s: all)
        })
        if diverged:
            record["diverged_at_step"] = task.diverged_at
        if (wandb_run := wandb_reference(loggers)) is not None:  # a table cell's record leads to its dashboard
            record["wandb"] = wandb_run
        if task.fast_step is not None:  # trainer=gpu_fast: its levers and what they did (graphs, fallbacks)
            record["fast"] = task.fast_step.summary()
        if gate_stats is not None:  # callbacks=gate_stats
            record["gate_stats"] = gate_stats
        if trainer.is_global_zero:
            save_outputs(record, task.test_predictions, cfg)
            if stale is not None and cfg.get("save_record", True):  # at the latest now: the run has its record
                stale.remove("the run ended, its record written")
        if diverged:
            log.error("run diverged at step %d: recorded with status 'diverged' (no test; tables list it apart)",
                      task.diverged_at)
        log.info("%s %s at step %d%s", run_folder.RUN_ENDED, status, trainer.global_step,
                 "" if cfg.get("save_record", True) else " (save_record=false: no record)")
        return metrics.get(cfg.task.monitor)
    finally:  # the W&B run ends failed (exit status) when this one did not end: a crash, a Ctrl-C, a SIGTERM
        err = sys.exc_info()[1]  # Lightning's SIGTERM stop is a SystemExit without a code
        finish(loggers, record, exit_code=EXIT_STATUS["SIGTERM"] if isinstance(err, SIGTERMException)
               else exit_status(err))
