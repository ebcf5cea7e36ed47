"""`make reproduce-table-6-gpu` (scripts/reproduce_table6_gpu.py): the plan, a partial run resumed, the report.
Run on the CPU at fixture scale (trainer=gpu_fast with trainer.accelerator=cpu: the GPU path minus the graph)."""

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys

import pytest

from tests import ROOT

SCRIPT = [sys.executable, str(ROOT / "scripts" / "reproduce_table6_gpu.py")]


def call(tmp_path, *extra: str, budget: int = 300) -> subprocess.CompletedProcess:
    args = [*SCRIPT, "--scale", "fixture", "--seeds", "1", "--models", "transformer", "--no-mps",
            "--budget-s", str(budget), "--results", str(tmp_path / "results"), "--outputs", str(tmp_path / "out"),
            "--", "trainer.accelerator=cpu", f"paths.cache_dir={tmp_path / 'cache'}", *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=600, check=False)


def status(tmp_path) -> dict:
    return json.loads((tmp_path / "out" / "status.json").read_text())


def test_the_plan_resumes_partial_runs_skips_finished_ones_and_the_report_says_which(load_script, tmp_path,
                                                                                    monkeypatch):
    import argparse

    import torch

    script = load_script("reproduce_table6_gpu")
    out = tmp_path / "out"
    partial = out / "coda_transformer-s1" / "checkpoints"
    partial.mkdir(parents=True)
    torch.save({"global_step": 45000, "state_dict": {}}, partial / "last.ckpt")
    torch.save({"global_step": 44000, "state_dict": {}}, partial / "interrupted.ckpt")  # an older stop: not taken
    later = out / "transformer-s3" / "checkpoints"  # stopped by SIGTERM after its last validation: taken
    later.mkdir(parents=True)
    torch.save({"global_step": 1000, "state_dict": {}}, later / "last.ckpt")
    torch.save({"global_step": 1400, "state_dict": {}}, later / "interrupted.ckpt")
    (out / "transformer-s2").mkdir()  # started, never checkpointed: started afresh, its folder kept aside first
    (out / "transformer-s2" / "train.log").write_text("its first steps\n")
    runs = tmp_path / "results" / "runs"
    runs.mkdir(parents=True)
    record = {"task": "mlu", "model": "transformer", "seed": 1, "scale": "paper", "status": "finished",
              "fingerprint": script.fingerprint([]), "run_id": "r1", "created": "2026-11-26T00:00:00Z",
              "metrics": {"test/acc_seq": 0.5}}
    (runs / "r1.json").write_text(json.dumps(record))
    monkeypatch.setattr(script, "load_records", lambda folder: [record])  # the fields plan() reads
    args = argparse.Namespace(
        results=tmp_path / "results", outputs=out, scale="paper", extra=[], seeds=[1, 2], models=list(script.MODELS),
        python="python", trainer="gpu_fast", gate_every=1000, steps=100000)
    jobs, status = script.plan(args)
    assert [j["name"] for j in jobs] == ["coda_transformer-s1", "transformer-s2", "coda_transformer-s2"]
    assert status == {"transformer-s1": {"state": "finished", "record": "r1"},
                      "coda_transformer-s1": {"state": "resuming", "from": str(partial / "last.ckpt"), "step": 45000},
                      "transformer-s2": {"state": "queued", "existing": str(out / "transformer-s2")},
                      "coda_transformer-s2": {"state": "queued"}}
    assert script.resume_checkpoint(out / "transformer-s3") == (later / "interrupted.ckpt", 1400)
    assert script.resume_checkpoint(out / "transformer-s2") is None
    resume = jobs[0]["argv"]
    assert f"ckpt_path={partial / 'last.ckpt'}" in resume and "trainer=gpu_fast" in resume
    assert any(a.startswith(f"hydra.run.dir={out / 'coda_transformer-s1'}.resume-") for a in resume)
    assert (out / "transformer-s2" / "train.log").is_file()  # the plan reads only (--list shows it)
    report = script.report(args, status)
    assert report["coda_transformer-s1"]["state"] == "partial" and report["coda_transformer-s1"]["step"] == 45000
    assert report["transformer-s1"]["state"] == "finished" and report["transformer-s2"]["state"] == "not started"
    assert json.loads((out / "status.json").read_text()) == report


