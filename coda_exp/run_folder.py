"""A run's output folder: one per run, never shared; a resumed run continues in its checkpoint's folder; every
folder a run will write to is checked writable before the first step.

- Ownership: a run claims its folder by creating ``.run_owner`` exclusively (``O_CREAT | O_EXCL``: atomic, so two
  processes can never both succeed) with its host, process id and the process's start time (a pid reused by an
  unrelated process later is not taken for the owner). A fresh run that finds the folder claimed (two
  runs started in the same instant, or ``hydra.run.dir`` pointed at an old run) moves to ``<folder>-2``,
  ``<folder>-3``, ... and says so; it never writes into another run's checkpoints.
- Resume: ``ckpt_path=<run>/checkpoints/last.ckpt`` continues in ``<run>``, so ModelCheckpoint finds its own
  dirpath and keeps its best-model state (with a new dirpath Lightning drops it: "dirpath has changed"). The
  claim of the killed run is taken over, unless its process is still alive on this host. The job's own Hydra
  folder, left with Hydra's files and its log, goes for a single run (:func:`remove_job_folder`); the command's
  overrides are kept beside the run's resumed config (``coda_exp.resolved_config.save_resolved_config``). A checkpoint of a run
  that finished (its record says so) is trained on from in a new folder, this job's own: a finished run's folder
  and files are never written again (``coda_exp.auto_resume.check_not_finished``).
- Under DDP only global rank 0 claims (the other ranks write into rank 0's folder).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path

from coda_exp.errors import UserError

log = logging.getLogger(__name__)

OWNER = ".run_owner"
RESOLVED_CONFIG = "config_resolved.yaml"


class OutputDirError(UserError, OSError):
    """An output folder that cannot be used: not writable, or held by a live run."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot: ``/proc/<pid>/stat``'s field 22), None where unknown (no
    such process, no ``/proc``): with the pid it names one process, where a pid alone may be reused by another."""
    try:
        stat = Path(f"/proc/{int(pid)}/stat").read_text(encoding="utf-8", errors="replace")
        return int(stat[stat.rindex(")") + 2:].split()[19])  # the fields after "(comm)" start at field 3
    except (OSError, ValueError, IndexError):
        return None


def _owner(folder: Path) -> dict:
    try:
        return json.loads((folder / OWNER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _reason(err: OSError) -> str:
    return err.strerror or errno.errorcode.get(err.errno or 0, type(err).__name__)


def _not_writable(folder: Path, err: OSError, resume: bool) -> OutputDirError:
    what = ("make it writable again (or copy the run folder elsewhere and resume from the copy's checkpoint)"
            if resume else "fix the permissions or point paths.log_dir (or hydra.run.dir) elsewhere")
    return OutputDirError(f"{folder}: the run folder cannot be written ({_reason(err)}): {what}")


def _try_claim(folder: Path, resume: bool = False) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise _not_writable(folder, err, resume) from None
    try:
        fd = os.open(folder / OWNER, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    except OSError as err:  # a folder that is not writable (any more: a resumed run's)
        raise _not_writable(folder, err, resume) from None
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        started = _start_time(os.getpid())
        json.dump({"host": socket.gethostname(), "pid": os.getpid(),
                   **({} if started is None else {"started": started})}, fh)
    return True


def claim(folder: str | os.PathLike, resume: bool = False, max_tries: int = 1000, quiet: bool = False) -> Path:
    """Claim ``folder`` for this process and return the folder this run writes to (see the module docstring).
    ``quiet``: say nothing when moving to another folder (the caller says it, once its log is there)."""
    folder = Path(folder)
    if resume:
        with _resume_lock(folder):  # two resumes at once: the second sees the first's claim (it removed it before)
            owner = live_owner(folder)
            if owner:
                raise OutputDirError(f"{folder}: the run folder of ckpt_path is in use by process {owner['pid']} "
                                     "(still running); wait for it or stop it before resuming")
            try:
                (folder / OWNER).unlink(missing_ok=True)
            except OSError as err:
                raise _not_writable(folder, err, resume) from None
            if not _try_claim(folder, resume=True):
                raise OutputDirError(f"{folder}: another process claimed the run folder while this run resumed")
        return folder
    for k in range(1, max_tries + 1):
        candidate = folder if k == 1 else folder.with_name(f"{folder.name}-{k}")
        if _try_claim(candidate):
            if k > 1 and not quiet:
                log.warning("output folder %s belongs to another run (%s); this run writes to %s", folder,
                            _owner(folder) or "unknown owner", candidate)
            return candidate
    raise OutputDirError(f"{folder}: {max_tries} folders of that name are taken; set hydra.run.dir")


@contextmanager
def _resume_lock(folder: Path):
    """An exclusive ``flock`` on ``<folder>/.run_owner.lock`` (released when the process ends, however it ends) while
    a resume replaces the folder's ended owner; where there is no ``fcntl`` or the file cannot be made, no lock."""
    try:
        import fcntl

        handle = open(folder / f"{OWNER}.lock", "a")  # noqa: SIM115 - held for the with block
    except (ImportError, OSError):
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def live_owner(folder: str | os.PathLike) -> dict:
    """The owner of ``folder`` (host, pid) where it is another process, alive on this host; {} otherwise (no owner,
    a process that ended, another host, which this host cannot see, or a process that started at another time than
    the owner file says: its pid reused by an unrelated process; an owner file without that time, written before
    it was recorded, is judged by its pid alone)."""
    owner = _owner(Path(folder))
    if owner.get("host") != socket.gethostname() or owner.get("pid") in (None, os.getpid()):
        return {}
    try:
        pid = int(owner["pid"])
    except (TypeError, ValueError):
        return {}
    if not _pid_alive(pid):
        return {}
    started = owner.get("started")
    if started is not None and (now := _start_time(pid)) is not None and now != started:
        return {}
    return owner


