"""Training checkpoints written atomically beside their target, and a full disk said in one message.

Lightning writes a checkpoint through an fsspec transaction whose temporary file lies in the system's temporary
folder, then moves it over the target. Where the run folder is on another file system (a cluster's shared disk,
``/tmp`` on the node), that move is a copy into the target: a run killed during it (a time limit's SIGKILL, the
OOM killer) or a full disk leaves ``last.ckpt`` cut short, with the previous one already overwritten, and the run
has nothing left to resume from; a small ``/tmp`` refuses checkpoints the run's own disk has room for.
:class:`AtomicCheckpointIO` writes each checkpoint through :func:`coda_exp.io.atomic_write` instead (a temporary
file in the checkpoint's own folder, fsynced, renamed over it), so a checkpoint is the old one or the complete new
one. Remote paths (``s3://``...) keep Lightning's own writing.

A file of the run folder that cannot be written during the run (a full disk, a quota; the folder made read-only or
its permissions taken away: a CSV logger's ``metrics.csv``, a checkpoint) ends the run with one message naming the
file and the checkpoint it resumes from (:func:`write_failed`), not a traceback; the checkpoints written so far are
whole (see above) and stay.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

from coda_exp.errors import cause_of, full_disk, what_to_free
from coda_exp.io import atomic_write
from coda_exp.run_folder import OutputDirError


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's ``TorchCheckpointIO`` whose local checkpoints are written by :func:`coda_exp.io.atomic_write`."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None or "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        import torch

        try:
            with atomic_write(path, "wb") as f:
                torch.save(checkpoint, f)
        except RuntimeError as err:  # torch's writer reports a failed write (a full disk) as a RuntimeError
            if cause_of(err, KeyboardInterrupt) is not None:  # a second Ctrl-C during the write ("unexpected
                # pos"): the stop at once it asked for (the temporary file is gone, the target untouched)
                raise KeyboardInterrupt from None
            failed = cause_of(err, OSError)
            if failed is None:
                raise
            raise OSError(failed.errno, failed.strerror, str(path)) from err
        return None


def disk_full(err: BaseException, checkpoints: Path) -> OutputDirError | None:
    """A user's error for an OSError of a full disk or quota (one message naming the file, what to do and the
    checkpoint to resume from), else None."""
    err = full_disk(err)
    if err is None:
        return None
    last = Path(checkpoints) / "last.ckpt"
    resume = f"then resume with ckpt_path={last}" if last.is_file() else "then run it again (it saved no checkpoint)"
    return OutputDirError(f"{err.strerror or 'no space left'} writing {err.filename or 'a file'}: {what_to_free(err)} "
                          "(or write elsewhere: hydra.run.dir=..., paths.results_dir=..., paths.cache_dir=...), "
                          f"{resume}")


NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)  # a read-only file system, permissions taken away


def write_failed(err: BaseException, folder: Path) -> OutputDirError | None:
    """A user's error for a file of the run folder ``folder`` that could not be written: a full disk or quota
    (:func:`disk_full`, any file), or (:data:`NOT_WRITABLE`) a file under ``folder`` on a read-only file system or
    without permission; one message naming the file and what was saved. None for any other error."""
    folder = Path(folder)
    full = disk_full(err, folder / "checkpoints")
    if full is not None:
        return full
    failed = cause_of(err, OSError)
    if failed is None or failed.errno not in NOT_WRITABLE or not failed.filename:
        return None
    path = Path(str(failed.filename)).absolute()
    if folder.absolute() not in path.parents:
        return None
    last = _last_checkpoint(folder)
    if last is not None:
        saved = (f"the checkpoints written so far are kept: make the folder writable again (or copy it elsewhere), "
                 f"then resume with ckpt_path={last}")
    else:
        saved = "it saved no checkpoint yet: make the folder writable again, then run it again"
    return OutputDirError(f"{failed.strerror or 'cannot write'} writing {path}: the run folder {folder} cannot be "
                          f"written any more; {saved}")


def _last_checkpoint(folder: Path) -> str | None:
    """``<checkpoint> (step N)``: the run's latest checkpoint that can be read (``last.ckpt`` as a rule; the best one
    where a kill cut the first ``last.ckpt`` short: ``resume_points``), else None."""
    from coda_exp.resume_points import resume_checkpoint

    point = resume_checkpoint(Path(folder))
    return None if point is None else f"{point[0]} (step {point[1]})"


PEER_LOST = ("gloo", "NCCL", "Connection reset by peer", "Connection closed by peer", "Broken pipe")


def peer_lost(err: BaseException, folder: Path) -> str | None:
    """For an error of a distributed run's communication (another rank died: killed, out of memory), what was
    kept and how to resume (its ``last.ckpt`` survives); None for any other error."""
    import torch.distributed as dist

    backend = getattr(dist, "DistBackendError", ())
    if not (isinstance(err, backend) or (isinstance(err, RuntimeError) and any(s in str(err) for s in PEER_LOST))):
        return None
    last = _last_checkpoint(folder)
    kept = (f"the checkpoints written so far are kept: resume with ckpt_path={last}" if last is not None
            else "it saved no checkpoint yet: run it again")
    return (f"a process of this distributed run lost its peers ({type(err).__name__}): another rank stopped (killed, "
            f"out of memory? its log says why); {kept}")
