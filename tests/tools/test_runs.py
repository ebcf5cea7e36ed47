"""coda-exp runs: every run folder under outputs/ and where it stands."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from coda_exp.errors import UserError
from coda_exp.tools import runs


def _folder(root, name, seed, results):
    folder = root / name
    (folder / "checkpoints").mkdir(parents=True)
    OmegaConf.save({"seed": seed, "scale_name": "fixture", "task": {"name": "snli"}, "model": {"name": "decompatt"},
                    "paths": {"output_dir": str(folder), "results_dir": str(results)}},
                   folder / "config_resolved.yaml")
    time.sleep(0.01)  # newest first, by the config's time
    return folder


def test_each_folder_is_finished_running_stopped_or_failed(tmp_path, capsys):
    log_dir, results = tmp_path / "outputs", tmp_path / "results"
    finished = _folder(log_dir / "runs" / "snli-decompatt", "a-s1", 1, results)
    stopped = _folder(log_dir / "multiruns" / "2026", "0-snli-decompatt-s2", 2, results)
    failed = _folder(log_dir / "runs" / "snli-decompatt", "c-s3", 3, results)
    running = _folder(log_dir / "runs" / "snli-decompatt", "d-s4", 4, results)
    (results / "runs").mkdir(parents=True)
    record = {"schema_version": 1, "run_id": "r1", "task": "snli", "model": "decompatt", "attention": {}, "seed": 1,
              "scale": "fixture", "metrics": {}, "steps": 15, "epochs": 3, "wall_time_s": 1.0, "device": "cpu",
              "git_commit": None, "overrides": [], "created": "2026-01-01T00:00:00+00:00",
              "status": "finished", "output_dir": str(finished)}
    (results / "runs" / "r1.json").write_text(json.dumps(record))
    torch.save({"global_step": 7, "state_dict": {}}, stopped / "checkpoints" / "interrupted.ckpt")
    torch.save({"global_step": 5, "state_dict": {}}, stopped / "checkpoints" / "last.ckpt")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (running / ".run_owner").write_text(json.dumps({"host": socket.gethostname(), "pid": sleeper.pid}))
        (failed / ".run_owner").write_text(json.dumps({"host": socket.gethostname(), "pid": 2 ** 22 + 1}))
        assert runs.main(["--log-dir", str(log_dir), "--json", str(tmp_path / "runs.json")]) == 0
    finally:
        sleeper.kill()
    rows = {r["seed"]: r for r in json.loads((tmp_path / "runs.json").read_text())}
    assert [rows[s]["state"] for s in (1, 2, 3, 4)] == ["finished", "stopped", "failed", "running"]
    assert rows[1]["step"] == 15 and rows[1]["record"] == str(results / "runs" / "r1.json")
    assert rows[2]["step"] == 7 and rows[2]["checkpoint"] == str(stopped / "checkpoints" / "interrupted.ckpt")
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["state", "step", "task", "model", "seed", "scale", "folder"]
    assert [line.split()[0] for line in lines[1:5]] == ["running", "failed", "stopped", "finished"]  # newest first
    assert "1 finished, 1 running, 1 stopped, 1 failed" in out and "resume=auto" in out
    assert runs.main(["--log-dir", str(log_dir), "--left"]) == 0
    left = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in left[1:3]] == ["failed", "stopped"] and "finished" not in left[3]


def test_a_folder_whose_config_resolved_yaml_was_deleted_is_listed_by_its_checkpoint(tmp_path, capsys):
    log_dir = tmp_path / "outputs"
    folder = _folder(log_dir / "runs" / "snli-decompatt", "a-s5", 5, tmp_path / "results")
    config = OmegaConf.to_container(OmegaConf.load(folder / "config_resolved.yaml"))
    (folder / "config_resolved.yaml").unlink()
    torch.save({"global_step": 9, "state_dict": {}, "coda_exp.run_config": config},
               folder / "checkpoints" / "last.ckpt")
    assert runs.main(["--log-dir", str(log_dir), "--json", str(tmp_path / "runs.json")]) == 0
    (row,) = json.loads((tmp_path / "runs.json").read_text())
    assert (row["state"], row["step"], row["task"], row["seed"]) == ("stopped", 9, "snli", 5)
    assert row["note"] == "no config_resolved.yaml"
    assert capsys.readouterr().out.splitlines()[1].endswith(
        f"{folder}  resumes from {folder / 'checkpoints' / 'last.ckpt'}  (no config_resolved.yaml)")


def test_a_folder_whose_config_resolved_yaml_cannot_be_read_is_listed_as_resume_auto_reads_it(tmp_path):
    """It was listed stopped with no names while resume=auto skipped it: both read its checkpoint's config."""
    log_dir = tmp_path / "outputs"
    folder = _folder(log_dir / "runs" / "snli-decompatt", "a-s6", 6, tmp_path / "results")
    config = OmegaConf.to_container(OmegaConf.load(folder / "config_resolved.yaml"))
    (folder / "config_resolved.yaml").write_text("task: [unclosed\n")
    torch.save({"global_step": 9, "state_dict": {}, "coda_exp.run_config": config},
               folder / "checkpoints" / "last.ckpt")
    (row,) = runs.states(log_dir)
    assert (row.state, row.step, row.task, row.seed) == ("stopped", 9, "snli", 6)
    assert row.note == "config_resolved.yaml cannot be read; its checkpoint's config is used"
    from coda_exp.auto_resume import run_config

    assert run_config(folder, warn=False) == (config, folder / "checkpoints" / "last.ckpt")


