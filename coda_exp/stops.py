"""How a run stops on a signal, and what it says then.

A first Ctrl-C (SIGINT) or a SIGTERM (a cluster's time limit, a preemption, ``scripts/side_by_side.py``) during
training stops the run at the end of the current step (of the next one, for a SIGTERM between two steps) with
``checkpoints/interrupted.ckpt`` (:class:`GracefulStop`); the pipeline prints the command that resumes from it (:func:`stopped`) and exits 130 or
143, which stops a sweep too. Outside a training step (data loading, a validation, the test, a second Ctrl-C) the
run stops there with no checkpoint saved then (:func:`stopped_outside_a_step`). Under DDP every rank stops at the
same step, and SIGTERM is handled without Lightning's collective inside the signal handler
(:class:`DistributedSigterm`). In a submitit job (``hydra/launcher=slurm``, ``submitit_local``) submitit's
preemption signal (USR2: a time limit ahead, a preemption) stops the run the same way before submitit requeues
it. ``docs/running.md`` says it for users.
"""

from __future__ import annotations

import logging
import shlex
import signal
import sys
import threading
from pathlib import Path

import pytorch_lightning as pl
from omegaconf import DictConfig

from coda_exp.callbacks import LastCheckpoint
from coda_exp.ddp_sigterm import DistributedSigterm
from coda_exp.hydra_callbacks import job_interrupted, program, stop_note, typed_again

log = logging.getLogger(__name__)

INTERRUPTED_CHECKPOINT = "interrupted.ckpt"  # beside last.ckpt: the step a Ctrl-C or SIGTERM stopped at
# 128 + the signal's number, as a shell reports a run it stopped; SIGUSR1/2: submitit's preemption signal
EXIT_STATUS = {"SIGINT": 130, "SIGTERM": 143, "SIGUSR1": 138, "SIGUSR2": 140}
SIGNAL_NUMBER = {None: 0, **{name: getattr(signal, name).value for name in EXIT_STATUS}}  # what the ranks' vote sends


class RunInterrupted(Exception):
    """Training stopped by a signal at the end of step ``step``, after ``checkpoint`` (resumable) was saved."""

    def __init__(self, signal_name: str, step: int, checkpoint: Path):
        super().__init__(f"{signal_name} at step {step}")
        self.signal_name, self.step, self.checkpoint = signal_name, int(step), Path(checkpoint)


