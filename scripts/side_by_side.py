#!/usr/bin/env python
"""Run many training jobs side by side on one machine (one GPU), by priority, within a wall-clock budget.

    python scripts/side_by_side.py --jobs jobs.json --budget-s 540 --logs outputs/side_by_side [--max-parallel 16]

``jobs.json``: a list of ``{"name": str, "argv": [...], "steps": int, "progress": "path/glob/metrics.csv"}`` in
priority order (first = most wanted). ``argv`` is one ``train.py`` command (any program); ``steps`` its number
of training steps; ``progress`` a glob of the CSV file Lightning's ``CSVLogger`` writes (its ``step`` column
tells how far the job is; it is flushed every 100 steps).

Up to ``--max-parallel`` jobs run at once, each with one OpenMP thread and its output in ``<logs>/<name>.log``;
a queued job starts when a slot frees. Every ``--check-s`` seconds the rate of each running job (steps per
second over its last ``--rate-window-s`` seconds of measurements) projects its end, plus ``--tail-s`` for the
final validation and test. Once a job's progress has been measured for ``--grace-s`` seconds, if its projected
end falls after the budget, the lowest-priority running job that is not about to end is stopped (a shared GPU
or CPU speeds the others up by its share), every job's measurement starts afresh, and no queued job starts from
then on. A job still running when the budget is spent is stopped. Nothing a finished job wrote is touched: a
stopped job leaves no run record (train.py writes it at the end), so every record that exists is a complete run.

The summary (``<logs>/summary.json``, also printed): per job, its state (finished, failed, stopped: why), exit
code, seconds from start to end and the last step seen. Standard library only.
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Job:
    name: str
    argv: list[str]
    steps: int
    progress: str
    priority: int
    proc: subprocess.Popen | None = None
    started: float | None = None
    ended: float | None = None
    state: str = "queued"
    returncode: int | None = None
    samples: list[tuple[float, int]] = field(default_factory=list)  # (time, step)

    def last_step(self) -> int:
        return self.samples[-1][1] if self.samples else 0

    def rate(self, window_s: float = 45.0) -> float | None:
        """Steps per second from the oldest measurement of the last ``window_s`` seconds (at least 1/4 of it
        before the newest; else the newest one before that) to the newest; None with fewer than two."""
        if len(self.samples) < 2:
            return None
        t1, s1 = self.samples[-1]
        earlier = [(t, s) for t, s in self.samples[:-1] if t1 - t >= window_s / 4]
        if not earlier:
            return None
        recent = [p for p in earlier if t1 - p[0] <= window_s] or earlier[-1:]
        t0, s0 = recent[0]
        return (s1 - s0) / (t1 - t0)

    def measured_for(self, now: float) -> float:
        """Seconds since the job's first progress measurement (0 before it)."""
        return now - self.samples[0][0] if self.samples else 0.0

    def projected_end(self, now: float, tail_s: float, window_s: float = 45.0) -> float | None:
        """When the job should end at its current rate, ``tail_s`` (final validation and test) included."""
        rate = self.rate(window_s)
        if rate is None or rate <= 0:
            return None
        return now + (self.steps - self.last_step()) / rate + tail_s


def load_jobs(path: Path) -> list[Job]:
    try:
        items = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise SystemExit(f"{path}: cannot read the job list ({err})") from err
    if not isinstance(items, list) or not items:
        raise SystemExit(f"{path}: expected a non-empty JSON list of jobs")
    jobs, names = [], set()
    for i, item in enumerate(items):
        missing = [k for k in ("name", "argv", "steps", "progress") if k not in item]
        if missing:
            raise SystemExit(f"{path}: job {i} lacks {missing} (each job: name, argv, steps, progress)")
        if item["name"] in names:
            raise SystemExit(f"{path}: job {i}: the name {item['name']!r} is used twice")
        names.add(item["name"])
        jobs.append(Job(str(item["name"]), [str(a) for a in item["argv"]], int(item["steps"]), str(item["progress"]),
                        priority=i))
    return jobs


def read_step(pattern: str) -> int | None:
    """The largest ``step`` in the CSV files matching ``pattern`` (None before the first flush)."""
    best = None
    for path in glob.glob(pattern):
        try:
            with open(path, newline="") as f:
                for row in csv.DictReader(f):
                    value = row.get("step")
                    if value:
                        step = int(float(value))
                        best = step if best is None else max(best, step)
        except (OSError, ValueError, csv.Error):
            continue
    return best


