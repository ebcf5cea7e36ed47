"""Hydra callbacks (``configs/hydra/default.yaml: callbacks``): every job's outcome, every failure reported.

Hydra's launchers catch a job's exception, run the remaining jobs, then re-raise only the first failure, and the
failed job's own ``train.log`` never sees its error. :class:`JobReport`

- refuses, before the first job, a sweep some of whose tasks lack their data (:mod:`coda_exp.sweep_data`, on the
  jobs the entry point composed: :data:`sweep_configs`), with one message and exit status 2, where every job failed
  with the same error;
- logs a failed job's exception with its traceback while the job's log file is still open (unless
  ``coda_exp.pipeline.run`` logged it already), so each job's ``train.log`` ends with its own error;
- writes each job's outcome to ``<sweep dir>/.jobs/<num>.json`` (a file, so jobs that a launcher runs in other
  processes are counted too);
- at the end of a sweep prints every failed job with its overrides, exit status, error and log, and counts apart
  the jobs that ran nothing because ``resume=auto`` found their run finished already; :data:`sweep_exit` is then
  the sweep's exit status (2 when every failure was a user's mistake, 1 when a job crashed), which the entry point
  exits with. A sweep stopped some other way (Ctrl-C) lists its jobs when the process exits: a job a signal stopped
  (Ctrl-C, SIGTERM: ``coda_exp.stops``, which writes its outcome through :func:`job_interrupted`, since the
  ``SystemExit`` that stops the sweep skips Hydra's ``on_job_end``) as interrupted, with the command that resumes
  it and the sweep's command with ``resume=auto``, not as a failure (it used to be left out of the list);
- in a sweep whose jobs run in worker processes (``hydra/launcher=joblib``), lets the first Ctrl-C (or a SIGTERM to
  the main process, sent on) stop the jobs on their own terms and lists them all (``coda_exp.sweep_workers``: a
  job's stop is its outcome, :class:`JobStopped`, not an exit that joblib answers by killing the other workers);
- notes, as a single run starts, which folders outside its own it may make (``outputs/runs/``, the results'
  ``runs/`` and ``predictions/``, the data's cache), so that a run refused before it began (or failed on a user's
  mistake before its first step) leaves none of them empty (:func:`remove_made_folders`).

Once a failed job's outcome is written, Hydra's basic sweeper is handed the job as done (its ``JobReturn``
status): it would otherwise end the sweep with its own report of the first failure (the message a third time, with
the advice to set ``HYDRA_FULL_ERROR`` for a traceback, even for a missing data folder) and skip the
``on_multirun_end`` that lists them all. (Hydra takes a sweeper only from a ``hydra_plugins`` package, which an
editable install may not find.) Another sweeper (Optuna, Ax), which reads a job's return value, gets the failure
as Hydra gives it, and the list is printed when the process exits.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import shlex
import sys
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import CompactHydraException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from coda_exp.errors import UserError
from coda_exp.fingerprint import override_key
from coda_exp.io import atomic_write_text

log = logging.getLogger(__name__)

class SweepUserError(CompactHydraException):
    """A sweep job's :class:`~coda_exp.errors.UserError`: its message alone, without a traceback (in the job's log
    and the sweep's list; a sweeper other than Hydra's basic one reports it as a ``CompactHydraException``, whose
    message Hydra prints alone). ``str`` names the original type."""


class JobStopped(CompactHydraException):
    """The end of a job in a sweep's worker process that a signal stopped (its outcome, ``interrupted``, written by
    :func:`job_interrupted`) or that the sweep's stop kept from starting (no outcome): an ``Exception``, which Hydra's
    ``run_job`` returns as the job's failure, where the stop's ``SystemExit`` went on to joblib, which killed every
    other job (``coda_exp.sweep_workers``). ``code``: the stop's exit status (None: not started)."""

    def __init__(self, message: str, code: int | None) -> None:
        super().__init__(message)
        self.code = code