def test_a_debug_run_is_no_failure_and_a_job_failed_before_its_config_is_listed(tmp_path, capsys):
    """debug=fdr ends by design without record and checkpoint: "debug", not failed; a sweep job whose config
    error came before config_resolved.yaml is listed as failed with its log's last error."""
    from coda_exp.run_folder import RUN_ENDED

    log_dir = tmp_path / "outputs"
    debug = _folder(log_dir / "runs" / "wikiqa-decompatt", "a-s1", 1, tmp_path / "results")
    config = OmegaConf.load(debug / "config_resolved.yaml")
    config.save_record, config.trainer = False, {"fast_dev_run": True, "overfit_batches": 0.0}
    OmegaConf.save(config, debug / "config_resolved.yaml")
    (debug / "train.log").write_text(f"[2026][coda_exp.pipeline][INFO] - {RUN_ENDED} finished at step 1 (...)\n")
    crashed = _folder(log_dir / "runs" / "wikiqa-decompatt", "b-s2", 2, tmp_path / "results")
    OmegaConf.save(config, crashed / "config_resolved.yaml")  # a debug run that crashed: failed, its error shown
    (crashed / "train.log").write_text("[2026][coda_exp.pipeline][ERROR] - run failed\nTraceback:\n  x\n"
                                       "ValueError: boom\n")
    job = log_dir / "multiruns" / "2026" / "0-mlu-decompatt-s1"
    job.mkdir(parents=True)
    (job / "train.log").write_text("[2026][x][INFO] - hi\n[2026][coda_exp.hydra_callbacks][ERROR] - job failed: "
                                   "ConfigError: model=decompatt does not fit task=mlu\n[2026][x][INFO] - bye\n")
    assert runs.main(["--log-dir", str(log_dir), "--json", str(tmp_path / "runs.json")]) == 0
    rows = {Path(r["folder"]).name: r for r in json.loads((tmp_path / "runs.json").read_text())}
    assert (rows["a-s1"]["state"], rows["a-s1"]["step"]) == ("debug", 1)
    assert rows["a-s1"]["note"] == "ended; save_record=false: no record"
    assert (rows["b-s2"]["state"], rows["b-s2"]["note"]) == ("failed", "run failed: ValueError: boom")
    job_row = rows["0-mlu-decompatt-s1"]
    assert job_row["state"] == "failed" and (job_row["task"], job_row["model"], job_row["seed"]) == (
        "mlu", "decompatt", 1)  # named by its folder: no config of any kind
    assert job_row["note"] == ("no config_resolved.yaml; job failed: ConfigError: model=decompatt does not fit "
                               "task=mlu")
    out = capsys.readouterr().out
    assert "1 debug, 2 failed" in out and f"{job}  (no config_resolved.yaml; job failed: ConfigError" in out
    assert runs.main(["--log-dir", str(log_dir), "--left"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:3]] == ["failed", "failed"]


