"""What a resumed run no longer needs, removed at the moment it stops being needed (``docs/running.md``):

- the ``checkpoints/interrupted.ckpt`` an earlier process of the run left when a Ctrl-C or SIGTERM stopped it
  (``coda_exp.stops``): once this process has written the run's ``last.ckpt`` at a later step (the one ``resume=auto``
  and ``coda-exp runs`` would take), or at the latest once the run ended and wrote its record
  (:class:`StaleInterrupted`). Until then it may be the run's only checkpoint to resume from, so a run stopped again
  before its next save still has it; a new stop writes the file again, and that one is kept. Only the run's own
  folder is looked at (a run trained on from a finished run's checkpoint, in a new folder, never touches that
  run's files), only by global rank 0;
- the temporary files of checkpoint writes a kill cut short (``checkpoints/.last.ckpt.*.tmp``), when it resumes;
- the best checkpoint it resumed from (where ``last.ckpt`` was cut short), once a later one replaced it among the
  best (:class:`ResumedFromBest`);
- the job's own Hydra folder, where a single run went on in its checkpoint's folder or (``resume=auto``) had
  finished already there (:func:`leave_hydra_folder`).

Its own module: ``stops.py`` (which writes the file) and ``pipeline.py`` are at the size limit.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import pytorch_lightning as pl

from coda_exp.checkpoint_avg import CheckpointError, global_step
from coda_exp.environment import in_sweep
from coda_exp.run_folder import remove_job_folder
from coda_exp.stops import INTERRUPTED_CHECKPOINT

log = logging.getLogger(__name__)

LAST = "last.ckpt"  # the checkpoint every validation rewrites (callbacks.LastCheckpoint), which resume=auto reads


def _identity(path: Path) -> tuple[int, int, int] | None:
    """(inode, modification time, size) of ``path``, None where there is no such file: a file written again (an
    atomic write replaces it) is another file."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class StaleInterrupted(pl.Callback):
    """A resumed run's ``<run>/checkpoints/interrupted.ckpt`` as this process found it before training (an earlier
    process's stop), removed once stale (module docstring), with one INFO line. Checked at each training batch's
    end, at the training's end and on an exception (``last.ckpt`` read only when it was written again), and by the
    pipeline once the run's record is written (:meth:`remove`). A file that cannot be read is left as it is
    (``resume=auto`` names it)."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        from lightning_fabric.utilities.rank_zero import rank_zero_only

        folder = Path(run_dir) / "checkpoints"
        self.path, self.last = folder / INTERRUPTED_CHECKPOINT, folder / LAST
        self.step: int | None = None  # the stale file's step; None: nothing (left) to remove
        self._file = _identity(self.path)
        self._last_seen = _identity(self.last)  # the earlier process's last.ckpt: not this run's later save
        if getattr(rank_zero_only, "rank", 0) != 0:
            return
        for tmp in folder.glob(".*.ckpt.*.tmp"):  # io.atomic_write's file of a write a kill cut short (the folder is
            with contextlib.suppress(OSError):  # this run's, claimed: no other process writes there)
                tmp.unlink()
                log.info("removed %s: a checkpoint write an earlier process of this run did not finish", tmp)
        if self._file is None:
            return
        with contextlib.suppress(CheckpointError, OSError):  # unreadable: left as it is
            self.step = global_step(self.path)

    def check(self) -> None:
        """Remove the stale file where this process has written ``last.ckpt`` at a later step than its step."""
        seen = _identity(self.last)
        if self.step is None or seen is None or seen == self._last_seen:
            return
        self._last_seen = seen
        try:
            step = global_step(self.last)
        except (CheckpointError, OSError):  # cut short by a kill during its write: not one to resume from
            return
        if step > self.step:
            self.remove(f"this run saved {self.last.name} at step {step} since")

    def remove(self, why: str) -> None:
        """Remove the stale file (if it is still the one found before training), saying ``why``."""
        step, self.step = self.step, None
        if step is None or _identity(self.path) != self._file:  # gone, or a new stop's: kept
            return
        try:
            self.path.unlink()
        except OSError as err:
            log.warning("%s (an earlier process's stop at step %d) could not be removed: %s", self.path, step,
                        err.strerror or err)
            return
        log.info("removed %s (where an earlier process of this run stopped, at step %d): %s", self.path, step, why)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        self.check()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.check()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.check()


class ResumedFromBest(pl.Callback):
    """The checkpoint a run resumed from, where it is one of the run's own best checkpoints (``resume=auto`` takes
    the best one where a kill cut ``last.ckpt`` short: ``coda_exp.resume_points``), removed at the training's end
    once no ModelCheckpoint keeps it (a later validation did better): Lightning never removes the file a run
    resumed from, so it stayed beside the uninterrupted run's files. Global rank 0 only; one INFO line."""

    def __init__(self, ckpt_path: str | os.PathLike, run_dir: str | os.PathLike) -> None:
        self.path = Path(ckpt_path).resolve()
        self.own = (Path(run_dir) / "checkpoints").resolve()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.global_rank != 0 or self.path.parent != self.own or self.path.name in (LAST, INTERRUPTED_CHECKPOINT):
            return
        kept = {Path(f).resolve() for c in trainer.checkpoint_callbacks if isinstance(c, pl.callbacks.ModelCheckpoint)
                for f in [*c.best_k_models, c.best_model_path, c.last_model_path] if f}
        if self.path in kept or not self.path.is_file():
            return
        try:
            self.path.unlink()
        except OSError as err:
            log.warning("%s (the checkpoint this run resumed from) could not be removed: %s", self.path,
                        err.strerror or err)
            return
        log.info("removed %s: the checkpoint this run resumed from, no longer among its best", self.path)


def leave_hydra_folder(folder: str | os.PathLike, outcome: str) -> None:
    """A single run that went on in another folder (``run_folder.RESUMED_IN``, ``FINISHED_IN``): its own Hydra
    ``folder``, which holds Hydra's files and this job's log only, is removed (``run_folder.remove_job_folder``) and
    a line says so, ``outcome`` after it. A sweep job's stays: the sweep's summary lists it."""
    if not in_sweep() and remove_job_folder(folder, with_log=True):
        log.info("removed this job's Hydra folder %s (Hydra's files and this job's log only): %s", folder, outcome)