def test_bad_arguments_are_one_line_before_anything_runs(load_script, tmp_path, capsys):
    script = load_script("reproduce_table6_gpu")
    where = ["--results", str(tmp_path / "results"), "--outputs", str(tmp_path / "out"), "--no-mps"]
    assert script.main(["--scale", "bogus", *where]) == 2
    assert capsys.readouterr().err == "error: --scale bogus: expected one of: cpu, fixture, paper (configs/scale/)\n"
    assert script.main(["--models", "transformer", "transformr", *where]) == 2
    assert capsys.readouterr().err.startswith("error: --models transformr: expected one of: ")
    assert script.main(["--budget-s", "0", *where]) == 2
    assert "--budget-s 0: expected a number > 0" in capsys.readouterr().err
    assert script.main(["--budget-s", "50", *where]) == 2  # the tail (60 s) would take all of it
    assert capsys.readouterr().err == "error: --tail-s 60: expected less than --budget-s (50): no run could start\n"
    assert script.main([*where, "--", "task.epochz=3"]) == 2
    err = capsys.readouterr().err
    assert "train.py overrides after --: task.epochz=3" in err and "Could not override 'task.epochz'" in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "results").exists()  # nothing touched


def test_the_runs_go_through_side_by_side_s_loop_all_at_once(load_script, tmp_path, monkeypatch):
    """One supervision loop: side_by_side.supervise (its budget, tail, stops and signals on a fake clock:
    tests/scripts/test_side_by_side_budget.py), every job at once, its summary rows and signal returned."""
    script, calls = load_script("reproduce_table6_gpu"), []

    def fake_loop(jobs, logs, t0, budget_s, **options):
        calls.append(([j.name for j in jobs], logs, t0, budget_s, options))
        jobs[0].state = "finished"
        return 143

    monkeypatch.setattr(script.side_by_side, "supervise", fake_loop)
    specs = [{"name": f"r{i}", "argv": ["train.py"], "steps": 20, "progress": "p"} for i in range(3)]
    rows, signalled = script.supervise(specs, tmp_path, 5.0, 660.0, 60.0)
    assert calls == [(["r0", "r1", "r2"], tmp_path, 5.0, 660.0, {"max_parallel": 3, "tail_s": 60.0})]
    assert signalled == 143 and [r["state"] for r in rows] == ["finished", "queued", "queued"]
    assert rows[0] == {"name": "r0", "state": "finished", "returncode": None, "last_step": 0, "steps": 20,
                       "seconds": None}


def run_with(script, monkeypatch, tmp_path, rows: list[dict], logs: dict[str, str]):
    """main() at fixture scale, its runs replaced by ``rows`` (their summary) and their logs."""
    def fake_supervise(jobs, folder, t0, budget_s, tail_s):
        for name, text in logs.items():
            (folder / f"{name}.log").write_text(text)
        return rows, 0

    monkeypatch.setattr(script, "supervise", fake_supervise)
    return script.main(["--scale", "fixture", "--seeds", "1", "--no-mps", "--results", str(tmp_path / "results"),
                        "--outputs", str(tmp_path / "out")])