def test_a_run_refused_before_it_started_is_removed_or_listed_as_refused(tmp_path, capsys):
    """A single run's Hydra folder that a user's error stopped before the run started: removed when it holds only
    Hydra's files; kept with the error in its train.log where that log had lines (listed as refused, not --left)."""
    from coda_exp.run_folder import OWNER, refused

    log_dir = tmp_path / "outputs"
    made = []
    for name, log_text in (("a-s1", ""), ("b-s2", "[2026][x][WARNING] - a warning first\n")):
        folder = log_dir / "runs" / "snli-decompatt" / name
        (folder / ".hydra").mkdir(parents=True)
        OmegaConf.save({"seed": int(name[-1]), "task": {"name": "snli"}, "model": {"name": "decompatt"}},
                       folder / ".hydra" / "config.yaml")
        (folder / "train.log").write_text(log_text)
        (folder / OWNER).write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))
        made.append(folder)
    handler = logging.FileHandler(made[1] / "train.log", mode="a")  # Hydra's train.log handler
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    logging.getLogger().addHandler(handler)
    try:
        refused(made[0], UserError("gone"))
        refused(made[1], UserError("invalid config values (fix the override or the YAML):\n  data.batch_size = 0"))
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    assert not made[0].exists() and made[1].is_dir()
    (row,) = runs.states(log_dir)
    assert (row.state, row.task, row.seed) == ("refused", "snli", 2)
    assert row.note == ("run refused before it started: invalid config values (fix the override or the YAML): "
                        "data.batch_size = 0")
    assert runs.main(["--log-dir", str(log_dir), "--left"]) == 0
    assert "no unfinished run folders" in capsys.readouterr().out
    (made[1] / "train.log").write_text("")  # a folder holding more than Hydra's files is never removed
    (made[1] / "notes.txt").write_text("mine")
    refused(made[1], UserError("x"))
    assert (made[1] / "notes.txt").is_file() and (made[1] / ".hydra" / "config.yaml").is_file()


