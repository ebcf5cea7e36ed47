"""A sweep whose jobs run in worker processes (``hydra/launcher=joblib``: joblib's loky workers), stopped by a signal:
every running job stops on its own terms (``coda_exp.stops``: at its step's end with ``interrupted.ckpt``, or at once
outside a step) and the sweep lists them all (``coda_exp.hydra_callbacks``). ``docs/running.md`` says it for users.

Joblib ends a parallel call at its first task's error, and loky then kills every other worker at once (SIGKILL):

- a job a signal stopped ended with a ``SystemExit`` (130, 143), which Hydra's ``run_job`` lets through to joblib
  as the task's error: the first job to stop (signalled in a validation or while its data loaded, it stops at once)
  killed the others before their step's end and their checkpoint, and the summary listed it alone. Such a job ends
  with ``hydra_callbacks.JobStopped`` now, an ``Exception``: Hydra's ``run_job`` returns it as the job's outcome,
  joblib waits for the other jobs, and ``JobReport`` keeps the outcome the stop wrote (``coda_exp.cli.run_job``);
- a worker with no job (more workers than jobs left, or ``n_jobs`` beyond the sweep's size: the launcher's default
  is every CPU) died of a Ctrl-C (a ``KeyboardInterrupt`` in loky's wait for a task) or a SIGTERM, and a dead
  worker is a broken pool to loky: the same kill. The workers start with an initializer (a joblib backend's own
  argument; :func:`use_quiet_workers` registers the ``loky`` backend with it for the sweep) that ignores both
  signals between jobs, and until it has run both are blocked (a worker signalled in its start-up died of it); a
  job has the process's own handlers while it runs (:func:`job_signals`), and a SIGTERM before its training's
  handler is in place (its checks, its data loading) stops it there as one in a validation does
  (:func:`_sigterm_before_training`), where the default handler ended the worker.

The main process takes the first Ctrl-C as the jobs' own and sends a SIGTERM it gets alone (a scheduler's, ``kill``)
on to the workers (:func:`stop_jobs_first`); either is noted in the sweep's folder (``.jobs/stopped``), and a job
that would start after it (a worker that was free, or freed by a job's end) does not start, as the basic launcher
would not have started it: ``resume=auto`` runs it. A signal to one worker alone stops that job alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

_job_handlers: tuple | None = None  # this worker's SIGINT and SIGTERM handlers for a job (quiet_between_jobs)


def in_workers(config) -> bool:
    """Whether a sweep of ``config`` runs its jobs in worker processes: the joblib launcher with more than one
    worker (with one, joblib runs them in this process)."""
    from omegaconf import OmegaConf

    if "joblib" not in str(OmegaConf.select(config, "hydra.launcher._target_", default="")):
        return False
    from joblib import effective_n_jobs

    return effective_n_jobs(OmegaConf.select(config, "hydra.launcher.n_jobs", default=-1)) != 1


def stop_jobs_first(note: Path):
    """The main process's handlers while the jobs run in workers: the first Ctrl-C is the jobs' own (each stops after
    its step with a checkpoint, ``coda_exp.stops``), which this process waits for, then lists them; it used to stop
    the workers at once, a job killed before its checkpoint and no summary. Ctrl-C again: at once. A SIGTERM to this
    process alone (a scheduler's, ``kill``) is sent on to the workers, the same stop: it ended this process at once,
    the workers running on without it and holding their run folders against ``resume=auto``. Either is noted in
    the file ``note`` (no job starts after it, :func:`stopped`). Returns the handlers before (restored when the
    sweep ends); None where this is not the main thread (Ctrl-C as before). An ignored Ctrl-C (a sweep a script
    started in the background) stays ignored, in the workers too."""
    previous, term = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with contextlib.suppress(OSError):  # an earlier sweep's note (hydra.sweep.dir=<the same folder>)
        note.unlink(missing_ok=True)

    def noted(name: str) -> None:
        with contextlib.suppress(OSError):
            note.parent.mkdir(parents=True, exist_ok=True)
            note.write_text(name + "\n", encoding="utf-8")

    def first(signum, frame) -> None:
        signal.signal(signal.SIGINT, previous)
        noted("SIGINT")
        print("Ctrl-C: the sweep's jobs stop after their current step, each with a checkpoint; the sweep then lists "
              "them (Ctrl-C again: stop at once, nothing saved)", file=sys.stderr, flush=True)

    def relayed(signum, frame) -> None:  # a scheduler's SIGTERM to this process alone: the jobs' too
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one: at once
        noted("SIGTERM")
        print("SIGTERM: the sweep's jobs stop after their current step, each with a checkpoint; the sweep then lists "
              "them", file=sys.stderr, flush=True)
        for pid in _workers():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)

    try:
        if previous is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, first)
        if Path("/proc").is_dir():
            signal.signal(signal.SIGTERM, relayed)
    except ValueError:  # not the main thread
        return None
    return previous, term


def restore(handlers) -> None:
    """The main process's handlers from before the sweep (:func:`stop_jobs_first`'s value)."""
    if handlers is not None:
        signal.signal(signal.SIGINT, handlers[0])
        signal.signal(signal.SIGTERM, handlers[1])


def _workers() -> list[int]:
    """This process's child processes but the resource trackers (Linux: ``/proc``): the joblib workers."""
    me, found = os.getpid(), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == me and \
                    b"resource_tracker" not in (stat.parent / "cmdline").read_bytes():
                found.append(int(stat.parent.name))
    return found


