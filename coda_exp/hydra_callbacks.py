"""Hydra callbacks (``configs/hydra/default.yaml: callbacks``): every job's outcome, every failure reported.

Hydra's launchers catch a job's exception, run the remaining jobs, then re-raise only the first failure, and the
failed job's own ``train.log`` never sees its error. :class:`JobReport`

- logs a failed job's exception with its traceback while the job's log file is still open (unless
  ``coda_exp.pipeline.run`` logged it already), so each job's ``train.log`` ends with its own error;
- writes each job's outcome to ``<sweep dir>/.jobs/<num>.json`` (a file, so jobs that a launcher runs in other
  processes are counted too);
- at the end of a sweep prints every failed job with its overrides, exit status, error and log, and counts apart
  the jobs that ran nothing because ``resume=auto`` found their run finished already; :data:`sweep_exit` is then
  the sweep's exit status (2 when every failure was a user's mistake, 1 when a job crashed), which the entry point
  exits with. A sweep stopped some other way (Ctrl-C) lists its jobs when the process exits.

Once a failed job's outcome is written, Hydra's basic sweeper is handed the job as done (its ``JobReturn``
status): it would otherwise end the sweep with its own report of the first failure (the message a third time, with
the advice to set ``HYDRA_FULL_ERROR`` for a traceback, even for a missing data folder) and skip the
``on_multirun_end`` that lists them all. (Hydra takes a sweeper only from a ``hydra_plugins`` package, which an
editable install may not find.) Another sweeper (Optuna, Ax), which reads a job's return value, gets the failure
as Hydra gives it, and the list is printed when the process exits.
"""

from __future__ import annotations

import atexit
import json
import logging
import sys
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import CompactHydraException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from coda_exp.errors import UserError
from coda_exp.io import atomic_write_text

log = logging.getLogger(__name__)

class SweepUserError(CompactHydraException):
    """A sweep job's :class:`~coda_exp.errors.UserError`: its message alone, without a traceback (in the job's log
    and the sweep's list; a sweeper other than Hydra's basic one reports it as a ``CompactHydraException``, whose
    message Hydra prints alone). ``str`` names the original type."""


def _basic_sweeper(config: DictConfig) -> bool:
    """Whether the sweep runs under Hydra's basic sweeper, which reads nothing of a job but whether it failed."""
    target = str(config.hydra.get("sweeper", {}).get("_target_", ""))
    return target.endswith("basic_sweeper.BasicSweeper")


JOBS = ".jobs"
FINISHED_ALREADY = "finished already"  # a job's status when resume=auto found its run finished and ran nothing
LOGGED = "_coda_exp_logged"  # set by coda_exp.pipeline.run on an exception it has logged with its traceback
sweep_exit: int | None = None  # the last sweep's exit status once JobReport has listed its jobs


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


def sweep_summary(outcomes: list[dict]) -> str:
    """``sweep: N jobs, K failed[, S finished already (resume=auto: nothing ran)]`` and one block per failed job
    (overrides, exit status, error with each of its further lines indented, its log)."""
    failed = [o for o in outcomes if o["status"] == "failed"]
    skipped = sum(o["status"] == FINISHED_ALREADY for o in outcomes)
    lines = [f"sweep: {len(outcomes)} job(s), {len(failed)} failed"
             + (f", {skipped} finished already (resume=auto: nothing ran)" if skipped else "")]
    for o in sorted(failed, key=lambda o: o["num"]):
        first, *rest = str(o["error"]).splitlines() or [""]
        lines.append(f"  job #{o['num']} [{' '.join(o['overrides'])}]: exit status {o['exit_status']}: {first}")
        lines += [f"      {line.strip()}" for line in rest if line.strip()]  # the keys of a ConfigError
        if o["output_dir"]:
            lines.append(f"    log: {Path(o['output_dir']) / 'train.log'}")
    return "\n".join(lines)


class JobReport(Callback):
    """See the module docstring."""

    def __init__(self) -> None:
        self.sweep_dir: Path | None = None
        self.reported = False

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.sweep_dir = Path(str(config.hydra.sweep.dir))
        atexit.register(self._report_at_exit)

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if job_return.status == JobStatus.FAILED:
            err = job_return._return_value
            if not getattr(err, LOGGED, False):  # a user's mistake (UserError) is its message; a crash, its traceback
                trace = None if isinstance(err, (UserError, SweepUserError)) else (type(err), err, err.__traceback__)
                log.error("job failed: %s: %s", type(err).__name__, err, exc_info=trace)
        if config.hydra.mode is not None and str(config.hydra.mode.name) == "MULTIRUN":
            # set by this job's own resume=auto (apply resets it first; a job failing before it is "failed")
            auto_resume = sys.modules.get("coda_exp.auto_resume")
            outcome = job_outcome(job_return, getattr(auto_resume, "finished_already", None))
            folder = Path(str(config.hydra.sweep.dir)) / JOBS
            atomic_write_text(folder / f"{outcome['num']}.json", json.dumps(outcome, indent=1) + "\n")
            if job_return.status == JobStatus.FAILED and _basic_sweeper(config):  # listed at the end (module doc)
                job_return.status, job_return.return_value = JobStatus.COMPLETED, None

    def outcomes(self) -> list[dict]:
        folder = (self.sweep_dir or Path()) / JOBS
        return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))]

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._report()

    def _report(self) -> None:
        if self.reported or self.sweep_dir is None:
            return
        self.reported = True
        outcomes = self.outcomes()
        if outcomes:
            print(sweep_summary(outcomes), file=sys.stderr, flush=True)
        global sweep_exit
        sweep_exit = exit_status(outcomes)

    def _report_at_exit(self) -> None:
        try:
            self._report()
        except (OSError, ValueError) as err:  # never mask the sweep's own exit status
            print(f"sweep summary unavailable: {err}", file=sys.stderr)


def exit_status(outcomes: list[dict]) -> int:
    """A sweep's exit status: 0 when no job failed, 2 when every failure was a user's mistake (a job's status 2),
    else 1."""
    failed = {o["exit_status"] for o in outcomes if o["status"] == "failed"}
    return 0 if not failed else 2 if failed == {2} else 1