def test_a_job_whose_run_went_on_elsewhere_is_no_failure(tmp_path, capsys):
    """resume=auto run again: each job's new Hydra folder keeps only a train.log, whose lines say the run resumed in
    its earlier folder or had finished there: listed as resumed / skipped with that folder, not as failed, and left
    out of --left; a failed job's note keeps the bad keys its error lists on the next lines, and its names are its
    Hydra config's."""
    from coda_exp.run_folder import FINISHED_IN, RESUMED_IN

    log_dir, results = tmp_path / "outputs", tmp_path / "results"
    earlier = _folder(log_dir / "runs" / "snli-decompatt", "a-s1", 1, results)
    skipped = log_dir / "multiruns" / "2027" / "0-snli-decompatt-s1"
    resumed = log_dir / "runs" / "snli-decompatt" / "b-s2"
    failed = log_dir / "multiruns" / "2027" / "1-wikiqa-decompatt-s7"
    for folder in (skipped, resumed, failed):
        (folder / ".hydra").mkdir(parents=True)
    record = results / "runs" / "r1.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"schema_version": 1, "run_id": "r1", "task": "snli", "model": "decompatt",
                                  "attention": {}, "seed": 1, "scale": "fixture", "metrics": {}, "steps": 15,
                                  "epochs": 3, "wall_time_s": 1.0, "device": "cpu", "git_commit": None,
                                  "overrides": [], "created": "2027-01-01T00:00:00+00:00", "status": "finished",
                                  "output_dir": str(earlier)}))
    (skipped / "train.log").write_text(f"[2027][coda_exp.auto_resume][WARNING] - resume=auto: {FINISHED_IN} "
                                       f"{earlier} (record {record}): nothing to run\n")
    (resumed / "train.log").write_text(f"[2027][coda_exp.pipeline][INFO] - {RESUMED_IN} {earlier} (its Hydra folder "
                                       f"{resumed} keeps only this log)\n[2027][x][INFO] - run ended: stopped\n")
    OmegaConf.save({"task": {"name": "wikiqa"}, "model": {"name": "decompatt"}, "seed": 7, "scale_name": "fixture",
                    "paths": {"output_dir": "${hydra:runtime.output_dir}"}}, failed / ".hydra" / "config.yaml")
    (failed / "train.log").write_text("[2027][coda_exp.hydra_callbacks][ERROR] - job failed: SweepUserError: "
                                      "ConfigError: invalid config values (fix the override or the YAML):\n"
                                      "  model.dropout = 1.5: expected a probability in [0, 1)\n")
    assert runs.main(["--log-dir", str(log_dir), "--json", str(tmp_path / "runs.json")]) == 0
    rows = {Path(r["folder"]).name: r for r in json.loads((tmp_path / "runs.json").read_text())}
    assert (rows["0-snli-decompatt-s1"]["state"], rows["0-snli-decompatt-s1"]["record"]) == ("skipped", str(record))
    assert rows["0-snli-decompatt-s1"]["note"] == f"finished already in {earlier}: nothing ran"
    assert (rows["b-s2"]["state"], rows["b-s2"]["note"]) == ("resumed", f"resumed in {earlier}")
    assert (rows["b-s2"]["task"], rows["b-s2"]["model"], rows["b-s2"]["seed"]) == ("snli", "decompatt", 2)
    bad = rows["1-wikiqa-decompatt-s7"]
    assert (bad["state"], bad["task"], bad["model"], bad["seed"], bad["scale"]) == (
        "failed", "wikiqa", "decompatt", 7, "fixture")
    assert bad["note"].endswith("invalid config values (fix the override or the YAML): model.dropout = 1.5: "
                                "expected a probability in [0, 1)")
    assert "1 finished, 1 failed, 1 resumed, 1 skipped" in capsys.readouterr().out
    assert runs.main(["--log-dir", str(log_dir), "--left"]) == 0
    left = capsys.readouterr().out.splitlines()
    assert len(left) == 3 and left[1].startswith("failed") and left[2] == "1 failed"


def test_no_folder_is_one_message(tmp_path, capsys):
    with pytest.raises(UserError, match="no such folder"):
        runs.main(["--log-dir", str(tmp_path / "nowhere")])
    (tmp_path / "outputs").mkdir()
    assert runs.main(["--log-dir", str(tmp_path / "outputs"), "--left"]) == 0
    assert capsys.readouterr().out.strip() == f"no unfinished run folders under {tmp_path / 'outputs'}"


def test_a_file_for_the_folder_or_a_bad_json_path_is_one_message(tmp_path):
    """--log-dir given a file says it is a file (it said "no such folder"); --json into a path under a file, or a
    folder, is one message naming it before any folder is read (they were a NotADirectoryError / IsADirectoryError
    traceback)."""
    (tmp_path / "outputs").mkdir()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UserError, match=r"--log-dir .*afile: a file, not a folder; expected the runs' paths.log_dir"):
        runs.main(["--log-dir", str(tmp_path / "afile")])
    out = str(tmp_path / "outputs")
    with pytest.raises(UserError, match=r"--json .*afile/x.json: .*afile is a file, not a folder"):
        runs.main(["--log-dir", out, "--json", str(tmp_path / "afile" / "x.json")])
    with pytest.raises(UserError, match=r"--json .*: a folder; expected the file to write the list of runs to \(e.g."):
        runs.main(["--log-dir", out, "--json", str(tmp_path)])
    assert runs.main(["--log-dir", out, "--json", str(tmp_path / "new" / "runs.json")]) == 0
    assert json.loads((tmp_path / "new" / "runs.json").read_text()) == []