def _basic_sweeper(config: DictConfig) -> bool:
    """Whether the sweep runs under Hydra's basic sweeper, which reads nothing of a job but whether it failed."""
    target = str(config.hydra.get("sweeper", {}).get("_target_", ""))
    return target.endswith("basic_sweeper.BasicSweeper")


JOBS = ".jobs"
FINISHED_ALREADY = "finished already"  # a job's status when resume=auto found its run finished and ran nothing
INTERRUPTED = "interrupted"  # a job's status when a signal (Ctrl-C, SIGTERM) stopped it: job_interrupted
SIGNAL_WORDS = {"SIGINT": "Ctrl-C"}
LOGGED = "_coda_exp_logged"  # set by coda_exp.pipeline.run on an exception it has logged with its traceback
sweep_exit: int | None = None  # the last sweep's exit status once JobReport has listed its jobs
sweep_configs: list | None = None  # the jobs the entry point composed, whose data JobReport checks at the start


def _exit_status(err: BaseException) -> int:
    code = getattr(err, "code", None)
    return code if isinstance(code, int) and code else 1


def _message(err: BaseException, limit: int = 2000) -> str:
    """A failed job's error, whole (a ConfigError lists its keys on the lines after its first), at most ``limit``
    characters."""
    text = (str(err) if isinstance(err, SweepUserError) else f"{type(err).__name__}: {err}").strip()
    return text if len(text) <= limit else text[:limit] + " ..."


def job_outcome(job_return: JobReturn, finished_in: Path | None = None) -> dict[str, Any]:
    """What the sweep summary needs of one job: number, overrides, status (``completed``, ``failed``, or
    ``finished already`` when ``resume=auto`` found the run finished in ``finished_in`` and ran nothing), exit
    status, error, output folder."""
    runtime = job_return.hydra_cfg.hydra if job_return.hydra_cfg is not None else None
    failed = job_return.status == JobStatus.FAILED
    err = job_return._return_value if failed else None
    return {
        "num": int(runtime.job.num) if runtime is not None and runtime.job.get("num") is not None else 0,
        "overrides": list(job_return.overrides or []),
        "status": "failed" if failed else FINISHED_ALREADY if finished_in is not None else "completed",
        "finished_in": None if failed or finished_in is None else str(finished_in),
        "exit_status": _exit_status(err) if failed else 0,
        "error": _message(err) if failed else None,
        "output_dir": str(runtime.runtime.output_dir) if runtime is not None else None,
    }


def program() -> str:
    """The command this process was started as, for a command to type again: ``python train.py``, ``coda-exp`` or
    ``python -m coda_exp``; ``train.py`` as it was typed (``python /work/coda-exp/train.py`` from a project's own
    folder: ``python train.py`` there is "can't open file")."""
    typed = sys.argv[0] if sys.argv and Path(sys.argv[0]).name == "train.py" else "train.py"
    if Path(typed).resolve() == (Path.cwd() / "train.py").resolve():  # the checkout's own folder
        typed = "train.py"
    return {"coda-exp": "coda-exp", "__main__.py": "python -m coda_exp"}.get(Path(sys.argv[0]).name,
                                                                             f"python {shlex.quote(typed)}")


def _logger_refusal(configs: list) -> str | None:
    """The loggers' settings of a sweep's jobs (``coda_exp.logger_checks``: keys, W&B's mode, key and server), each
    distinct ``logger`` node once, before the first job (each job checked its own only as it started)."""
    from coda_exp.logger_checks import check_logger_settings

    seen = set()
    for cfg in configs:
        node = OmegaConf.to_yaml(cfg.get("logger") or {})
        if node not in seen:
            seen.add(node)
            try:
                check_logger_settings(cfg)
            except UserError as err:
                return f"the sweep cannot start: {err}; no job has run"
    return None