STOPS = {signal.SIGINT, signal.SIGTERM}


def use_quiet_workers():
    """Joblib's ``loky`` backend, for this sweep, with :func:`quiet_between_jobs` as its workers' initializer (the
    launcher names the backend ``loky``; joblib builds it from its registry, ``register_parallel_backend``), its
    workers started with Ctrl-C and SIGTERM blocked (:func:`_spawn_blocked`). Returns what it replaced
    (:func:`restore_backend` puts it back), None where joblib has no such backend."""
    import functools

    from joblib import parallel, register_parallel_backend

    loky = parallel.BACKENDS.get("loky")
    if loky is None:
        return None
    register_parallel_backend("loky", functools.partial(loky, initializer=quiet_between_jobs))
    spawn = _loky_spawn() if hasattr(signal, "pthread_sigmask") else None  # POSIX
    if spawn is not None:
        spawn.fork_exec = _spawn_blocked(spawn.fork_exec)
    return loky, spawn


def restore_backend(replaced) -> None:
    if replaced is not None:
        from joblib import register_parallel_backend

        loky, spawn = replaced
        register_parallel_backend("loky", loky)
        if spawn is not None:
            spawn.fork_exec = spawn.fork_exec.__wrapped__


def _loky_spawn():
    """The module whose ``fork_exec`` starts loky's workers on POSIX (joblib's copy of loky: popen_loky_posix
    imports it at each start); None where this joblib has none (the start-up's window stays open there)."""
    try:
        from joblib.externals.loky.backend import fork_exec as spawn
    except ImportError:
        return None
    return spawn if callable(getattr(spawn, "fork_exec", None)) else None


def _spawn_blocked(fork_exec):
    """``fork_exec`` with Ctrl-C and SIGTERM blocked in the calling thread while it forks: the worker inherits the
    mask through ``exec`` and Python's start-up, so a signal in its first second (its imports, before loky runs
    :func:`quiet_between_jobs`) waits, and is then ignored, where it ended the worker (a broken pool: loky killed
    every other one, mid-step). The calling thread gets its mask back; a signal to this process meanwhile waits
    for it."""
    import functools

    @functools.wraps(fork_exec)
    def spawn(*args, **kwargs):
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
        try:
            return fork_exec(*args, **kwargs)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    return spawn


def quiet_between_jobs() -> None:
    """A worker's initializer: Ctrl-C and SIGTERM ignored while no job runs (a dead worker is a broken pool: loky
    kills every other one), the handlers it started with kept for its jobs (:func:`run_job`); then unblocked (they
    were blocked from its start, :func:`_spawn_blocked`: one sent meanwhile is dropped here). A Ctrl-C ignored in
    the sweep's main process (started in the background) is ignored here already, and in its jobs."""
    global _job_handlers
    _job_handlers = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)


def in_worker() -> bool:
    """Whether this process is a worker of :func:`use_quiet_workers` (its initializer ran)."""
    return _job_handlers is not None


@contextlib.contextmanager
def job_signals():
    """A job in a worker: the process's own Ctrl-C handler while it runs (ignored where the sweep's was), SIGTERM a
    stop wherever the training has no handler of its own (:func:`_sigterm_before_training`); ignored again after."""
    signal.signal(signal.SIGINT, _job_handlers[0])
    signal.signal(signal.SIGTERM, _sigterm_before_training)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _sigterm_before_training(signum, frame) -> None:
    """A job's SIGTERM where no training or evaluation has its own handler in place (its checks, its data loading,
    between its training and its test): a stop there, as Lightning's stop in a validation (``SIGTERMException``,
    which the pipeline turns into ``stops.stopped_outside_a_step``); the default handler ended the worker, and loky
    every other one. Lightning calls the handler it finds beside its own: while one of its handlers is in place,
    nothing here."""
    if signal.getsignal(signal.SIGTERM) is _sigterm_before_training:
        from pytorch_lightning.utilities.exceptions import SIGTERMException

        raise SIGTERMException


NOTE_WAIT_S = 1.0  # how long a worker stopped by a Ctrl-C waits for the main process's note (it gets the same one)


def sweep_stopping(signal_name: str, note: Path) -> bool:
    """Whether a job that ``signal_name`` stops stops its sweep too: always with the basic launcher (the jobs run one
    after another in this process); in a worker, where the sweep's main process noted a stop in ``note``
    (:func:`stop_jobs_first` notes it before it sends a SIGTERM on; a terminal's Ctrl-C reaches every process of the
    sweep at once, so for one the note is waited for, up to ``NOTE_WAIT_S``). A signal to one worker alone (``kill
    <pid>``) stops that job alone: the others go on, and later jobs start."""
    if not in_worker():
        return True
    import time

    deadline = time.monotonic() + (NOTE_WAIT_S if signal_name == "SIGINT" else 0.0)
    while stopped(note) is None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def stopped(note: Path) -> str | None:
    """The signal that stopped the sweep (its main process's ``note``, :func:`stop_jobs_first`), else None."""
    with contextlib.suppress(OSError):
        return note.read_text(encoding="utf-8").strip() or "SIGTERM"
    return None