def test_the_default_folder_is_where_runs_go_from_any_folder(tmp_path, monkeypatch, capsys):
    """outputs/ under paths.root_dir (the checkout, or $CODA_EXP_ROOT), not under the shell's folder."""
    (tmp_path / "root" / "outputs").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.setenv("CODA_EXP_ROOT", str(tmp_path / "root"))
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert runs.main(["--left"]) == 0
    assert capsys.readouterr().out.strip() == f"no unfinished run folders under {tmp_path / 'root' / 'outputs'}"


def test_a_real_stopped_run_is_listed_with_its_step(compose, tmp_path, capsys):
    from coda_exp.pipeline import run

    stop = ["+callbacks.sig._target_=tests.e2e.kill_hook.SignalAtStep", "+callbacks.sig.step=3",
            "+callbacks.sig.signum=2"]
    with pytest.raises(SystemExit):
        run(compose(["task=snli", "scale=fixture", "logger=none", "task.epochs=2", *stop,
                     f"paths.output_dir={tmp_path}/outputs/runs/snli-decompatt/x-s1"], tmp_path))
    capsys.readouterr()  # the run's own output
    assert runs.main(["--log-dir", str(tmp_path / "outputs")]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].split()[:6] == ["stopped", "3", "snli", "decompatt", "1", "fixture"]
    assert os.path.isdir(out.splitlines()[1].split()[6])
    assert out.splitlines()[1].split()[-3:-1] == ["resumes", "from"]
    assert os.path.isfile(out.splitlines()[1].split()[-1])


def test_an_ended_run_without_record_is_not_stopped_by_its_last_checkpoint(tmp_path, capsys):
    """debug=limit, debug=overfit and save_record=false write last.ckpt and end without a record: they used to be
    listed as "stopped ... resumes from last.ckpt" (and by --left); one resumed past its end and stopped is."""
    from coda_exp.run_folder import RUN_ENDED

    log_dir = tmp_path / "outputs"
    folders = {}
    for name, trainer, ckpt_step in (("a-s1", {"limit_train_batches": 10}, 160), ("b-s2", {}, 40),
                                     ("c-s3", {}, 48)):
        folder = folders[name] = _folder(log_dir / "runs" / "snli-decompatt", name, 1, tmp_path / "results")
        config = OmegaConf.load(folder / "config_resolved.yaml")
        config.save_record, config.trainer = False, trainer
        OmegaConf.save(config, folder / "config_resolved.yaml")
        ended = 160 if name == "a-s1" else 40
        (folder / "train.log").write_text(f"[2026][coda_exp.pipeline][INFO] - {RUN_ENDED} finished at step {ended} "
                                          "(save_record=false: no record)\n")
        torch.save({"global_step": ckpt_step, "state_dict": {}}, folder / "checkpoints" / "last.ckpt")
    assert runs.main(["--log-dir", str(log_dir), "--json", str(tmp_path / "runs.json")]) == 0
    rows = {Path(r["folder"]).name: r for r in json.loads((tmp_path / "runs.json").read_text())}
    assert (rows["a-s1"]["state"], rows["a-s1"]["step"], rows["a-s1"]["checkpoint"]) == ("debug", 160, None)
    assert (rows["b-s2"]["state"], rows["b-s2"]["step"]) == ("unrecorded", 40)
    assert (rows["c-s3"]["state"], rows["c-s3"]["step"]) == ("stopped", 48)  # resumed after its end, then stopped
    assert "1 debug, 1 unrecorded, 1 stopped" in capsys.readouterr().out
    assert runs.main(["--log-dir", str(log_dir), "--left"]) == 0
    left = capsys.readouterr().out.splitlines()
    assert left[1].split()[0] == "stopped" and "c-s3" in left[1] and left[2] == "1 stopped"