def typed_again(hydra_overrides, sweep: bool = False) -> list[str]:
    """Of a job's Hydra overrides (``hydra.overrides.hydra``), those a command to type again needs: where configs of
    one's own are (``hydra.searchpath``: without it the command failed, "Could not find 'experiment/<yours>'"), and
    for a sweep its launcher (``hydra/launcher=joblib``, ``hydra.launcher.*``); quoted for a shell."""
    kept = []
    for o in [str(o) for o in hydra_overrides or []]:
        key = override_key(o)
        if key == "hydra.searchpath" or sweep and (key == "hydra/launcher" or key.startswith("hydra.launcher.")):
            kept.append(shlex.quote(o))
    return kept


def job_interrupted(signal_name: str, exit_code: int, step: int | None, checkpoint: str | None,
                    resume: str) -> None:
    """A sweep job stopped by a signal (``coda_exp.stops``): its outcome, ``interrupted`` at ``step`` with
    ``checkpoint`` (None: none saved) and the command ``resume`` that resumes it, for the sweep's summary. Nothing
    outside a sweep."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized() or "MULTIRUN" not in str(HydraConfig.get().mode):
        return
    hydra = HydraConfig.get()
    outcome = {"num": int(hydra.job.get("num") or 0), "overrides": list(hydra.overrides.task),
               "status": INTERRUPTED, "finished_in": None, "exit_status": exit_code, "error": None,
               "signal": signal_name, "step": step, "checkpoint": checkpoint, "resume": resume,
               "output_dir": str(hydra.runtime.output_dir)}
    write_outcome(hydra.sweep.dir, outcome)


def outcome_file(sweep_dir, num: int) -> Path:
    """The file of job ``num``'s outcome in its sweep's folder (:func:`write_outcome`, ``JobReport.outcomes``)."""
    return Path(str(sweep_dir)) / JOBS / f"{num}.json"


def write_outcome(sweep_dir, outcome: dict) -> None:
    atomic_write_text(outcome_file(sweep_dir, outcome["num"]), json.dumps(outcome, indent=1) + "\n")


def stop_note(sweep_dir) -> Path:
    """The file in which a sweep's main process notes the signal that stopped it (``coda_exp.sweep_workers``)."""
    return Path(str(sweep_dir)) / JOBS / "stopped"


def listed_as_interrupted() -> bool:
    """Whether this sweep job's outcome says a signal stopped it (:func:`job_interrupted` wrote it)."""
    from hydra.core.hydra_config import HydraConfig

    hydra = HydraConfig.get()
    with contextlib.suppress(OSError, ValueError):
        path = outcome_file(hydra.sweep.dir, int(hydra.job.get("num") or 0))  # as job_interrupted numbers it
        return json.loads(path.read_text(encoding="utf-8")).get("status") == INTERRUPTED
    return False