def test_failed_runs_are_reported_failed_and_the_call_fails(load_script, tmp_path, monkeypatch, capsys):
    """A run that exits 2 (a bad value) is "failed" with its log's error line, not "not started", and the call exits
    1 (make stops); runs the budget stopped are missing, exit 3 (make goes on to the tables: call again)."""
    script = load_script("reproduce_table6_gpu")
    rows = [{"name": "transformer-s1", "state": "failed (exit 2)", "returncode": 2},
            {"name": "coda_transformer-s1", "state": "not started: budget", "returncode": None}]
    log = "Traceback? no\nerror: invalid config values (fix the override or the YAML):\n  task.epochs = -1: expected\n"
    assert run_with(script, monkeypatch, tmp_path, rows, {"transformer-s1": log}) == 1
    out, err = capsys.readouterr()
    failed = status(tmp_path)["transformer-s1"]
    assert failed["state"] == "failed" and failed["exit"] == 2
    assert failed["error"] == "error: invalid config values (fix the override or the YAML): task.epochs = -1: expected"
    assert "transformer-s1           failed (exit 2): error: invalid config values" in out
    assert "1 of 2 runs failed" in err and "call again (`make" not in out
    assert status(tmp_path)["coda_transformer-s1"]["state"] == "not started"
    crash = "Traceback (most recent call last):\n  File x\nRuntimeError: CUDA out of memory\nmore\n"
    rows[0]["state"] = "failed (exit 1)"
    assert run_with(script, monkeypatch, tmp_path, rows, {"transformer-s1": crash}) == 1
    assert status(tmp_path)["transformer-s1"]["error"] == "RuntimeError: CUDA out of memory"
    capsys.readouterr()
    rows = [{"name": "transformer-s1", "state": "stopped: budget spent", "returncode": -15},
            {"name": "coda_transformer-s1", "state": "not started: budget", "returncode": None}]
    assert run_with(script, monkeypatch, tmp_path, rows, {}) == 3  # the budget's stop: resumable, not a failure
    assert "missing 2 of 2 runs: call again" in capsys.readouterr().out
    import torch  # a kill -9 (not the run's own failure) after a checkpoint: partial too

    (tmp_path / "out" / "transformer-s1" / "checkpoints").mkdir(parents=True)
    torch.save({"global_step": 7, "state_dict": {}}, tmp_path / "out" / "transformer-s1" / "checkpoints" / "last.ckpt")
    rows[0].update(state="failed (exit -9)", returncode=-9)
    assert run_with(script, monkeypatch, tmp_path, rows, {}) == 3
    assert status(tmp_path)["transformer-s1"]["killed"] == "signal 9"


def test_list_changes_nothing_and_a_call_keeps_a_folder_it_did_not_write_aside(load_script, tmp_path, monkeypatch,
                                                                              capsys):
    """The probe: --list deleted a run folder without a checkpoint (its train.log with it); a call that runs did the
    same, to a run still going too. --list moves nothing; a call keeps such a folder as <folder>.incomplete-<time>
    (one line) and starts the run afresh; a folder a live process holds stops the call (one error) untouched."""
    script = load_script("reproduce_table6_gpu")
    out, started = tmp_path / "out", []
    (out / "transformer-s1").mkdir(parents=True)
    (out / "transformer-s1" / "train.log").write_text("x\n")

    def fake_supervise(jobs, *args):  # what the outputs hold when the runs start
        started.append(sorted(p.name for p in out.iterdir() if p.name != "logs"))
        return [{"name": j["name"], "state": "finished", "returncode": 0} for j in jobs], 0

    monkeypatch.setattr(script, "supervise", fake_supervise)
    where = ["--scale", "fixture", "--seeds", "1", "--models", "transformer", "--no-mps", "--results",
             str(tmp_path / "res"), "--outputs", str(out)]
    assert script.main(["--list", *where]) == 0
    assert json.loads(capsys.readouterr().out)[0]["name"] == "transformer-s1" and not started
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and [p.name for p in out.iterdir()] == ["transformer-s1"]
    assert (out / "transformer-s1" / "train.log").read_text() == "x\n"
    assert script.main(where) == 3  # no record: the fake run finished without one
    (aside,) = out.glob("transformer-s1.incomplete-*")
    assert (aside / "train.log").read_text() == "x\n" and started == [[aside.name]]  # moved before the run started
    assert f"transformer-s1: its folder had no checkpoint: kept as {aside}; the run starts afresh" in capsys.readouterr().out
    (out / "transformer-s1").mkdir()  # a run still going (its parent process stands in for it), no checkpoint yet
    (out / "transformer-s1" / ".run_owner").write_text(json.dumps({"host": socket.gethostname(), "pid": os.getppid()}))
    assert script.main(where) == 2 and len(started) == 1
    assert capsys.readouterr().err == (f"error: {out / 'transformer-s1'} is in use by process {os.getppid()} (a run "
                                       "still going: another call of this script?); wait for it to end or stop it, "
                                       "then call again\n")
    assert [p.name for p in (out / "transformer-s1").iterdir()] == [".run_owner"]