@pytest.mark.parametrize("debug", ["fdr", "limit"])
def test_a_real_debug_run_is_listed_as_debug(compose, tmp_path, capsys, debug):
    from coda_exp.pipeline import run

    folder = tmp_path / "outputs" / "runs" / "snli-decompatt" / "x-s1"
    folder.mkdir(parents=True)
    handler = logging.FileHandler(folder / "train.log")  # Hydra's job log, which compose does not set up
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    root, level = logging.getLogger(), logging.getLogger().level
    root.addHandler(handler)
    root.setLevel(logging.INFO)  # Hydra's job logging's level
    try:
        run(compose(["task=snli", "scale=fixture", "logger=none", f"debug={debug}", f"paths.output_dir={folder}"],
                    tmp_path))
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        handler.close()
    capsys.readouterr()  # the run's own output
    assert runs.main(["--log-dir", str(tmp_path / "outputs")]) == 0
    out = capsys.readouterr().out
    step = "1" if debug == "fdr" else "10"  # debug=limit: 2 epochs of 5 batches, and a last.ckpt
    assert out.splitlines()[1].split()[:6] == ["debug", step, "snli", "decompatt", "1", "fixture"], out
    assert "resumes from" not in out


def test_runs_that_differ_in_configuration_are_told_apart(tmp_path, capsys):
    """model/attention=coda beside a softmax run of attconv_light: both were listed as plain attconv_light."""
    log_dir, results = tmp_path / "outputs", tmp_path / "results"
    plain = _folder(log_dir / "runs" / "snli-decompatt", "a-s1", 1, results)
    coda = _folder(log_dir / "runs" / "snli-decompatt", "b-s1", 1, results)
    (plain / ".hydra").mkdir()
    (plain / ".hydra" / "overrides.yaml").write_text("- task=snli\n- scale=fixture\n- task.epochs=2\n")
    (coda / ".hydra").mkdir()
    (coda / ".hydra" / "overrides.yaml").write_text("- model/attention=coda\n- trainer.precision=bf16-mixed\n")
    assert runs.main(["--log-dir", str(log_dir)]) == 0
    out = capsys.readouterr().out
    (plain_row,) = [line for line in out.splitlines() if f" {plain}" in line]
    (coda_row,) = [line for line in out.splitlines() if f" {coda}" in line]
    assert " decompatt " in plain_row and "[" not in plain_row
    assert " decompatt [model/attention=coda trainer.precision=bf16-mixed] " in coda_row