def sweep_summary(outcomes: list[dict], again: str | None = None, whole: bool = True) -> str:
    """``sweep: N jobs, K failed[, I interrupted][, S finished already (resume=auto: nothing ran)]``, one block per
    failed job (overrides, exit status, error with each of its further lines indented, its log) and one per
    interrupted job (the signal, step and checkpoint, the command that resumes it, its log; then ``again``, the
    sweep's command that goes on where it stopped). ``whole``: whether the signal stopped the sweep (False: it
    reached a worker of a joblib sweep alone, whose other jobs ran)."""
    failed = [o for o in outcomes if o["status"] == "failed"]
    stopped = [o for o in outcomes if o["status"] == INTERRUPTED]
    skipped = sum(o["status"] == FINISHED_ALREADY for o in outcomes)
    lines = [f"sweep: {len(outcomes)} job(s), {len(failed)} failed" + (f", {len(stopped)} interrupted" if stopped
                                                                       else "")
             + (f", {skipped} finished already (resume=auto: nothing ran)" if skipped else "")]
    for o in sorted(failed + stopped, key=lambda o: o["num"]):
        head = f"  job #{o['num']} [{' '.join(o['overrides'])}]:"
        if o["status"] == INTERRUPTED:
            signal = SIGNAL_WORDS.get(o["signal"], o["signal"])
            at = f" at step {o['step']}" if o.get("step") is not None else ""
            saved = f", its checkpoint {o['checkpoint']}" if o.get("checkpoint") else ", no checkpoint to resume from"
            lines += [f"{head} interrupted ({signal}, exit status {o['exit_status']}){at}{saved}",
                      f"    resume it with: {o['resume']}"]
        else:
            first, *rest = str(o["error"]).splitlines() or [""]
            lines.append(f"{head} exit status {o['exit_status']}: {first}")
            lines += [f"      {line.strip()}" for line in rest if line.strip()]  # the keys of a ConfigError
        if o["output_dir"]:
            lines.append(f"    log: {Path(o['output_dir']) / 'train.log'}")
    if stopped and again and whole:
        lines.append(f"  the sweep stopped there; to go on (finished jobs skipped, stopped ones resumed): {again}")
    elif stopped and again:
        lines.append("  the sweep ran on (a signal reached the worker of the stopped job alone); to resume it "
                     f"(finished jobs skipped): {again}")
    return "\n".join(lines)


made_folders: list[Path] = []  # the folders a single run may make outside its own, deepest first (on_run_start)
# where a run makes folders besides its own (coda_exp.run_folder.check_outputs): the folder above its own, runs/ of
# paths.log_dir, and runs/ and predictions/ of its results folder and its data's cache
MADE_BY_A_RUN = (("paths.log_dir", "runs"), ("paths.results_dir", "runs"), ("paths.results_dir", "predictions"),
                 ("data.cache_dir", ""))


def remove_made_folders() -> None:
    """The folders a refused single run made outside its own (``outputs/runs/`` in a new project folder, the
    results' ``runs/`` and ``predictions/``, the data's cache) go where they are empty again: a refusal leaves the
    folders as they were (a folder that holds anything, a cache the data wrote, stays)."""
    for folder in made_folders:
        with contextlib.suppress(OSError):  # not empty (the run's folder stayed, another run wrote there), or gone
            folder.rmdir()