@pytest.mark.parametrize("by", ["CODA_EXP_ROOT", "the current folder"])
def test_the_default_folders_are_the_project_s(load_script, tmp_path, monkeypatch, capsys, by):
    """Without --results and --outputs, the folders are under coda_exp.environment.root_dir() (CODA_EXP_ROOT, else the
    checkout when called inside it, else the current folder), as the runs' own: not always the checkout's."""
    script = load_script("reproduce_table6_gpu")
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(project if by == "the current folder" else elsewhere)
    if by == "CODA_EXP_ROOT":
        monkeypatch.setenv("CODA_EXP_ROOT", str(project))
    else:
        monkeypatch.delenv("CODA_EXP_ROOT", raising=False)
    assert script.main(["--list", "--scale", "fixture", "--seeds", "1", "--models", "transformer", "--no-mps"]) == 0
    (job,) = json.loads(capsys.readouterr().out)
    assert f"paths.results_dir={project / 'results' / 'table_6_gpu'}" in job["argv"]
    assert f"hydra.run.dir={project / 'outputs' / 'table_6_gpu' / 'transformer-s1'}" in job["argv"]
    assert not any(project.iterdir()) and not any(elsewhere.iterdir())  # --list made nothing


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize(("code", "goes_on"), [(1, False), (2, False), (3, True)])
def test_the_make_target_stops_when_runs_failed_and_goes_on_when_the_budget_stopped_them(tmp_path, code, goes_on):
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\necho "$1" >> {tmp_path}/calls\ncase "$1" in *reproduce_table6_gpu.py) exit {code};; '
                    f'esac\nexit 0\n')
    fake.chmod(0o755)
    out = subprocess.run(["make", "-o", ".venv/.installed", "reproduce-table-6-gpu", f"PY={fake}"], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    calls = (tmp_path / "calls").read_text().split()
    assert (out.returncode == 0) == goes_on, out.stderr
    assert calls[-1].endswith("results_index.py" if goes_on else "reproduce_table6_gpu.py")
    assert any(line.startswith("some runs are missing (the budget") for line in out.stdout.splitlines()) == goes_on


@pytest.mark.slow  # ~30 s: three calls of the script, two training runs
def test_a_killed_run_is_partial_then_resumed_to_its_record_then_skipped(tmp_path):
    kill = ["+callbacks.kill._target_=tests.e2e.kill_hook.KillAtStep", "+callbacks.kill.step=10"]
    first = call(tmp_path, *kill)
    assert first.returncode == 3, first.stdout[-3000:] + first.stderr[-3000:]  # a run is missing
    assert status(tmp_path)["transformer-s1"] == {"state": "partial", "step": 10, "before": "queued",
                                                   "killed": "signal 9",
                                                   "resume": str(tmp_path / "out" / "transformer-s1" / "checkpoints" /
                                                                 "last.ckpt")}
    assert "missing 1 of 1 runs" in first.stdout
    second = call(tmp_path)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    done = status(tmp_path)["transformer-s1"]
    assert done["state"] == "finished" and done["before"] == "resuming"
    (record,) = (tmp_path / "results" / "runs").glob("*.json")
    rec = json.loads(record.read_text())
    assert rec["steps"] == 20 and rec["resumed_from"].endswith("transformer-s1/checkpoints/last.ckpt")
    assert rec["fast"]["static_shapes"] and rec["scale"] == "fixture"
    third = call(tmp_path)
    assert third.returncode == 0 and "nothing to run" in third.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_the_make_target_runs_the_script_then_the_tables_curves_breakdown_and_gates():
    out = subprocess.run(["make", "-n", "-o", ".venv/.installed", "reproduce-table-6-gpu", "TABLE6_BUDGET_S=700"],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout
    lines = [shlex.split(line.split("||")[0]) for line in out.splitlines() if ".py" in line]
    scripts = [next(a for a in line if a.endswith(".py")).rsplit("/", 1)[-1] for line in lines]
    assert scripts == ["reproduce_table6_gpu.py", "make_tables.py", "plot_learning_curves.py", "mlu_breakdown.py",
                       "gate_ablation_table.py", "results_index.py"]
    first = lines[0]
    assert first[first.index("--budget-s") + 1] == "700" and first[first.index("--scale") + 1] == "paper"
    assert all("results/table_6_gpu" in " ".join(line) for line in lines[:-1])  # the index covers all of results/


def test_a_run_on_files_of_another_size_is_finished_by_a_record_of_those_files_only(load_script, tmp_path,
                                                                                   monkeypatch, capsys):
    """The probe: with ``-- data.dir=<MLU files of another size>``, a record of generated data at the plain scale
    counted as the files' run (skipped: the new data never trained), while the files runs' own records, whose scale
    names the data read (``paper (data.num_train=40, ...)``: ``MLUDataModule.scale_notes``), never did (trained
    again at every call). A run is finished by a record of its configuration and its data, the label it records."""
    import argparse

    from coda_exp.data.seq2seq.mlu import write_mlu_files

    script = load_script("reproduce_table6_gpu")
    write_mlu_files(files := tmp_path / "mlu", num_train=40, num_test=8)  # data_seed 1234's first examples
    on_files = "paper (data.num_train=40, data.num_validation=8, data.num_test=8)"
    records = [{"task": "mlu", "model": model, "seed": 1, "scale": scale, "status": "finished",
                "fingerprint": script.fingerprint([]), "run_id": run_id, "created": "2026-11-28T00:00:00Z",
                "metrics": {"test/acc_seq": 0.5}}
               for model, scale, run_id in (("transformer", "paper", "generated"),
                                            ("coda_transformer", on_files, "files"))]
    (tmp_path / "results" / "runs").mkdir(parents=True)
    monkeypatch.setattr(script, "load_records", lambda folder: records)

    def plan(*extra: str):
        args = argparse.Namespace(
            results=tmp_path / "results", outputs=tmp_path / "out", scale="paper", extra=list(extra), seeds=[1],
            models=list(script.MODELS), python="python", trainer="gpu_fast", gate_every=1000, steps=100000)
        jobs, before = script.plan(args)
        return args, [j["name"] for j in jobs], before

    args, jobs, before = plan(f"data.dir={files}")
    assert jobs == ["transformer-s1"] and before["coda_transformer-s1"] == {"state": "finished", "record": "files"}
    assert script.report(args, before)["coda_transformer-s1"]["state"] == "finished"
    assert script.report(args, before)["transformer-s1"]["state"] == "not started"
    _, jobs, before = plan()  # generated data, as before: the plain scale's record
    assert jobs == ["coda_transformer-s1"] and before["transformer-s1"] == {"state": "finished", "record": "generated"}
    write_mlu_files(other := tmp_path / "other", num_train=40, num_test=8, seed=7)  # other examples: another dataset
    args, jobs, _ = plan(f"data.dir={other}")
    assert jobs == ["transformer-s1", "coda_transformer-s1"]
    assert all(label.startswith("paper (data.files=") for label in args.labels.values())
    where = ["--seeds", "1", "--no-mps", "--results", str(tmp_path / "results"), "--outputs", str(tmp_path / "out")]
    capsys.readouterr()
    assert script.main([*where, "--", f"data.dir={tmp_path / 'none'}"]) == 2  # data the runs cannot read: one line
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: ") and f"data directory '{tmp_path / 'none'}' does not exist" in line