def owner_of(folder: str | os.PathLike) -> dict:
    """Who holds ``folder`` (host, pid), as its owner file says ({} when unknown)."""
    return _owner(Path(folder))


def is_run_folder(folder: Path) -> bool:
    """Whether ``folder`` is a run's: its ``config_resolved.yaml`` or, where that was deleted, the owner file every
    run leaves."""
    return (folder / RESOLVED_CONFIG).is_file() or (folder / OWNER).is_file()


def resume_folder(ckpt_path: str | os.PathLike) -> Path | None:
    """The run folder a checkpoint belongs to (``<run>/checkpoints/[periodic/]x.ckpt`` where ``<run>`` is a run's:
    :func:`is_run_folder`), or None for a checkpoint outside a run folder."""
    for parent in list(Path(ckpt_path).resolve().parents)[:3]:
        if parent.name == "checkpoints" and is_run_folder(parent.parent):
            return parent.parent
    return None


def check_outputs(cfg, folder: Path, claimed: bool = False) -> None:
    """``check_writable`` for every folder a run or an evaluation writes: its own, the results' ``runs/`` and
    ``predictions/`` as the config asks, the data's cache. ``claimed``: ``folder`` was just claimed beside its Hydra
    folder (``<folder>-2`` beside a taken one): it holds only the claim, and goes where a check fails (:func:`refused`)."""
    writes = {"paths.output_dir": folder}
    if cfg.get("save_record", True):
        writes["paths.results_dir (runs/)"] = Path(cfg.paths.results_dir) / "runs"
    if cfg.get("save_predictions", True) and cfg.get("save_record", True):  # else into the run's own folder
        writes["paths.results_dir (predictions/)"] = Path(cfg.paths.results_dir) / "predictions"
    if (cfg.get("data") or {}).get("cache_dir"):  # parsed datasets, vocabularies
        writes["data.cache_dir"] = Path(cfg.data.cache_dir)
    try:
        check_writable(writes)
    except OutputDirError as err:
        if claimed:
            refused(folder, err)
        raise


