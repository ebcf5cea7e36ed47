#!/usr/bin/env python
"""Run many training jobs side by side on one machine (one GPU), by priority, within a wall-clock budget.

    python scripts/side_by_side.py --jobs jobs.json --budget-s 540 --logs outputs/side_by_side [--max-parallel 16]

``jobs.json``: a list of ``{"name": str, "argv": [...], "steps": int, "progress": "path/glob/metrics.csv"}`` in
priority order (first = most wanted). ``argv`` is one ``train.py`` command (any program); ``steps`` its number
of training steps; ``progress`` a glob of the CSV file Lightning's ``CSVLogger`` writes (its ``step`` column
tells how far the job is; it is flushed every 100 steps).

Up to ``--max-parallel`` jobs run at once, each with one OpenMP thread and its output in ``<logs>/<name>.log``;
a queued job starts when a slot frees. A look comes every ``--check-s`` seconds (default: a 50th of the budget,
between 0.5 and 15 s; every 0.5 s at most while a job is stopping) and exactly at the two times below. The rate of
each running job (steps per second over its last ``--rate-window-s`` seconds of measurements) projects its end,
plus ``--tail-s`` for the final validation and test. Once a job's progress has been measured for ``--grace-s``
seconds, if its projected end falls after the budget, the lowest-priority running job that is not about to end
gets SIGTERM (not waited for: the looks go on; a shared GPU or CPU speeds the others up by its share), every job's
measurement starts afresh, and no queued job starts from then on.

The budget is kept: every job has ended ``--budget-s`` seconds after the call started. ``--tail-s`` before that,
every job still training (before its last step) gets SIGTERM, all at once, and they are waited for together, while
a job past its last step goes on (its final validation and test); no queued job starts from then on; at the budget
any job left is killed (SIGKILL). A signal to this call (Ctrl-C, SIGTERM, SIGHUP) stops every job the same way at
once (killed ``--tail-s`` later at the latest; no queued job starts) and is its exit status, 128 + N. Nothing a
finished job wrote is touched: a stopped job leaves no run record (train.py writes it at the end), so every record
that exists is a complete run.

The summary (``<logs>/summary.json``, also printed): per job, its state (finished, failed, stopped: why, not
started: why), exit code, seconds from start to end and the last step seen. Exit status 0: every job finished; 1:
not; 128 + N: signal N. :func:`supervise` is the loop (``scripts/reproduce_table6_gpu.py`` calls it too), with its
clock, sleep, launch and kill replaceable (tests). Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
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

GRACE_S, WINDOW_S, CHECK_S, POLL_S = 60.0, 45.0, 15.0, 0.5  # supervise()'s default times (the first three: at most)
SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)  # those that stop every job (SIGINT unless ignored)


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



def make_jobs(items, source: str) -> list[Job]:
    """The jobs of ``items`` (a job list: see above) in their priority order; a bad list stops, naming ``source``."""
    if not isinstance(items, list) or not items:
        raise SystemExit(f"{source}: expected a non-empty JSON list of jobs")
    jobs, names = [], set()
    for i, item in enumerate(items):
        missing = [k for k in ("name", "argv", "steps", "progress") if k not in item]
        if missing:
            raise SystemExit(f"{source}: job {i} lacks {missing} (each job: name, argv, steps, progress)")
        if item["name"] in names:
            raise SystemExit(f"{source}: job {i}: the name {item['name']!r} is used twice")
        names.add(item["name"])
        jobs.append(Job(str(item["name"]), [str(a) for a in item["argv"]], int(item["steps"]), str(item["progress"]),
                        priority=i))
    return jobs


def load_jobs(path: Path) -> list[Job]:
    try:
        items = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise SystemExit(f"{path}: cannot read the job list ({err})") from err
    return make_jobs(items, str(path))


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


def spawn(job: Job, logs: Path) -> None:
    """Start ``job``'s process in a session of its own (a signal to the terminal's group does not reach it: the
    supervisor stops it), one thread per pool, its output in ``<logs>/<name>.log``."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", NUMBA_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    with open(logs / f"{job.name}.log", "wb") as log:  # the child keeps its own copy of the descriptor
        job.proc = subprocess.Popen(job.argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def over_budget(running: list[Job], now: float, deadline: float, tail_s: float, window_s: float) -> list[Job]:
    """The running jobs whose projected end falls after ``deadline``."""
    late = []
    for job in running:
        end = job.projected_end(now, tail_s, window_s)
        if end is not None and end > deadline:
            late.append(job)
    return late


def summary(jobs: list[Job]) -> list[dict]:
    """A row per job: its name, state, exit code, last step seen, steps and seconds from its start to its end."""
    return [{"name": j.name, "state": j.state, "returncode": j.returncode, "last_step": j.last_step(),
             "steps": j.steps, "seconds": round(j.ended - j.started, 1) if j.started and j.ended else None}
            for j in jobs]


class _Wake(Exception):
    """A signal to the supervisor, raised out of its sleep only."""


def supervise(jobs: list[Job], logs: Path, t0: float, budget_s: float, *, max_parallel: int | None = None,
              tail_s: float = 30.0, check_s: float | None = None, grace_s: float | None = None,
              window_s: float | None = None, report_s: float = 60.0, clock=time.time, sleep=time.sleep,
              launch=None, kill=os.killpg) -> int:
    """Run ``jobs`` (priority order) ``max_parallel`` at a time (default: all at once), each ended by ``t0 +
    budget_s``, as the module says; their states are left in ``jobs`` (:func:`summary`). Returns 128 + the signal that
    stopped the call, 0 if none. ``check_s``, ``grace_s`` and ``window_s`` default to a 50th of the budget (between
    POLL_S and CHECK_S), a fifth (GRACE_S at most) and a fifth (WINDOW_S at most). ``clock``, ``sleep``,
    ``launch(job)`` (sets ``job.proc``: :func:`spawn` in ``logs``) and ``kill(pid, sig)`` (of the process group)
    stand in for time and processes in tests."""
    if not 0 <= tail_s < budget_s:
        raise ValueError(f"the tail ({tail_s:g} s) must be >= 0 and less than the budget ({budget_s:g} s)")
    deadline, stop_at, next_report = t0 + budget_s, t0 + budget_s - tail_s, t0 + report_s
    check = check_s if check_s is not None else min(CHECK_S, max(POLL_S, budget_s / 50))
    grace = grace_s if grace_s is not None else min(GRACE_S, budget_s / 5)
    window = window_s if window_s is not None else min(WINDOW_S, budget_s / 5)
    slots, launch = max_parallel or len(jobs), launch or (lambda job: spawn(job, logs))
    signalled, napping, held = 0, False, ""  # held: why queued jobs no longer start ("" while they do)

    def say(now: float, what: str) -> None:
        print(f"[{now - t0:6.0f}s] {what}", flush=True)

    def stop(job: Job, why: str, now: float, sig=signal.SIGTERM) -> None:
        with contextlib.suppress(ProcessLookupError):
            kill(job.proc.pid, sig)
        if why:
            job.state = f"stopping: {why}"
            say(now, f"stop {job.name} at step {job.last_step()}: {why}")

    def on_signal(signum, frame):  # the jobs run in sessions of their own: this call stops them
        nonlocal signalled, napping
        signalled = signalled or 128 + signum
        if napping:  # wake the sleep; elsewhere the look in progress ends first, and the next one stops the jobs
            napping = False
            raise _Wake

    previous = {sig: signal.signal(sig, on_signal) for sig in SIGNALS
                if sig != signal.SIGINT or signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        while True:
            now, seen = clock(), signalled  # seen: a signal after this point skips the nap below
            if signalled and stop_at > now:  # the first look after a signal: the stops at once, the kill a tail later
                stop_at, deadline, held = now, min(deadline, now + tail_s), "interrupted"
            live = [j for j in jobs if j.proc is not None and j.ended is None]
            for job in live:
                step, code = read_step(job.progress), job.proc.poll()
                if step is not None and (not job.samples or step != job.samples[-1][1]):
                    job.samples.append((now, step))
                if code is not None:
                    job.returncode, job.ended = code, now
                    job.state = ("finished" if code == 0 else f"failed (exit {code})" if job.state == "running"
                                 else job.state.replace("stopping", "stopped", 1))
                    say(now, f"{job.state} {job.name} at step {job.last_step()} after {now - job.started:.0f}s")
            live = [j for j in live if j.ended is None]
            running = [j for j in live if j.state == "running"]
            if now >= next_report and running:
                next_report = now + report_s
                say(now, " | ".join(f"{j.name} {j.last_step()}" + (f" ({r:.1f}/s)" if (r := j.rate(window)) else "")
                                    for j in running))
            if now >= stop_at:
                held = held or "budget spent"
            if now >= deadline:
                for job in live:
                    stop(job, "", now, signal.SIGKILL)
                for job in live:
                    job.returncode, job.ended = job.proc.wait(), clock()
                    if job.state == "running":  # in its tail (past its last step), or no tail was kept
                        job.state = "stopped: budget spent (killed" + (
                            " in its tail)" if job.last_step() >= job.steps - 1 else ")")
                    else:
                        job.state = f"{job.state.replace('stopping', 'stopped', 1)} (killed: its stop outlasted the tail)"
                    say(now, f"{job.state} {job.name} at step {job.last_step()}")
                live = []
            elif now >= stop_at:
                for job in running:
                    if signalled or job.last_step() < job.steps - 1:  # (Lightning's last step: steps - 1)
                        stop(job, "interrupted" if signalled else "budget spent", now)
            elif len(running) > 1 and over_budget([j for j in running if j.measured_for(now) >= grace], now,
                                                  deadline, tail_s, window):
                # stop the least wanted job that is not about to end anyway (its stop would free little)
                ending = {j.name for j in running if (end := j.projected_end(now, tail_s, window)) and end <= now + grace}
                victim = max((j for j in running if j.name not in ending), key=lambda j: j.priority,
                             default=max(running, key=lambda j: j.priority))
                stop(victim, "projected past the budget", now)
                held = held or "budget"
                for job in running:  # the others speed up: measured afresh, with a fresh grace
                    job.samples = [(now, job.last_step())] if job.samples else []
            for job in (j for j in jobs if j.state == "queued"):
                if held:
                    job.state = f"not started: {held}"
                elif len(live) < slots:
                    launch(job)
                    job.started, job.state = now, "running"
                    live.append(job)
                    say(now, f"start {job.name}: {' '.join(job.argv)}")
            if not live:
                break
            busy = now >= stop_at or any(j.state.startswith("stopping") for j in live)
            nap = max(0.0, min(min(POLL_S, check) if busy else check, (stop_at if now < stop_at else deadline) - now))
            with contextlib.suppress(_Wake):
                try:
                    napping = True
                    if signalled == seen:
                        sleep(nap)
                finally:
                    napping = False
    finally:  # every job has ended here, but after a crash of this loop: none is left running unwatched
        for job in (j for j in jobs if j.proc is not None and j.ended is None and j.proc.poll() is None):
            stop(job, "this call crashed", clock())
        for sig, handler in previous.items():  # the caller's handlers again (a test, reproduce_table6_gpu.py)
            signal.signal(sig, handler)
    return signalled


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, required=True,
                        help="wall-clock seconds from this call's start by which every job has ended")
    parser.add_argument("--logs", type=Path, required=True)
    parser.add_argument("--max-parallel", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--check-s", type=float, default=None,
                        help="seconds between looks (default: a 50th of the budget, between 0.5 and 15)")
    parser.add_argument("--rate-window-s", type=float, default=None,
                        help="seconds of progress a rate is taken over (default: a fifth of the budget, 45 at most)")
    parser.add_argument("--report-s", type=float, default=60.0, help="seconds between progress lines")
    parser.add_argument("--tail-s", type=float, default=None,
                        help="seconds a job needs after its last step; the jobs still training get SIGTERM this long "
                             "before the budget's end (less than --budget-s; default: 30, a fifth of a shorter budget)")
    parser.add_argument("--grace-s", type=float, default=None,
                        help="a job's projection counts once its progress has been measured this long (the first "
                             "steps of processes starting together are slow; default: a fifth of the budget, 60 at "
                             "most)")
    args = parser.parse_args(argv)
    t0 = time.time()  # the budget counts from here
    args.tail_s = min(30.0, args.budget_s / 5) if args.tail_s is None else args.tail_s
    if not 0 <= args.tail_s < args.budget_s:
        parser.error(f"--tail-s {args.tail_s:g}: expected >= 0 and less than --budget-s ({args.budget_s:g})")
    jobs = load_jobs(args.jobs)
    args.logs.mkdir(parents=True, exist_ok=True)
    signalled = supervise(jobs, args.logs, t0, args.budget_s, max_parallel=args.max_parallel, tail_s=args.tail_s,
                          check_s=args.check_s, grace_s=args.grace_s, window_s=args.rate_window_s,
                          report_s=args.report_s)
    rows = summary(jobs)
    (args.logs / "summary.json").write_text(json.dumps(rows, indent=1))
    for row in rows:
        print(f"{row['name']:<40} {row['state']:<32} step {row['last_step']}/{row['steps']} {row['seconds']}s")
    if signalled:
        return signalled
    return 0 if all(j.state == "finished" for j in jobs) else 1


if __name__ == "__main__":
    sys.exit(main())
