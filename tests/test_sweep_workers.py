"""coda_exp.sweep_workers and coda_exp.cli.run_job: a joblib sweep's job that a signal stops ends as its outcome
(``JobStopped``), not with the ``SystemExit`` that made joblib kill every other worker; a job the sweep's stop came
before does not start; a worker ignores Ctrl-C and SIGTERM between jobs. The whole sweep:
``tests/e2e/test_joblib_stop.py`` (``-m slow``)."""

from __future__ import annotations

import json
import signal
import sys

import pytest
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus
from hydra.types import RunMode
from omegaconf import OmegaConf

from coda_exp import cli, hydra_callbacks, stops, sweep_workers
from coda_exp.hydra_callbacks import JobReport, JobStopped

BASIC = {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"}
JOBLIB = {"_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher", "n_jobs": 2}


@pytest.fixture
def worker(tmp_path, monkeypatch):
    """This process as a worker of a joblib sweep (its initializer ran), running job #1 in ``tmp_path/1``; the
    signal handlers are put back after the test."""
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(sweep_workers, "_job_handlers", before)
    monkeypatch.setattr(sys, "argv", ["train.py"])
    job = {"mode": RunMode.MULTIRUN, "sweep": {"dir": str(tmp_path)}, "job": {"num": 1}, "launcher": JOBLIB,
           "overrides": {"task": ["seed=2"]}, "runtime": {"output_dir": str(tmp_path / "1")}}
    monkeypatch.setattr(HydraConfig.instance(), "cfg", OmegaConf.create({"hydra": job}))
    (tmp_path / "1" / ".hydra").mkdir(parents=True)
    (tmp_path / "1" / ".hydra" / "config.yaml").write_text("{}\n")
    yield OmegaConf.create({"paths": {"output_dir": str(tmp_path / "1")}})
    signal.signal(signal.SIGINT, before[0])
    signal.signal(signal.SIGTERM, before[1])


@pytest.mark.parametrize("name,where", [("SIGTERM", "validation"), ("SIGINT", "checks")])
def test_a_stopped_job_in_a_worker_ends_as_its_outcome_not_as_an_exit(worker, tmp_path, name, where):
    """Its SystemExit (143 from Lightning's stop in a validation; a Ctrl-C in the checks before the pipeline's own
    handling, a KeyboardInterrupt) went on to joblib, which killed the other workers. Between jobs the worker
    ignores both signals."""
    def run(cfg):
        if where == "validation":
            stops.stopped_outside_a_step(cfg, name)  # what the pipeline does with Lightning's stop
        raise KeyboardInterrupt

    with pytest.raises(JobStopped) as stopped:
        cli.run_job(run, worker)
    assert stopped.value.code == stops.EXIT_STATUS[name]
    outcome = json.loads((tmp_path / ".jobs" / "1.json").read_text())
    assert (outcome["status"], outcome["signal"]) == ("interrupted", name)
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN and signal.getsignal(signal.SIGTERM) is signal.SIG_IGN


def test_a_sigterm_before_the_training_stops_the_job_where_it_ended_the_worker(worker, tmp_path):
    """Before Lightning's handler (the checks, the data loading) the default handler ended the process, and loky then
    killed every other worker; it is a stop outside a training step now, as one in a validation."""
    def run(cfg):
        signal.raise_signal(signal.SIGTERM)

    with pytest.raises(JobStopped) as stopped:
        cli.run_job(run, worker)
    assert stopped.value.code == 143
    assert json.loads((tmp_path / ".jobs" / "1.json").read_text())["signal"] == "SIGTERM"


def test_a_job_the_sweeps_stop_came_before_does_not_start(worker, tmp_path, capsys):
    (tmp_path / ".jobs").mkdir()
    (tmp_path / ".jobs" / "stopped").write_text("SIGINT\n")
    with pytest.raises(JobStopped) as stopped:
        cli.run_job(lambda cfg: pytest.fail("the job ran"), worker)
    assert stopped.value.code is None and not (tmp_path / "1").exists()  # the folder Hydra made for it went
    assert "job #1 not started: the sweep was stopped (Ctrl-C)" in capsys.readouterr().err
    assert not (tmp_path / ".jobs" / "1.json").exists()


def test_a_finished_job_and_the_main_process_are_as_before(worker, monkeypatch):
    assert cli.run_job(lambda cfg: 0.5, worker) == 0.5
    monkeypatch.setattr(sweep_workers, "_job_handlers", None)  # not a worker: a stop is the sweep's end
    with pytest.raises(SystemExit):
        cli.run_job(lambda cfg: stops.stopped_outside_a_step(cfg, "SIGTERM"), worker)


def test_the_report_keeps_a_stopped_jobs_outcome_and_hands_the_job_back_as_done(tmp_path):
    """Hydra's ``run_job`` returns the stop as the job's failure; the outcome the stop wrote (interrupted) stays,
    and the basic sweeper gets the job as done (it raised the first failure, ending the sweep without its list)."""
    cfg = OmegaConf.create({"hydra": {"mode": RunMode.MULTIRUN, "sweep": {"dir": str(tmp_path)}, "sweeper": BASIC}})
    (tmp_path / ".jobs").mkdir()
    (tmp_path / ".jobs" / "1.json").write_text('{"status": "interrupted"}\n')
    job = JobReturn(overrides=["seed=2"], status=JobStatus.FAILED, _return_value=JobStopped("stopped", 143))
    job.hydra_cfg = OmegaConf.create({"hydra": {"job": {"num": 1}, "runtime": {"output_dir": str(tmp_path)}}})
    JobReport().on_job_end(cfg, job)
    assert job.status == JobStatus.COMPLETED and job.return_value is None
    assert json.loads((tmp_path / ".jobs" / "1.json").read_text()) == {"status": "interrupted"}


def test_the_main_process_notes_the_stop_and_its_workers_ignore_signals_between_jobs(tmp_path, monkeypatch, capsys):
    """An earlier sweep's note in the same folder is cleared; a Ctrl-C is noted for the jobs not started yet. The
    workers joblib starts for the sweep ignore Ctrl-C and SIGTERM until a job runs (a worker with no job died of
    them, and loky then killed the others); the loky backend is joblib's own again after the sweep."""
    from joblib import Parallel, delayed, parallel

    monkeypatch.setattr(hydra_callbacks, "sweep_exit", None)
    monkeypatch.setattr(sys, "argv", ["train.py"])
    (tmp_path / ".jobs").mkdir()
    (tmp_path / ".jobs" / "stopped").write_text("SIGTERM\n")
    loky = parallel.BACKENDS["loky"]
    before = signal.getsignal(signal.SIGINT)
    cfg = OmegaConf.create({"hydra": {"mode": RunMode.MULTIRUN, "sweep": {"dir": str(tmp_path)}, "launcher": JOBLIB,
                                      "overrides": {"task": ["seed=1,2"]}}})
    report = JobReport()
    report.on_multirun_start(cfg)
    try:
        assert not (tmp_path / ".jobs" / "stopped").exists()
        handlers = Parallel(n_jobs=2, backend="loky")(delayed(signal.getsignal)(s)
                                                      for s in (signal.SIGINT, signal.SIGTERM))
        assert handlers == [signal.SIG_IGN, signal.SIG_IGN]
        signal.getsignal(signal.SIGINT)(signal.SIGINT, None)  # the first Ctrl-C
        assert (tmp_path / ".jobs" / "stopped").read_text() == "SIGINT\n"
    finally:
        report.on_multirun_end(cfg)
        signal.signal(signal.SIGINT, before)
        from joblib.externals.loky import get_reusable_executor

        get_reusable_executor().shutdown(wait=True)  # its workers would idle on for loky's 300 s in this process
    assert parallel.BACKENDS["loky"] is loky
    assert signal.getsignal(signal.SIGINT) is before
    capsys.readouterr()


SPAWN_SIGNALLED = """
import os, signal, sys, threading, time
from joblib import Parallel, delayed
from coda_exp import sweep_workers

def job(x):
    time.sleep(0.3)
    return x

signalled, done = set(), threading.Event()
def signal_each_child_as_it_appears():  # within ~1 ms of its fork: long before its imports end
    while not done.is_set():
        for pid in set(sweep_workers._workers()) - signalled:
            signalled.add(pid)
            for signum in (signal.SIGINT, signal.SIGTERM):
                try:
                    os.kill(pid, signum)
                except OSError:
                    pass
        time.sleep(0.001)

replaced = sweep_workers.use_quiet_workers()
if sys.argv[1] == "initializer only":  # the workers' initializer without their start-up's signals blocked
    spawn = replaced[1]
    spawn.fork_exec = spawn.fork_exec.__wrapped__
threading.Thread(target=signal_each_child_as_it_appears, daemon=True).start()
try:
    print(Parallel(n_jobs=2, backend="loky")(delayed(job)(i) for i in range(4)), len(signalled) >= 2)
except Exception as err:
    print(type(err).__name__)
done.set()
"""


@pytest.mark.parametrize("spawn", ["blocked", "initializer only"])
def test_a_signal_in_a_workers_start_up_is_dropped_not_a_broken_pool(spawn):
    """A Ctrl-C or SIGTERM reaching a loky worker before its initializer ran (its first second: Python's start-up,
    its imports) ended it, and loky killed every other worker (TerminatedWorkerError): the workers now start with
    both signals blocked, unblocked once the initializer ignores them. Each worker is signalled as it appears."""
    import subprocess

    from tests import ROOT

    proc = subprocess.run([sys.executable, "-c", SPAWN_SIGNALLED, spawn], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, check=False)
    expected = "[0, 1, 2, 3] True" if spawn == "blocked" else "TerminatedWorkerError"
    assert proc.stdout.strip() == expected, proc.stdout[-2000:] + proc.stderr[-2000:]


@pytest.mark.parametrize("name,noted,whole", [("SIGTERM", False, False), ("SIGTERM", True, True),
                                              ("SIGINT", False, False), ("SIGINT", True, True)])
def test_a_sigterm_to_one_worker_alone_says_its_job_alone_stopped(worker, tmp_path, caplog, monkeypatch, name,
                                                                 noted, whole):
    """A SIGTERM to one worker (``kill <pid>``) stops that job alone, the others run on; its message and the
    summary said the sweep stopped there. A stop the main process noted is the sweep's; a Ctrl-C waits for that
    note (a terminal's reaches every process at once) (``tests/e2e/test_joblib_stop.py``: whole sweeps, -m slow)."""
    monkeypatch.setattr(sweep_workers, "NOTE_WAIT_S", 0.1)
    if noted:
        (tmp_path / ".jobs").mkdir()
        (tmp_path / ".jobs" / "stopped").write_text(f"{name}\n")
    assert sweep_workers.sweep_stopping(name, hydra_callbacks.stop_note(tmp_path)) == whole
    with pytest.raises(SystemExit):
        stops.stopped(stops.RunInterrupted(name, 3, tmp_path / "1" / "interrupted.ckpt"), ["seed=2"])
    said = "the sweep stops here" if whole else "this job alone stops (a signal to its worker process)"
    assert said in caplog.text
    outcome = json.loads((tmp_path / ".jobs" / "1.json").read_text())
    summary = hydra_callbacks.sweep_summary([outcome], "train.py -m seed=1,2 resume=auto", whole)
    assert ("the sweep stopped there" in summary) == whole
    assert ("the sweep ran on (a signal reached the worker of the stopped job alone)" in summary) != whole