class JobReport(Callback):
    """See the module docstring."""

    def __init__(self) -> None:
        self.sweep_dir: Path | None = None
        self.again: str | None = None  # the sweep's command with resume=auto
        self.reported = False
        self.sigint = None  # the Ctrl-C and SIGTERM handlers before a joblib sweep (sweep_workers.stop_jobs_first)
        self.loky = None  # what sweep_workers.use_quiet_workers replaced for a joblib sweep (restore_backend)
        self.workers = False  # whether the jobs run in worker processes (sweep_workers.in_workers)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        global made_folders
        made = set()
        for key, below in MADE_BY_A_RUN:
            try:
                value = OmegaConf.select(config, key)
            except Exception:  # noqa: BLE001 (a path that does not resolve: the run reports it)
                value = None
            if value is None:
                continue
            folder = Path(str(value)).absolute() / below
            while not folder.exists() and folder.parent != folder:
                made.add(folder)
                folder = folder.parent
        made_folders = sorted(made, key=lambda f: len(f.parts), reverse=True)  # a folder before the one above it

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global sweep_configs
        configs, sweep_configs = sweep_configs, None
        if configs:  # here, not before Hydra sets up logging: the check imports Lightning (coda_exp.sweep_data)
            from coda_exp.errors import USER_ERROR_EXIT, print_error
            from coda_exp.sweep_data import data_refusal

            try:
                message = data_refusal(configs) or _logger_refusal(configs)
                refusal = UserError(message) if message else None
            except UserError as err:  # a module of yours (imports=, an entry point) that raises on import: it was
                refusal = UserError(f"the sweep cannot start: {err}; no job has run")  # Hydra's warning, then
                refusal.__cause__ = err.__cause__  # every job failed with it, no summary and exit status 0
            if refusal is not None:  # one message (-v: the traceback behind it), before the sweep's folder and job
                print_error(refusal, bool(OmegaConf.select(config, "verbose", default=False)))
                raise SystemExit(USER_ERROR_EXIT)
        self.sweep_dir = Path(str(config.hydra.sweep.dir))
        overrides = [str(o) for o in OmegaConf.select(config, "hydra.overrides.task", default=None) or []]
        # the sweep's own overrides but any resume= or ckpt_path=, then resume=auto (a sweep given resume=auto lost it)
        self.again = " ".join([program(), "-m", *typed_again(OmegaConf.select(config, "hydra.overrides.hydra"), True),
                               *(shlex.quote(o) for o in overrides if override_key(o) not in ("resume", "ckpt_path")),
                               "resume=auto"])
        atexit.register(self._report_at_exit)
        from coda_exp import sweep_workers

        self.workers = sweep_workers.in_workers(config)
        if self.workers:
            self.sigint = sweep_workers.stop_jobs_first(stop_note(self.sweep_dir))
            self.loky = sweep_workers.use_quiet_workers()

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if isinstance(job_return._return_value, JobStopped):  # its outcome written already, or none: not started
            if _basic_sweeper(config):
                job_return.status, job_return.return_value = JobStatus.COMPLETED, None
            return
        if job_return.status == JobStatus.FAILED:
            err = job_return._return_value
            if not getattr(err, LOGGED, False):  # a user's mistake (UserError) is its message; a crash, its traceback
                trace = None if isinstance(err, (UserError, SweepUserError)) else (type(err), err, err.__traceback__)
                log.error("job failed: %s: %s", type(err).__name__, err, exc_info=trace)
        if config.hydra.mode is not None and str(config.hydra.mode.name) == "MULTIRUN":
            # set by this job's own resume=auto (apply resets it first; a job failing before it is "failed")
            auto_resume = sys.modules.get("coda_exp.auto_resume")
            outcome = job_outcome(job_return, getattr(auto_resume, "finished_already", None))
            write_outcome(config.hydra.sweep.dir, outcome)
            if job_return.status == JobStatus.FAILED and _basic_sweeper(config):  # listed at the end (module doc)
                job_return.status, job_return.return_value = JobStatus.COMPLETED, None

    def outcomes(self) -> list[dict]:
        folder = (self.sweep_dir or Path()) / JOBS
        return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))]

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from coda_exp import sweep_workers

        sweep_workers.restore(self.sigint)
        sweep_workers.restore_backend(self.loky)
        self.sigint = self.loky = None
        self._report()

    def _report(self) -> None:
        if self.reported or self.sweep_dir is None:
            return
        self.reported = True
        outcomes = self.outcomes()
        if outcomes:
            from coda_exp import sweep_workers

            whole = not self.workers or sweep_workers.stopped(stop_note(self.sweep_dir)) is not None
            print(sweep_summary(outcomes, self.again, whole), file=sys.stderr, flush=True)
        global sweep_exit
        sweep_exit = exit_status(outcomes)

    def _report_at_exit(self) -> None:
        try:
            self._report()
        except (OSError, ValueError) as err:  # never mask the sweep's own exit status
            print(f"sweep summary unavailable: {err}", file=sys.stderr)


def exit_status(outcomes: list[dict]) -> int:
    """A sweep's exit status: a signal's (130, 143) when one stopped a job, else 0 when no job failed, 2 when every
    failure was a user's mistake (a job's status 2), else 1."""
    stopped = [o["exit_status"] for o in outcomes if o["status"] == INTERRUPTED]
    if stopped:
        return stopped[-1]
    failed = {o["exit_status"] for o in outcomes if o["status"] == "failed"}
    return 0 if not failed else 2 if failed == {2} else 1