def test_listing_runs_imports_no_lightning_and_torch_only_to_read_a_checkpoint(tmp_path):
    """Importing pytorch_lightning (through auto_resume) took ~5 s of the listing's ~7 s."""
    log_dir, results = tmp_path / "outputs", tmp_path / "results"
    _folder(log_dir / "runs" / "snli-decompatt", "a-s1", 1, results)  # failed: no record, no checkpoint
    code = ("import sys; from coda_exp.tools import runs; runs.main(['--log-dir', sys.argv[1]]); "
            "print(sorted(m for m in ('pytorch_lightning', 'torch') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    def imported() -> str:
        out = subprocess.run([sys.executable, "-c", code, str(log_dir)], capture_output=True, text=True, env=env,
                             check=True).stdout
        return out.splitlines()[-1]

    assert imported() == "[]"
    stopped = _folder(log_dir / "runs" / "snli-decompatt", "b-s2", 2, results)
    torch.save({"global_step": 5, "state_dict": {}}, stopped / "checkpoints" / "last.ckpt")
    assert imported() == "['torch']"  # its step is read from the checkpoint; Lightning still not imported


def test_a_folder_claimed_beside_a_taken_one_goes_when_the_output_check_fails(tmp_path, monkeypatch):
    """A run whose Hydra folder was another live run's claimed <folder>-2; a results folder it could not write then
    refused it, and <folder>-2 stayed with only the claim (listed as failed, 'no train.log'). Another rank leaves
    it as it is (SLURM_PROCID as a run reads it, not only RANK / LOCAL_RANK)."""
    from lightning_fabric.utilities.rank_zero import rank_zero_only

    from coda_exp.run_folder import OWNER, OutputDirError, check_outputs, claim

    (tmp_path / "results").write_text("a file where the results folder goes")
    cfg = OmegaConf.create({"paths": {"results_dir": str(tmp_path / "results")}})
    for rank, kept in ((1, True), (0, False)):
        monkeypatch.setattr(rank_zero_only, "rank", rank)
        folder = claim(tmp_path / "runs" / f"r{rank}")
        assert (folder / OWNER).is_file()
        with pytest.raises(OutputDirError, match="paths.results_dir"):
            check_outputs(cfg, folder, claimed=True)
        assert folder.exists() is kept


def test_a_folder_without_config_is_named_by_its_folder_with_or_without_a_tag(tmp_path):
    """Task, model and seed from the name alone: a sweep job's ``<n>-<task>-<model>-s<seed>[-<tag>][-<k>]``, a single
    run's ``runs/<task>-<model>/<time>-s<seed>[-<tag>][-<k>]`` (coda_exp/run_tag.py, coda_exp/run_folder.py)."""
    names = {"0-snli-decompatt_coda-s2": ("snli", "decompatt_coda", 2),
             "12-snli-decompatt-s3-2": ("snli", "decompatt", 3),
             "1-wikiqa-decompatt-s1-lr_1e-3@0a1b2c": ("wikiqa", "decompatt", 1),
             "2-wikiqa-attconv_light-s4-foo-s9_x@0a1b2c-2": ("wikiqa", "attconv_light", 4)}
    for name, (task, model, seed) in names.items():
        job = runs._job_names(tmp_path / "multiruns" / "2026" / name)
        assert (job["task"]["name"], job["model"]["name"], job["seed"]) == (task, model, seed), name
    for name, seed in {"2026-01-01_00-00-00.000001-s5": 5, "2026-01-01_00-00-00.000001-s6-2": 6,
                       "2026-01-01_00-00-00.000001-s7-attention_coda+lr_3e-4@abcdef": 7,
                       "2026-01-01_00-00-00.000001-s8-lr_1e-3@abcdef-2": 8}.items():
        run = runs._job_names(tmp_path / "runs" / "mlu-coda_transformer" / name)
        assert (run["task"]["name"], run["model"]["name"], run["seed"]) == ("mlu", "coda_transformer", seed), name
    assert runs._job_names(tmp_path / "runs" / "mlu-transformer" / "2026-s1-lr_1e-3") == {}  # no tag's hash: not ours


def test_two_resumes_of_one_folder_at_once_leave_one_owner(tmp_path):
    """A resume checked the folder's owner, removed the owner file, then claimed it: a second resume between those
    steps removed the first one's claim, and both wrote to the folder. The replacement is now done under a lock, so
    the second sees the first's live claim."""
    import fcntl
    import threading

    from coda_exp.run_folder import OWNER, claim

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / OWNER).write_text(json.dumps({"host": socket.gethostname(), "pid": 999_999_999}))  # an ended process
    with open(folder / f"{OWNER}.lock", "a") as held:  # as another resume would hold it
        fcntl.flock(held, fcntl.LOCK_EX)
        done = []
        waiting = threading.Thread(target=lambda: done.append(claim(folder, resume=True)))
        waiting.start()
        waiting.join(timeout=1.0)
        assert waiting.is_alive() and not done  # it waits for the lock
        fcntl.flock(held, fcntl.LOCK_UN)
    waiting.join(timeout=10)
    assert done == [folder] and json.loads((folder / OWNER).read_text())["pid"] == os.getpid()
    code = f"from coda_exp.run_folder import claim; claim({str(folder)!r}, resume=True)"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                           cwd=Path(__file__).resolve().parents[2])
    assert other.returncode != 0 and "in use by process" in other.stderr  # this process's claim is live
