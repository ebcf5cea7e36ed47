"""scripts/side_by_side.py: jobs side by side by priority within a budget (fake jobs: no training)."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

# a fake training job: writes Lightning-CSV-like progress (a `step` column) every `every` steps, then exits `code`
FAKE = textwrap.dedent("""
    import sys, time
    out, steps, per_step, code = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    rows = ["loss,step"]
    for step in range(steps):
        time.sleep(per_step)
        if step % 10 == 9 or step == steps - 1:
            rows.append(f"0.5,{step}")
            open(out, "w").write("\\n".join(rows) + "\\n")
    sys.exit(code)
""")


@pytest.fixture
def side(load_script):
    return load_script("side_by_side")


def job(tmp_path, name, steps, per_step, code=0):
    fake = tmp_path / "fake.py"
    fake.write_text(FAKE)
    progress = tmp_path / f"{name}.csv"
    return {"name": name, "steps": steps, "progress": str(progress),
            "argv": [sys.executable, str(fake), str(progress), str(steps), str(per_step), str(code)]}


def run(side, tmp_path, jobs, *args):
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(jobs))
    code = side.main(["--jobs", str(path), "--logs", str(tmp_path / "logs"), "--check-s", "0.1", *args])
    summary = json.loads((tmp_path / "logs" / "summary.json").read_text())
    return code, {row["name"]: row for row in summary}


def test_every_job_finishes_within_a_loose_budget_and_a_failure_is_named(side, tmp_path):
    jobs = [job(tmp_path, "a", 30, 0.002), job(tmp_path, "b", 30, 0.002, code=3), job(tmp_path, "c", 20, 0.002)]
    code, rows = run(side, tmp_path, jobs, "--budget-s", "60", "--max-parallel", "2")
    assert code == 1  # not all finished
    assert rows["a"]["state"] == "finished" and rows["c"]["state"] == "finished"  # c waited for a free slot
    assert rows["b"]["state"] == "failed (exit 3)" and rows["b"]["returncode"] == 3
    assert rows["a"]["last_step"] == 29 and (tmp_path / "logs" / "a.log").exists()


def test_a_job_still_running_when_the_budget_is_spent_is_stopped(side, tmp_path, capsys):
    """The CLI end to end (the loop's times: tests/scripts/test_side_by_side_budget.py, on a fake clock)."""
    jobs = [job(tmp_path, "only", 4000, 0.01)]  # alone: never stopped for its projection, only at the budget
    code, rows = run(side, tmp_path, jobs, "--budget-s", "2", "--tail-s", "0.5", "--grace-s", "0.5",
                     "--rate-window-s", "1")
    assert code == 1 and rows["only"]["state"] == "stopped: budget spent" and rows["only"]["returncode"] == -15
    assert "stop only at step" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # the tail would take the whole budget: no job could run
        side.main(["--jobs", str(tmp_path / "jobs.json"), "--logs", str(tmp_path), "--budget-s", "30", "--tail-s", "30"])
    assert "--tail-s 30: expected >= 0 and less than --budget-s (30)" in capsys.readouterr().err


def test_rates_and_projections(side):
    j = side.Job("x", [], steps=1000, progress="", priority=0)
    assert j.rate() is None and j.projected_end(0.0, 5.0) is None and j.measured_for(100.0) == 0.0
    j.samples = [(0.0, 0), (10.0, 100), (20.0, 300), (60.0, 700)]
    # the oldest measurement within the last 45 s (t = 20) to the newest: 400 steps in 40 s
    assert j.rate() == pytest.approx(10.0)
    assert j.projected_end(60.0, 5.0) == pytest.approx(60.0 + 30.0 + 5.0)
    assert j.measured_for(60.0) == 60.0
    assert j.rate(window_s=200) == pytest.approx(700 / 60)


@pytest.mark.parametrize("content,message", [
    ("[]", "expected a non-empty JSON list"),
    ("{", "cannot read the job list"),
    ('[{"name": "a", "argv": []}]', "job 0 lacks ['steps', 'progress']"),
    (json.dumps([{"name": "a", "argv": [], "steps": 1, "progress": "p"}] * 2), "job 1: the name 'a' is used twice"),
])
def test_a_bad_job_list_is_refused_naming_the_file_and_job(side, tmp_path, content, message):
    path = tmp_path / "jobs.json"
    path.write_text(content)
    with pytest.raises(SystemExit, match=r"jobs\.json: " + message.replace("[", r"\[").replace("]", r"\]")):
        side.load_jobs(path)


def test_progress_is_the_largest_step_of_the_matching_csv_files(side, tmp_path):
    assert side.read_step(str(tmp_path / "none*.csv")) is None
    (tmp_path / "v0.csv").write_text("loss,step\n0.1,99\n,\n0.2,199\n")
    (tmp_path / "v1.csv").write_text("step,x\n49,1\n")
    assert side.read_step(str(tmp_path / "v*.csv")) == 199


def test_a_terminated_side_by_side_stops_its_jobs(tmp_path):
    """Jobs run in process sessions of their own, so a `timeout` that signals side_by_side alone would leave them
    training on (seen on a GPU machine: a run outlived its call and raced its own resumption)."""
    import os
    import signal
    import subprocess
    import time
    from pathlib import Path

    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\ntime.sleep(120)\n")
    pid_file = tmp_path / "pid"
    jobs = [{"name": "long", "steps": 10, "progress": str(tmp_path / "none.csv"),
             "argv": [sys.executable, str(sleeper), str(pid_file)]}]
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    script = Path(__file__).resolve().parents[2] / "scripts" / "side_by_side.py"
    proc = subprocess.Popen([sys.executable, str(script), "--jobs", str(tmp_path / "jobs.json"), "--budget-s", "120",
                             "--logs", str(tmp_path / "logs"), "--check-s", "0.1"])
    deadline = time.time() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.05)
    child = int(pid_file.read_text())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) != 0
    summary = json.loads((tmp_path / "logs" / "summary.json").read_text())
    assert summary[0]["state"] == "stopped: interrupted"
    with pytest.raises(ProcessLookupError):  # the job's process is gone
        for _ in range(100):
            os.kill(child, 0)
            time.sleep(0.05)