def check_writable(folders: dict[str, str | os.PathLike]) -> None:
    """Create each folder and write a probe file in it; one :class:`OutputDirError` listing every config key whose
    folder cannot be written (so a run fails before the first step, not after its last)."""
    bad = []
    for key, folder in folders.items():
        folder = Path(folder)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-probe-"):
                pass
        except OSError as err:
            above = next((p for p in (folder, *folder.parents) if p.exists()), None)
            if above is not None and not above.is_dir():  # mkdir's "File exists" said what it means
                bad.append(f"{key}: {folder} is a file, not a folder" if above == folder
                           else f"{key}: {folder} cannot be made: {above} is a file, not a folder")
            else:
                bad.append(f"{key}: {folder} is not writable ({_reason(err)})")
    if bad:
        raise OutputDirError("output folders not writable; fix the permissions or point the key elsewhere:\n  "
                             + "\n  ".join(bad))


def check_creatable(key: str, folder: str | os.PathLike) -> None:
    """Before Hydra makes a job's folder (``key``: ``hydra.run.dir`` or ``hydra.sweep.dir``): one
    :class:`OutputDirError` naming it where it cannot be made, instead of Hydra's traceback. Nothing is created: a
    probe file is written in its nearest existing folder (or in it, where it exists)."""
    folder = Path(folder)
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(existing))
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".write-probe-"):
            pass
    except OSError as err:
        why = "is a file, not a folder" if err.errno == errno.ENOTDIR else f"is not writable ({_reason(err)})"
        raise OutputDirError(f"{key}: the run folder {folder} cannot be created: {existing} {why}; point "
                             f"paths.log_dir (or {key}) elsewhere, or fix its permissions") from None


FALLBACK_RECORD = "run_record.json"  # a run's record in its own folder, where its results folder cannot be written
RUN_ENDED = "run ended:"  # the line a run that ended (a record written or not) logs last: coda-exp runs reads it
# what a job logs when its run lies in another folder: the run resumed in its checkpoint's folder, or (resume=auto) it
# had finished already there and nothing ran. A single run's own Hydra folder then goes (remove_job_folder); a sweep
# job's (listed in the sweep's summary), a DDP run's and an older run's keep only their train.log: coda-exp runs reads
# these lines there, such a folder is no failed run.
RESUMED_IN = "this job resumes its run in"  # + " <folder> (its Hydra folder <folder> keeps only this log)"
FINISHED_IN = "this run finished already in"  # + " <folder> (record <file>): nothing to run"
REFUSED = "run refused before it started:"  # + the user's error: coda-exp runs lists such a folder as refused
UNTRAINED = "_coda_exp_untrained"  # set on a fresh run's user error before its first step: its folder goes (cli)
HYDRA_FILES = {"config.yaml", "hydra.yaml", "overrides.yaml"}  # what Hydra writes in a job's .hydra/ before it runs


def _logs_into(folder: Path) -> list[logging.FileHandler]:
    """The root logger's file handlers that write into ``folder`` (Hydra's ``train.log``)."""
    return [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)
            and Path(h.baseFilename).resolve().parent == folder.resolve()]


def remove_job_folder(folder: str | os.PathLike, with_log: bool = False, started: bool = False) -> bool:
    """Remove a single run's Hydra folder ``folder`` where it holds nothing but what Hydra wrote before the job
    (``.hydra/``'s files), its ``train.log`` (an empty one, unless ``with_log``: a job whose run went on in another
    folder, whose log has every line of this one) and this process's claim, with its ``runs/<task>-<model>/`` (an
    eval's ``evals/<task>-<model>/``) where that is left empty; the root logger's file handlers that write into it
    are closed first. ``started``: a run that failed on a user's mistake before its first step, which wrote its log
    and ``config_resolved.yaml`` too (no checkpoint, no logger's file: anything more and the folder stays). True where
    it went; the ranks of a DDP run other than 0 leave it as it is."""
    from lightning_fabric.utilities.rank_zero import (
        rank_zero_only,  # RANK, LOCAL_RANK, SLURM_PROCID, ... as a run
    )

    folder = Path(folder)
    if getattr(rank_zero_only, "rank", 0) != 0 or not folder.is_dir():
        return False
    root = logging.getLogger()
    logs = _logs_into(folder)
    for h in logs:
        h.flush()
    try:
        names = {p.name for p in folder.iterdir()}
        hydra = {p.name for p in (folder / ".hydra").iterdir()} if ".hydra" in names else set()
        ours = OWNER not in names or _owner(folder).get("pid") == os.getpid()
        log_kept = with_log or started or "train.log" not in names or (folder / "train.log").stat().st_size == 0
        written = {".hydra", "train.log", OWNER} | ({RESOLVED_CONFIG} if started else set())
        if not (names <= written and hydra <= HYDRA_FILES and ours and log_kept):
            return False
        for h in logs:
            root.removeHandler(h)
            h.close()
        for name in hydra:
            (folder / ".hydra" / name).unlink()
        if ".hydra" in names:
            (folder / ".hydra").rmdir()
        for name in names - {".hydra"}:
            (folder / name).unlink()
        folder.rmdir()
        if folder.parent.parent.name in ("runs", "evals") and not any(folder.parent.iterdir()):  # <task>-<model>/
            folder.parent.rmdir()
    except OSError:  # a folder that cannot be read or emptied: it stays
        return False
    return True