def start(job: Job, logs: Path) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", NUMBA_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    with open(logs / f"{job.name}.log", "wb") as log:  # the child keeps its own copy of the descriptor
        job.proc = subprocess.Popen(job.argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    job.started, job.state = time.time(), "running"
    print(f"[{stamp()}] start {job.name}: {' '.join(job.argv)}", flush=True)


def stop(job: Job, why: str) -> None:
    if job.proc is not None and job.proc.poll() is None:
        os.killpg(job.proc.pid, signal.SIGTERM)
        try:
            job.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(job.proc.pid, signal.SIGKILL)
            job.proc.wait()
    job.returncode = job.proc.returncode if job.proc is not None else None
    job.ended, job.state = time.time(), f"stopped: {why}"
    print(f"[{stamp()}] stop {job.name} at step {job.last_step()}: {why}", flush=True)


T0 = time.time()  # reset by main(): the start of the budget


def stamp() -> str:
    return f"{time.time() - T0:6.0f}s"


def over_budget(running: list[Job], now: float, deadline: float, tail_s: float, window_s: float) -> list[Job]:
    """The running jobs whose projected end falls after ``deadline``."""
    late = []
    for job in running:
        end = job.projected_end(now, tail_s, window_s)
        if end is not None and end > deadline:
            late.append(job)
    return late


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, required=True, help="wall-clock seconds for everything")
    parser.add_argument("--logs", type=Path, required=True)
    parser.add_argument("--max-parallel", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--check-s", type=float, default=15.0)
    parser.add_argument("--rate-window-s", type=float, default=45.0,
                        help="seconds of progress a rate is taken over")
    parser.add_argument("--report-s", type=float, default=60.0, help="seconds between progress lines")
    parser.add_argument("--tail-s", type=float, default=30.0, help="seconds a job needs after its last step")
    parser.add_argument("--grace-s", type=float, default=60.0,
                        help="a job's projection counts once its progress has been measured this long (the first "
                             "steps of processes starting together are slow)")
    args = parser.parse_args(argv)
    global T0
    T0 = time.time()
    jobs = load_jobs(args.jobs)
    args.logs.mkdir(parents=True, exist_ok=True)
    deadline = T0 + args.budget_s
    next_report = T0 + args.report_s
    dropping = False  # once a job had to be stopped for time, no queued job starts

    class Terminated(Exception):
        pass

    def terminated(signum, frame):  # jobs run in sessions of their own: a signal to this one must stop them too
        raise Terminated(128 + signum)

    previous = {sig: signal.signal(sig, terminated) for sig in (signal.SIGTERM, signal.SIGHUP)}
    killed = 0
    try:
        while True:
            now = time.time()
            running = [j for j in jobs if j.state == "running"]
            for job in running:
                code = job.proc.poll()
                step = read_step(job.progress)
                if step is not None and (not job.samples or step != job.samples[-1][1]):
                    job.samples.append((now, step))
                if code is not None:
                    job.returncode, job.ended = code, now
                    job.state = "finished" if code == 0 else f"failed (exit {code})"
                    print(f"[{stamp()}] {job.state} {job.name} after {now - job.started:.0f}s", flush=True)
            running = [j for j in jobs if j.state == "running"]
            queued = [j for j in jobs if j.state == "queued"]
            if now >= next_report and running:
                next_report = now + args.report_s
                progress = [f"{j.name} {j.last_step()}" + (f" ({r:.1f}/s)" if (r := j.rate(args.rate_window_s)) else "")
                            for j in running]
                print(f"[{stamp()}] " + " | ".join(progress), flush=True)
            if now >= deadline:
                for job in running:
                    stop(job, "budget spent")
                for job in queued:
                    job.state = "not started: budget spent"
                break
            settled = [j for j in running if j.measured_for(now) >= args.grace_s]
            if len(running) > 1 and over_budget(settled, now, deadline, args.tail_s, args.rate_window_s):
                # stop the least wanted job that is not about to end anyway (its stop would free little)
                ending = {j.name for j in running
                          if (e := j.projected_end(now, args.tail_s, args.rate_window_s)) and e <= now + 60}
                victim = max((j for j in running if j.name not in ending), key=lambda j: j.priority,
                             default=max(running, key=lambda j: j.priority))
                stop(victim, "projected past the budget")
                dropping = True
                for job in running:  # the others speed up: measure afresh, with a fresh grace
                    job.samples = [(now, job.last_step())] if job.samples else []
                for job in queued:
                    job.state = "not started: budget"
            if not dropping:
                for job in queued[: max(0, args.max_parallel - len(running))]:
                    start(job, args.logs)
            if not any(j.state in ("running", "queued") for j in jobs):
                break
            time.sleep(args.check_s)
    except Terminated as signal_code:
        killed = int(str(signal_code))
    finally:
        for job in jobs:
            if job.state == "running":
                stop(job, "interrupted")
        for sig, handler in previous.items():  # the caller's handlers again (main() called from Python, a test)
            signal.signal(sig, handler)
    summary = [{"name": j.name, "state": j.state, "returncode": j.returncode, "last_step": j.last_step(),
                "steps": j.steps, "seconds": round(j.ended - j.started, 1) if j.started and j.ended else None}
               for j in jobs]
    (args.logs / "summary.json").write_text(json.dumps(summary, indent=1))
    for row in summary:
        print(f"{row['name']:<40} {row['state']:<32} step {row['last_step']}/{row['steps']} {row['seconds']}s")
    if killed:
        return killed
    return 0 if all(j.state == "finished" for j in jobs) else 1


if __name__ == "__main__":
    sys.exit(main())