class GracefulStop(pl.callbacks.Checkpoint):
    """A first Ctrl-C (SIGINT) or a SIGTERM (a cluster's time limit, a preemption) during training stops the run at
    the end of the current step: the callback saves ``<checkpoints>/interrupted.ckpt`` there and raises
    :class:`RunInterrupted` (the pipeline prints the command that resumes from it and exits 130 or 143), so the
    steps since the last validation's ``last.ckpt`` are not lost. A second Ctrl-C stops at once, as Python's default
    does. Lightning's own Ctrl-C exits with nothing saved; its SIGTERM stop (``received_sigterm``) comes later.
    Under DDP the ranks agree on the stop each step (any rank's signal stops all, with that signal's status); :class:`DistributedSigterm` keeps SIGTERM's handler free of collectives. Under gradient
    accumulation the stop comes at the end of the batch that makes the optimizer step.

    A step after which the run checkpoints (a validation is due, or the epoch ends where checkpoints are written at
    epoch ends) stops once its ``last.ckpt`` is written, and names that file: a checkpoint saved before that
    validation resumed past it (Lightning counts a checkpoint from a batch's end as validated), so the resumed run
    lacked one point of the curve and could test another best checkpoint. A :class:`~pytorch_lightning.callbacks.
    Checkpoint`, so Lightning runs its hooks after the run's ModelCheckpoints (theirs come last, in their order):
    a periodic checkpoint of the step (``task.average_last``) is written before the stop, and ``last.ckpt`` before
    a stop after a validation or an epoch's end. The pipeline puts it after every other checkpoint callback."""

    def __init__(self) -> None:
        self.requested: str | None = None
        self._previous = None
        self._step_before: int | None = None  # the global step as the current batch started
        self.after_checkpoint: str | None = None  # a stop waiting for this step's last.ckpt (a validation is due)
        self._preempt: tuple[signal.Signals, object] | None = None  # submitit's signal and its handler
        self._before_validation: int | None = None  # the step, while its checkpoint before a due validation saves
        self._between_steps = False  # after a step's end (no stop then), until the next batch or a validation starts
        self._lightning_sigterm = None  # Lightning's SIGTERM handler, which ours calls outside that gap
        self._trainer: pl.Trainer | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Installed here, after Lightning's signal connector took its snapshot of every handler (which it puts back
        at its teardown), so the snapshot holds the handler from before the run."""
        self.requested = self.after_checkpoint = None
        # signal handlers live in the main thread only; an ignored SIGINT (a job a script started in the background)
        # stays ignored, as Python leaves it
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        preempt = submitit_signal()
        if preempt is not None:
            self._preempt = (preempt, signal.signal(preempt, self._on_preempt))
        if trainer.world_size == 1 and (preempt is None or preempt != signal.SIGTERM):  # DDP: DistributedSigterm
            self._trainer = trainer
            self._lightning_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum, frame) -> None:
        """One process: a SIGTERM between two steps (after this callback's check at a step's end, before Lightning's
        own: the learning-rate schedulers, the loggers' save, the next batch's loading) stops at the next step's end
        with a checkpoint, as a Ctrl-C does. Lightning's flag set there stopped the run outside a step, the step
        just made lost. Elsewhere (in a step, a validation) Lightning's handler, as before."""
        trainer = self._trainer
        if self._between_steps and trainer is not None and not trainer.validating:  # a validation: Lightning's stop
            self.requested = "SIGTERM"
            return
        if callable(self._lightning_sigterm):
            self._lightning_sigterm(signum, frame)

    def _on_preempt(self, signum, frame) -> None:
        """submitit's time-limit / preemption signal (a job of hydra/launcher=slurm or submitit_local): its own
        handler requeues the job and exits at once, losing the steps since the last checkpoint. Ours notes it; the
        stop saves the checkpoint at the step's end, then calls submitit's handler (:meth:`_stop`)."""
        self.requested = signal.Signals(signum).name
        print(f"\n{self.requested} (the job's time limit or a preemption): stopping after this step with a "
              "checkpoint, then submitit requeues the job", file=sys.stderr, flush=True)

    def _stop(self, trainer: pl.Trainer, name: str, path: Path) -> None:
        """End the run here, ``path`` (the checkpoint to resume from) saved: :class:`RunInterrupted`, after
        submitit's handler where its signal stopped the run (it requeues the job and exits on the first rank; the
        requeued job resumes from ``path`` with ``resume=auto``)."""
        preempt, handler = self._preempt or (None, None)
        self._restore()
        if preempt is not None and name == preempt.name:
            warn_once("%s at step %d: %s saved; submitit requeues the job, which goes on from it with resume=auto "
                      "(without it the requeued job starts afresh)", name, trainer.global_step, path)
            if callable(handler):
                handler(preempt.value, None)  # submitit: requeue and sys.exit (returns on the other ranks)
        raise RunInterrupted(name, trainer.global_step, path)

    def _on_sigint(self, signum, frame) -> None:
        self.requested = "SIGINT"
        if self._previous is not None:  # a second Ctrl-C: KeyboardInterrupt, at once
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
        print("\nCtrl-C: stopping after this step and saving a checkpoint to resume from (Ctrl-C again: stop at "
              "once, nothing saved)", file=sys.stderr, flush=True)

    def _restore(self) -> None:
        self._between_steps = False
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
        if self._lightning_sigterm is not None:
            if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                signal.signal(signal.SIGTERM, self._lightning_sigterm)
            self._lightning_sigterm = None
        self._trainer = None
        if self._preempt is not None:
            signal.signal(*self._preempt)
            self._preempt = None

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch, batch_idx: int) -> None:
        self._between_steps = False
        self._stop_after_checkpoint(trainer)  # a stop put off at an epoch's end (on_validation_end) ends here
        self._step_before = trainer.global_step

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        name = self.requested or ("SIGTERM" if trainer.received_sigterm else None)
        if trainer.world_size > 1:  # every rank takes part, every step: any rank's signal stops them all, each
            # exiting with that signal's status (SIGTERM's where ranks got both)
            import torch

            code = trainer.strategy.reduce(torch.tensor(SIGNAL_NUMBER[name], device=pl_module.device),
                                           reduce_op="max")
            name = {v: k for k, v in SIGNAL_NUMBER.items()}[int(code)]
        if name is None:
            self._between_steps = True
            return
        if self._step_before is not None and trainer.global_step == self._step_before:
            # a batch of a gradient accumulation that made no optimizer step: a checkpoint here would lose the
            # gradients accumulated so far, so the stop waits for the step (Lightning's own SIGTERM stop at this
            # batch's end, with nothing saved, is put off with it)
            self.requested = name
            _clear_sigterm(trainer)
            return
        path = _checkpoints_folder(trainer) / INTERRUPTED_CHECKPOINT
        if _checkpoint_follows(trainer):  # stop once this step's validation and last.ckpt are done
            self.requested, self.after_checkpoint = None, name
            _clear_sigterm(trainer)  # a second SIGTERM during the validation: Lightning's stop there
            # this step saved now too, in case the run is killed during the validation (a cluster's grace period):
            # the steps since the last validation are kept, the validation is not (said when resumed from it)
            self._before_validation = trainer.global_step
            try:
                trainer.save_checkpoint(path)
            finally:
                self._before_validation = None
            warn_once("a validation or an epoch's end follows step %d: stopping once its checkpoint is written (%s "
                      "saved now, in case the run is killed before)", trainer.global_step, path)
            return
        if _epoch_ends(trainer):  # pytorch-lightning 2.6 resumes a checkpoint of an epoch's last batch into that
            self.requested = name  # epoch again, its data order included (the resumed run's weights differed):
            _clear_sigterm(trainer)  # the stop is at the next step's end, mid-epoch
            return
        trainer.save_checkpoint(path)
        _log_this_step(trainer)
        self._stop(trainer, name, path)

    def state_dict(self) -> dict:
        """In the checkpoint saved before a due validation only: that step, so a run resumed from it says that the
        validation is not run (Lightning counts the checkpoint as validated)."""
        return {} if self._before_validation is None else {"before_validation": self._before_validation}

    def load_state_dict(self, state_dict: dict) -> None:
        step = state_dict.get("before_validation")
        if step is not None:
            warn_once("resumed from a checkpoint saved before the validation due after step %d (the run was stopped "
                      "before it ended): that validation is not run, so its point is missing from the curve and the "
                      "best checkpoint is chosen without it", step)

    def _stop_after_checkpoint(self, trainer: pl.Trainer) -> None:
        """The stop a validation or an epoch's end put off, once this step's last.ckpt is written (this callback's
        hooks come after the ModelCheckpoints'), naming that file. Early stopping at this validation ends the
        training here: the run goes on to its test as it would have (a resumed run would not know it had stopped)."""
        name = self.after_checkpoint
        if name is None:
            return
        self.after_checkpoint = None
        if trainer.should_stop and getattr(trainer.fit_loop, "_can_stop_early", True):
            warn_once("the training ends at step %d (early stopping): the run goes on to its test",
                      trainer.global_step)
            return
        last = _last_checkpoint(trainer)
        saved = getattr(last, "_last_global_step_saved", None)
        if saved != trainer.global_step:  # not expected: the ModelCheckpoints save at every validation
            warn_once("no last.ckpt was written after step %d; the run's last checkpoint is at step %s",
                      trainer.global_step, saved)
        path = Path(last.best_model_path) if last is not None and last.best_model_path else \
            _checkpoints_folder(trainer) / "last.ckpt"
        self._stop(trainer, name, path)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A validation within an epoch: stop here. At an epoch's end the stop waits for the next batch's start (or
        the training's end): Lightning logs the epoch's metrics (``train/loss_epoch``) after these hooks, and a
        stop raised in them lost that epoch's point in every logger; nothing is trained or saved in between."""
        if not trainer.sanity_checking and trainer.state.fn == "fit" and self._last_written(trainer) and \
                not _epoch_ends(trainer):
            self._stop_after_checkpoint(trainer)

    def _last_written(self, trainer: pl.Trainer) -> bool:
        last = _last_checkpoint(trainer)
        return self.after_checkpoint is not None and getattr(last, "_last_global_step_saved", None) == \
            trainer.global_step

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._restore()
        self._stop_after_checkpoint(trainer)
        if self.requested:  # put off past an epoch's end, which was the training's last: stop before the test
            path = _checkpoints_folder(trainer) / INTERRUPTED_CHECKPOINT
            trainer.save_checkpoint(path)
            self._stop(trainer, self.requested, path)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._restore()


def _log_this_step(trainer: pl.Trainer) -> None:
    """This step's metrics to the loggers, as Lightning sends them after the hooks a stop raises in (they were lost)."""
    if (connector := getattr(trainer, "_logger_connector", None)) is not None:
        connector.on_batch_end()
        connector.update_train_step_metrics()


def submitit_signal() -> signal.Signals | None:
    """submitit's preemption signal (``SUBMITIT_PREEMPT_SIGNAL``, USR2 by default) where submitit's own handler is
    installed for it (this process is a submitit job: ``hydra/launcher=slurm``, ``submitit_local``); else None."""
    try:
        from submitit.core.job_environment import JobEnvironment
    except ImportError:  # the [launchers] extra is not installed: no submitit job
        return None
    try:
        preempt = signal.Signals(JobEnvironment._usr_sig())
    except (RuntimeError, ValueError):  # an unknown SUBMITIT_PREEMPT_SIGNAL: submitit itself fails on it
        return None
    owner = getattr(signal.getsignal(preempt), "__self__", None)
    return preempt if type(owner).__module__.startswith("submitit") else None


def _last_checkpoint(trainer: pl.Trainer) -> LastCheckpoint | None:
    return next((c for c in trainer.callbacks if isinstance(c, LastCheckpoint)), None)


def _checkpoints_folder(trainer: pl.Trainer) -> Path:
    last = _last_checkpoint(trainer)
    return Path(last.dirpath) if last is not None and last.dirpath else Path(trainer.default_root_dir) / "checkpoints"


def _clear_sigterm(trainer: pl.Trainer) -> None:
    """A SIGTERM acted on (its stop put off): Lightning's flag and DistributedSigterm's note cleared, so neither
    stops the run before the stop comes; a later SIGTERM sets them again."""
    if hasattr(trainer, "_signal_connector"):
        trainer._signal_connector.received_sigterm = False
    for callback in trainer.callbacks:
        if isinstance(callback, DistributedSigterm):
            callback.received = False


def _epoch_ends(trainer: pl.Trainer) -> bool:
    loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    return bool(getattr(getattr(loop, "batch_progress", None), "is_last_batch", False))


def _checkpoint_follows(trainer: pl.Trainer) -> bool:
    """Whether last.ckpt is written after the current training batch: a validation is due (Lightning's own test),
    or the epoch ends where the checkpoints are saved at epoch ends (a run with no validation)."""
    last = _last_checkpoint(trainer)
    loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    if last is None or loop is None:
        return False
    try:  # Lightning's own private tests (pytorch-lightning 2.6): where they are gone, the stop is at the step
        if loop._should_check_val_fx(trainer.fit_loop._data_fetcher):
            return True
        return bool(loop.batch_progress.is_last_batch and last._should_save_on_train_epoch_end(trainer))
    except AttributeError:
        return False


def warn_once(message: str, *args) -> None:
    """A warning from rank 0 only: every DDP process runs the pipeline, and a stop's message is the same on each."""
    if pl.utilities.rank_zero_only.rank == 0:
        log.warning(message, *args)


def stopped_outside_a_step(cfg: DictConfig, signal_name: str) -> None:
    """A Ctrl-C or SIGTERM outside a training step (data loading, a validation, the test; a second Ctrl-C): no
    checkpoint saved then; say which one to resume from, then exit 130 or 143 (which stops a sweep too)."""
    from coda_exp.resume_points import resume_checkpoint

    try:  # last.ckpt, or the best one where it was cut short; never in the way of the stop itself
        point = resume_checkpoint(Path(cfg.paths.output_dir))
    except Exception:  # noqa: BLE001
        point = None
    last = None if point is None else point[0]
    then = f"resume from its last checkpoint, {last}" if last is not None else "it has none to resume from"
    warn_once("run stopped by %s outside a training step, with no checkpoint saved then: %s",
              "Ctrl-C" if signal_name == "SIGINT" else signal_name, then)
    if pl.utilities.rank_zero_only.rank == 0:  # a sweep's job: listed as interrupted in the sweep's summary
        overrides = _job_overrides()
        job_interrupted(signal_name, EXIT_STATUS[signal_name], None, None if last is None else str(last),
                        _resume_command(overrides, last))
    raise SystemExit(EXIT_STATUS[signal_name]) from None


def _job_overrides() -> list[str]:
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def _resume_command(overrides: list[str], checkpoint: Path | None) -> str:
    """The command that resumes a run of ``overrides`` from ``checkpoint`` (None: the run again); ``resume=auto``
    finds the checkpoint itself: the same command again."""
    from hydra.core.hydra_config import HydraConfig

    auto = "resume=auto" in overrides
    own = typed_again(HydraConfig.get().overrides.get("hydra")) if HydraConfig.initialized() else []  # searchpath
    return " ".join([program(), *own, *(shlex.quote(o) for o in overrides if not o.startswith("ckpt_path=")),
                     *([] if auto or checkpoint is None else [shlex.quote(f"ckpt_path={checkpoint}")])])


def stopped(stop: RunInterrupted, overrides: list[str]) -> None:
    """A run a signal stopped: how to resume it, then exit 130 (Ctrl-C) or 143 (SIGTERM), which stops a sweep too. No
    record: it would be a partial result beside the resumed run's whole one (whose curve includes these steps)."""
    from hydra.core.hydra_config import HydraConfig

    from coda_exp import sweep_workers
    from coda_exp.environment import in_sweep

    again = _resume_command(overrides, stop.checkpoint)
    sweep = in_sweep()
    then = ("" if not sweep else "; the sweep stops here, its later jobs not run (its summary lists this job)"
            if sweep_workers.sweep_stopping(stop.signal_name, stop_note(HydraConfig.get().sweep.dir)) else
            "; this job alone stops (a signal to its worker process): the sweep's other jobs go on (its summary "
            "lists this one)")
    warn_once("run interrupted (%s) at step %d, its checkpoint saved (no test, no record): %s; resume with: %s%s",
              stop.signal_name, stop.step, stop.checkpoint, again, then)
    if sweep and pl.utilities.rank_zero_only.rank == 0:
        job_interrupted(stop.signal_name, EXIT_STATUS.get(stop.signal_name, 1), stop.step, str(stop.checkpoint),
                        again)
    raise SystemExit(EXIT_STATUS.get(stop.signal_name, 1))