def refused(folder: str | os.PathLike, err: BaseException) -> None:
    """A single run refused before it started (``err``: a user's error, printed on the console): its Hydra folder is
    removed where it holds nothing but what Hydra wrote before the job (:func:`remove_job_folder`: an empty
    ``train.log``); else, unless it is another run's folder, ``err`` is written into its ``train.log``, where
    ``coda-exp runs`` shows it (state ``refused``). The ranks of a DDP run other than 0 leave it as it is."""
    from lightning_fabric.utilities.rank_zero import rank_zero_only

    folder = Path(folder)
    if getattr(rank_zero_only, "rank", 0) != 0 or not folder.is_dir() or remove_job_folder(folder):
        return
    try:
        names = {p.name for p in folder.iterdir()}
        if RESOLVED_CONFIG in names or (OWNER in names and _owner(folder).get("pid") != os.getpid()):
            return  # another run's folder (hydra.run.dir=<it>): its log as it was
    except OSError:  # a folder that cannot be read: it stays, with the error in its log
        pass
    # to this folder's log files only, not the console (which has the entry point's `error:` line): a refusal can come
    # before console.configure, so console.file_only's filter may not be on the console's handler yet
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, "%s %s", (REFUSED, err), None)
    for h in _logs_into(folder):
        if logging.ERROR >= h.level:
            h.handle(record)


class LogFile(logging.FileHandler):
    """The run's ``train.log`` (Hydra's job log file, ``configs/hydra/default.yaml``, and :func:`log_file`'s): where a
    line cannot be written (a full disk, a quota), one line on the console says so and the file's lines stop there,
    instead of Python's "--- Logging error ---" traceback for every line dropped; the console goes on."""

    failed = False

    def emit(self, record: logging.LogRecord) -> None:
        if self.failed:
            return
        try:
            super().emit(record)
        except OSError:  # the file (re)opened on a read-only or full disk: FileHandler.emit lets that one through
            self.handleError(record)

    def handleError(self, record: logging.LogRecord) -> None:
        if self.failed:
            return
        self.failed = True
        import sys

        err = sys.exc_info()[1]
        reason = getattr(err, "strerror", None) or err or "unknown error"
        print(f"log file {self.baseFilename}: cannot write ({reason}); its lines stop here, the console goes on",
              file=sys.stderr, flush=True)


@contextmanager
def log_file(folder: Path | None, name: str = "train.log", leave: Path | None = None):
    """While the block runs, also log to ``<folder>/<name>`` (appending; Hydra's format): the resumed or relocated
    run's log lies beside its checkpoints. ``folder=None``: nothing added. ``leave``: a folder whose log files the
    root logger's file handlers (Hydra's ``train.log``) stop writing to meanwhile: a run relocated away from a
    folder another run holds writes nothing into that run's log."""
    root = logging.getLogger()
    parked = []
    if leave is not None:
        leave = Path(leave).resolve()
        parked = [h for h in root.handlers if isinstance(h, logging.FileHandler)
                  and Path(h.baseFilename).resolve().parent == leave]
        for h in parked:
            root.removeHandler(h)
    handler = None
    if folder is not None:
        handler = LogFile(folder / name, mode="a", encoding="utf-8")
        handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
        root.addHandler(handler)
    try:
        yield
    finally:
        if handler is not None:
            root.removeHandler(handler)
            handler.close()
        for h in parked:
            root.addHandler(h)
