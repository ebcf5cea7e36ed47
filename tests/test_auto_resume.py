"""resume=auto (coda_exp.auto_resume): a run goes on where the same run stopped, skips itself when it finished, and
starts afresh for any other configuration. A real two-process DDP run and a sweep: tests/e2e/test_auto_resume.py."""

from __future__ import annotations

import json

import pytest

from coda_exp import results
from coda_exp.pipeline import run

BASE = ["task=snli", "scale=fixture", "logger=none", "seed=3", "save_predictions=false", "task.epochs=3",
        "task.monitor=val/loss", "task.monitor_mode=min",
        # the same callback in every call (a resumed run restarts past step 7, so it never fires again there)
        "+callbacks.sig._target_=tests.e2e.kill_hook.SignalAtStep", "+callbacks.sig.step=7",
        "+callbacks.sig.signum=2"]


def _records(tmp_path):
    return results.load_records(tmp_path / "results" / "runs", strict=True)


def test_a_stopped_run_resumes_by_itself_and_a_finished_one_is_not_run_again(compose, tmp_path, monkeypatch,
                                                                             caplog):
    caplog.set_level("INFO", logger="coda_exp.pipeline")
    caplog.set_level("INFO", logger="coda_exp.auto_resume")
    whole_dir = tmp_path / "whole"
    run(compose([o.replace("step=7", "step=1000") for o in BASE], whole_dir))  # never stopped
    (whole,) = _records(whole_dir)
    auto = [*BASE, "resume=auto"]
    with pytest.raises(SystemExit) as stop:  # Ctrl-C at step 7: interrupted.ckpt, no record
        run(compose([*auto, f"paths.output_dir={tmp_path}/runs/first"], tmp_path))
    assert stop.value.code == 130 and not _records(tmp_path)
    (said,) = [r.getMessage() for r in caplog.records if "run interrupted" in r.getMessage()]
    assert "interrupted.ckpt; resume with:" in said and "ckpt_path=" not in said  # the same command again
    # the same command again, in a new Hydra folder beside the first
    run(compose([*auto, f"paths.output_dir={tmp_path}/runs/second"], tmp_path))
    (resumed,) = _records(tmp_path)
    assert resumed["output_dir"] == str(tmp_path / "runs" / "first")  # went on in the stopped run's folder
    assert resumed["resumed_from"] == str(tmp_path / "runs" / "first" / "checkpoints" / "interrupted.ckpt")
    assert "resume=auto: resuming the same run from" in caplog.text
    from coda_exp.run_folder import FINISHED_IN, RESUMED_IN

    # the line coda-exp runs reads: the second Hydra folder keeps only this log, and is no failed run
    assert f"{RESUMED_IN} {tmp_path / 'runs' / 'first'} (its Hydra folder {tmp_path / 'runs' / 'second'}" in caplog.text
    for key in ("steps", "val_curve", "val_curve_steps", "metrics"):
        assert resumed[key] == whole[key], key
    from coda_exp.fingerprint import fingerprint

    assert fingerprint(["resume=auto"]) == fingerprint([])  # it changes no result: the same table cell
    # and once more: it finished, so nothing runs (no data loaded, no new record); a sweeper gets its value
    monkeypatch.setattr("coda_exp.pipeline.build_data", lambda cfg: pytest.fail("a finished run ran again"))
    value = run(compose([*auto, f"paths.output_dir={tmp_path}/runs/third"], tmp_path))
    assert value == resumed["metrics"]["val/loss"] and len(_records(tmp_path)) == 1
    (done,) = [r for r in caplog.records if f"resume=auto: {FINISHED_IN} {tmp_path / 'runs' / 'first'} (record "
               in r.getMessage()]
    assert done.levelname == "INFO"  # the outcome asked for, not a warning
    from coda_exp import auto_resume

    assert auto_resume.finished_already == tmp_path / "runs" / "first"  # a sweep's summary counts it apart


def test_another_configuration_or_no_resume_starts_afresh(compose, tmp_path):
    with pytest.raises(SystemExit):
        run(compose([*BASE, "resume=auto", f"paths.output_dir={tmp_path}/runs/first"], tmp_path))
    # another learning rate: not the stopped run
    never = [o.replace("step=7", "step=1000") for o in BASE]
    run(compose([*never, "resume=auto", "optimizer.lr=0.001", "task.epochs=2",
                 f"paths.output_dir={tmp_path}/runs/other"], tmp_path))
    (other,) = _records(tmp_path)
    assert other["output_dir"] == str(tmp_path / "runs" / "other") and other["resumed_from"] is None


def test_a_requeued_job_resumes_in_its_own_folder(compose, tmp_path):
    """A SLURM job requeued with the same command starts in its earlier run's folder (or in a new one): that folder
    is resumed, not left for <folder>-2 as a folder another run holds."""
    import torch

    folder = tmp_path / "runs" / "job"
    with pytest.raises(SystemExit):
        run(compose([*BASE, "resume=auto", f"paths.output_dir={folder}"], tmp_path))
    stopped = folder / "checkpoints" / "interrupted.ckpt"  # removed once the resumed run saves a later checkpoint
    earlier = torch.load(stopped, weights_only=False)["callbacks"]["ElapsedTime"]["elapsed_s"]
    run(compose([*BASE, "resume=auto", f"paths.output_dir={folder}"], tmp_path))
    (record,) = _records(tmp_path)
    assert record["output_dir"] == str(folder) and record["resumed_from"] == str(stopped)
    assert not (tmp_path / "runs" / "job-2").exists() and not stopped.exists()
    # the record's time is the whole run's: the stopped process's (up to its checkpoint) and this one's
    assert earlier > 0 and record["wall_time_s"] == pytest.approx(earlier + record["wall_time_segment_s"], abs=0.01)


def test_a_bad_resume_value_is_one_error_before_any_data(make_cfg, monkeypatch):
    from coda_exp.config_checks import ConfigError

    monkeypatch.setattr("coda_exp.pipeline.build_data", lambda cfg: pytest.fail("data loaded before the check"))
    with pytest.raises(ConfigError, match="resume = 'yes': expected auto, force or null"):
        run(make_cfg("task=snli", "scale=fixture", "logger=none", "resume=yes"))


def test_the_later_checkpoint_and_only_training_records_count(tmp_path):
    import torch

    from coda_exp import auto_resume

    folder = (tmp_path / "runs" / "a").resolve()
    (folder / "checkpoints").mkdir(parents=True)
    for name, step in (("last.ckpt", 10), ("interrupted.ckpt", 12)):
        torch.save({"global_step": step, "state_dict": {}}, folder / "checkpoints" / name)
    assert auto_resume.resume_checkpoint(folder) == (folder / "checkpoints" / "interrupted.ckpt", 12)
    (folder / "checkpoints" / "interrupted.ckpt").write_bytes(b"cut short")  # unreadable: not one to resume from
    assert auto_resume.resume_checkpoint(folder) == (folder / "checkpoints" / "last.ckpt", 10)
    runs = tmp_path / "results" / "runs"
    runs.mkdir(parents=True)
    base = {"schema_version": 1, "task": "snli", "model": "decompatt", "attention": {}, "seed": 1,
            "scale": "fixture", "metrics": {}, "steps": 1, "epochs": 1, "wall_time_s": 1.0, "device": "cpu",
            "git_commit": None, "overrides": [], "created": "2026-01-01T00:00:00+00:00",
            "output_dir": str(folder)}
    for i, extra in enumerate(({"mode": "eval", "status": "finished"}, {"status": "crashed"})):
        (runs / f"{i}.json").write_text(json.dumps({**base, "run_id": f"r{i}", **extra}))
    results_dirs = [tmp_path / "results"]
    assert auto_resume.finished_records(results_dirs, [folder]) == {}  # an evaluation, a crashed run: not finished
    edited = {**base, "run_id": "r2", "status": "finished", "record_sha256": "0" * 64}  # a hand edit: tables refuse
    (runs / "2.json").write_text(json.dumps(edited))  # it, but the run it names has ended all the same
    assert list(auto_resume.finished_records(results_dirs, [folder])) == [folder]


def test_runs_compare_with_each_folder_set_aside_through_a_symbolic_link(tmp_path):
    """Each run's own folder, as its config wrote it (through a link, as cluster home folders often are), is set
    aside; any other difference makes another run."""
    from omegaconf import OmegaConf

    from coda_exp import auto_resume

    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")

    def config(folder, lr=0.1):
        return {"seed": 1, "resume": None, "ckpt_path": None, "paths": {"output_dir": str(folder)},
                "trainer": {"default_root_dir": str(folder)}, "optimizer": {"lr": lr}}

    theirs = tmp_path / "link" / "runs" / "a"
    theirs.mkdir(parents=True)
    OmegaConf.save(config(theirs), theirs / "config_resolved.yaml")
    mine = {**config(tmp_path / "link" / "runs" / "b"), "resume": "auto"}
    assert auto_resume.same_run(mine, theirs.resolve())
    assert not auto_resume.same_run(config(tmp_path / "link" / "runs" / "b", lr=0.2), theirs.resolve())


def test_the_same_run_running_now_is_one_error_not_a_second_copy(make_cfg, tmp_path, monkeypatch):
    import json
    import socket
    import subprocess
    import sys

    from omegaconf import OmegaConf

    from coda_exp.run_folder import OutputDirError

    monkeypatch.setattr("coda_exp.pipeline.build_data", lambda cfg: pytest.fail("data loaded"))
    other = tmp_path / "outputs" / "runs" / "snli-decompatt" / "earlier-s1"
    other.mkdir(parents=True)
    run_of = ["task=snli", "scale=fixture", "logger=none", "resume=auto"]
    OmegaConf.save(OmegaConf.to_container(make_cfg(*run_of, f"paths.output_dir={other}"), resolve=True),
                   other / "config_resolved.yaml")
    cfg = make_cfg(*run_of)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (other / ".run_owner").write_text(json.dumps({"host": socket.gethostname(), "pid": sleeper.pid}))
        with pytest.raises(OutputDirError, match=f"the same run is running now in {other}"):
            run(cfg)
    finally:
        sleeper.kill()


def test_a_sweep_summary_counts_the_jobs_that_had_finished_already(tmp_path):
    from hydra.core.utils import JobReturn, JobStatus

    from coda_exp.hydra_callbacks import job_outcome, sweep_summary

    ran = JobReturn(overrides=["seed=1"], status=JobStatus.COMPLETED, _return_value=0.5)
    skipped = JobReturn(overrides=["seed=2"], status=JobStatus.COMPLETED, _return_value=0.5)
    failed = JobReturn(overrides=["seed=3"], status=JobStatus.FAILED, _return_value=ValueError("bad"))
    outcomes = [job_outcome(ran), job_outcome(skipped, tmp_path / "run2"), job_outcome(failed, tmp_path / "x")]
    assert [o["status"] for o in outcomes] == ["completed", "finished already", "failed"]
    assert outcomes[1]["finished_in"] == str(tmp_path / "run2") and outcomes[2]["finished_in"] is None
    assert sweep_summary(outcomes).splitlines()[0] == ("sweep: 3 job(s), 1 failed, 1 finished already "
                                                      "(resume=auto: nothing ran)")
    assert sweep_summary(outcomes[:1]) == "sweep: 1 job(s), 0 failed"  # as before when nothing was skipped


def test_unreadable_checkpoints_are_named_never_a_silent_fresh_run(tmp_path):
    import torch

    from coda_exp import auto_resume
    from coda_exp.checkpoint_avg import CheckpointError

    folder = (tmp_path / "runs" / "a").resolve()
    (folder / "checkpoints").mkdir(parents=True)
    last, interrupted = folder / "checkpoints" / "last.ckpt", folder / "checkpoints" / "interrupted.ckpt"
    torch.save({"global_step": 10, "state_dict": {}}, interrupted)
    last.write_bytes(b"PK\x03\x04 cut short")
    point, why = auto_resume.latest_complete([folder])
    assert point == (interrupted, 10) and f"{last}: cannot be read" in why  # the readable one, the bad one named
    interrupted.write_bytes(b"")
    with pytest.raises(CheckpointError, match="no checkpoint that can be read") as err:
        auto_resume.latest_complete([folder])
    assert str(last) in str(err.value) and f"{interrupted}: the file is empty" in str(err.value)
    assert "delete them" in str(err.value) and "\n" not in str(err.value)
    last.unlink()
    interrupted.unlink()
    assert auto_resume.latest_complete([folder]) == (None, None)  # no checkpoint at all: a fresh run


@pytest.mark.parametrize("damage", ["deleted", "corrupt"])
def test_a_run_whose_config_resolved_yaml_was_deleted_is_found_by_its_checkpoints_config(compose, tmp_path, caplog,
                                                                                        damage):
    """It was invisible (resume=auto started afresh beside it): its checkpoint carries the config; the resumed run
    writes config_resolved.yaml again. One cut short or hand-edited was skipped with a warning, and the stopped
    run's steps were thrown away by a fresh run beside it: it is read the same way (the bad file kept aside)."""
    first = tmp_path / "runs" / "first"
    auto = [*BASE, "resume=auto"]
    with pytest.raises(SystemExit):
        run(compose([*auto, f"paths.output_dir={first}"], tmp_path))
    if damage == "deleted":
        (first / "config_resolved.yaml").unlink()
    else:
        (first / "config_resolved.yaml").write_text("task: [unclosed\n")
    run(compose([*auto, f"paths.output_dir={tmp_path}/runs/second"], tmp_path))
    (resumed,) = _records(tmp_path)
    assert resumed["output_dir"] == str(first) and resumed["resumed_from"].endswith("interrupted.ckpt")
    if damage == "deleted":
        assert f"{first} has no config_resolved.yaml (deleted?)" in caplog.text
    else:
        assert f"{first / 'config_resolved.yaml'} cannot be read (" in caplog.text
        assert "the config its checkpoint" in caplog.text and "skipped" not in caplog.text
        (aside,) = first.glob("config_resolved.unreadable-*.yaml")
        assert aside.read_text() == "task: [unclosed\n"
    from omegaconf import OmegaConf

    assert OmegaConf.load(first / "config_resolved.yaml").task.name == "snli"


def test_a_run_of_before_paths_results_root_is_the_same_run():
    """paths.results_root only feeds paths.results_dir, which is compared: a run stopped before the key existed is
    still found by resume=auto."""
    from coda_exp.config_diff import normalised

    now = {"seed": 1, "paths": {"results_root": "/r", "results_dir": "/r", "output_dir": "/o/a"}}
    before = {"seed": 1, "paths": {"results_dir": "/r", "output_dir": "/o/b"}}
    assert normalised(now) == normalised(before)
    assert normalised(now) != normalised({**before, "paths": {"results_dir": "/elsewhere", "output_dir": "/o/b"}})


def test_a_relative_results_folder_is_the_absolute_one_under_the_root():
    """experiment=mlu_gate_ablation set paths.results_dir to results/mlu_gate_ablation, now written as the absolute
    folder under the project root: its earlier runs, finished ones too, were trained again under resume=auto."""
    from coda_exp.config_diff import normalised

    before = {"seed": 1, "paths": {"root_dir": "/p", "results_dir": "results/mlu_gate_ablation", "output_dir": "/o/a"}}
    now = {"seed": 1, "paths": {"root_dir": "/p", "results_root": "/p/results",
                                "results_dir": "/p/results/mlu_gate_ablation", "output_dir": "/o/b"}}
    assert normalised(before) == normalised(now)
    assert normalised(before) != normalised({**now, "paths": {**now["paths"], "results_dir": "/p/results/x"}})


def _finished_record(tmp_path, run_id: str, folder) -> None:
    from pathlib import Path

    shipped = min((Path(__file__).parents[1] / "results" / "runs").glob("*.json"))
    record = {**json.loads(shipped.read_text()), "run_id": run_id, "output_dir": str(folder), "status": "finished",
              "steps": 40, "mode": "train"}
    (tmp_path / "results" / "runs").mkdir(parents=True)
    (tmp_path / "results" / "runs" / f"{run_id}.json").write_text(json.dumps(record))


@pytest.mark.parametrize("carries", ["folder", "run_id"])
def test_a_finished_runs_checkpoint_copied_out_of_its_folder_is_still_that_run(tmp_path, carries):
    """A finished run's checkpoint copied elsewhere (no run folder around it) is found by the run folder and run id
    it carries: ckpt_path= of it is refused as in its folder, not trained and recorded again (superseding it)."""
    from omegaconf import OmegaConf

    from coda_exp.auto_resume import check_not_finished
    from coda_exp.checkpoint_avg import CheckpointError

    folder = tmp_path / "runs" / "snli-decompatt" / "first"
    config = {"paths": {"results_dir": str(tmp_path / "results"),
                        "output_dir": str(folder if carries == "folder" else tmp_path / "moved")},
              "task": {"epochs": 5}, "trainer": {"max_epochs": 5, "max_steps": -1}, "save_record": True}
    _finished_record(tmp_path, "20261127T155519.813293Z_snli_decompatt_s1_75e2b1", folder)
    ckpt = {"coda_exp.run_config": config, "global_step": 25,
            "coda_exp.run": {"run_id": "20261127T155519.813293Z_snli_decompatt_s1_75e2b1" if carries == "run_id"
                             else "another"}}
    cfg = OmegaConf.create({**config, "ckpt_path": str(tmp_path / "copy.ckpt")})
    with pytest.raises(CheckpointError, match="a checkpoint at step 25 of a run that finished already at step 40"):
        check_not_finished(cfg, None, ckpt)
    cfg.task.epochs = cfg.trainer.max_epochs = 9  # a longer budget: a new run from it (the caller's new folder)
    assert check_not_finished(cfg, None, ckpt)[1]["status"] == "finished"


def test_a_finished_run_trained_on_other_data_under_resume_force_is_refused_for_what_it_is(tmp_path):
    """data.dir is where the data lies, not what it is: from a finished run's checkpoint before its end,
    resume=force with only another data.dir is refused as training on other data (a record of the same fingerprint
    would take the finished run's place in the tables) where the folder holds other files, and as that run again
    where the same files lie elsewhere (a moved copy)."""
    from omegaconf import OmegaConf

    from coda_exp.auto_resume import check_not_finished
    from coda_exp.checkpoint_avg import CheckpointError
    from coda_exp.resume_data import CHECKPOINT_DATA_FILES, files_of

    folder = tmp_path / "runs" / "snli-decompatt" / "first"
    trained_on, moved, other = (tmp_path / name for name in ("data", "moved", "other"))
    for data, text in ((trained_on, "a b\n"), (moved, "a b\n"), (other, "c d e\n")):
        data.mkdir()
        (data / "train.txt").write_text(text)
    config = {"paths": {"results_dir": str(tmp_path / "results"), "output_dir": str(folder)},
              "data": {"dir": str(trained_on)}, "task": {"epochs": 5},
              "trainer": {"max_epochs": 5, "max_steps": -1}, "save_record": True}
    _finished_record(tmp_path, "20261127T155519.813293Z_snli_decompatt_s1_75e2b1", folder)
    ckpt = {"coda_exp.run_config": config, "global_step": 25, "coda_exp.run": {"run_id": "another"},
            CHECKPOINT_DATA_FILES: files_of(trained_on)}
    cfg = OmegaConf.create({**config, "ckpt_path": str(tmp_path / "last.ckpt"), "resume": "force"})
    cfg.data.dir = str(other)
    with pytest.raises(CheckpointError, match=r"on other data \(.*\) with the same configuration: .* take that run's "
                       r"place in the tables. .* coda-exp eval ckpt_path=.* data.dir=.*other"):
        check_not_finished(cfg, folder, ckpt)
    cfg.data.dir = str(moved)
    with pytest.raises(CheckpointError, match="a checkpoint at step 25 of a run that finished already at step 40"):
        check_not_finished(cfg, folder, ckpt)


def _budget_cfg(tmp_path, epochs, max_steps=None):
    from omegaconf import OmegaConf

    return OmegaConf.create({"task": {"name": "snli", "epochs": epochs, "max_steps": max_steps},
                             "model": {"name": "decompatt"}, "seed": 1, "ckpt_path": "run/checkpoints/last.ckpt",
                             "paths": {"log_dir": str(tmp_path), "output_dir": str(tmp_path / "new")},
                             "trainer": {"max_epochs": "${task.epochs}",
                                         "max_steps": "${oc.select:task.max_steps,-1}"}})


@pytest.mark.parametrize(("epochs", "max_steps", "said"), [
    (5, None, ("task.epochs = 5: ckpt_path=run/checkpoints/last.ckpt is at epoch 46 (counting from 0) already, so "
              "nothing is left to train under it; set task.epochs=47 or more")),
    (300, 50, ("task.max_steps = 50: ckpt_path=run/checkpoints/last.ckpt is at step 235 already, so nothing is left "
              "to train under it; set task.max_steps=236 or more"))])
def test_a_budget_the_checkpoint_has_reached_is_refused_before_the_data_loads(tmp_path, epochs, max_steps, said):
    """Resuming under a lower task.epochs gave Lightning's traceback after the data loaded; under a lower
    task.max_steps it trained nothing and wrote a record stating the lower budget."""
    from coda_exp.auto_resume import check_budget
    from coda_exp.checkpoint_avg import CheckpointError

    ckpt = {"epoch": 46, "global_step": 235, "coda_exp.run_config": {"trainer": {"max_epochs": 300, "max_steps": -1}}}
    with pytest.raises(CheckpointError) as err:
        check_budget(_budget_cfg(tmp_path, epochs, max_steps), ckpt)
    assert said in str(err.value)
    check_budget(_budget_cfg(tmp_path, 47), ckpt)  # trains on
    ckpt["coda_exp.run_config"]["trainer"]["max_epochs"] = 46  # its own budget, reached (stopped while it tested)
    check_budget(_budget_cfg(tmp_path, 46), ckpt)


def test_resume_auto_names_a_run_of_this_configuration_under_another_budget(tmp_path):
    from omegaconf import OmegaConf

    from coda_exp.auto_resume import other_budget

    folder = tmp_path / "runs" / "snli-decompatt" / "2026-11-27_16-24-26.472408-s1"
    folder.mkdir(parents=True)
    theirs = OmegaConf.to_container(_budget_cfg(tmp_path, 300), resolve=True)
    theirs["paths"]["output_dir"] = str(folder)
    (folder / "config_resolved.yaml").write_text(OmegaConf.to_yaml(theirs))
    assert other_budget(_budget_cfg(tmp_path, 5), tmp_path / "new") == (
        folder, "task.epochs: 300 there, 5 here; trainer.max_epochs: 300 there, 5 here")
    assert other_budget(_budget_cfg(tmp_path, 300), tmp_path / "new") is None  # the same run: resume=auto resumes it


def test_a_run_resumed_with_a_raised_budget_is_that_budgets_run(tmp_path):
    """Stopped, resumed with ckpt_path= and task.epochs raised, stopped again: the same command with resume=auto
    started a fresh run beside it (its config_resolved.yaml, the first one, has the old budget); the config of its
    latest resume is the run's now."""
    from omegaconf import OmegaConf

    from coda_exp.auto_resume import run_config, same_run

    folder = tmp_path / "runs" / "snli-decompatt" / "2026-11-27_16-24-26.472408-s1"
    folder.mkdir(parents=True)
    for budget, name in ((100, "config_resolved.yaml"), (120, "config_resolved.resumed-2026-11-28T051000.1+0000.yaml"),
                         (150, "config_resolved.resumed-2026-11-28T052000.1+0000.yaml")):
        theirs = OmegaConf.to_container(_budget_cfg(tmp_path, budget), resolve=True)
        theirs["paths"]["output_dir"] = str(folder)
        (folder / name).write_text(OmegaConf.to_yaml(theirs))
    mine = OmegaConf.to_container(_budget_cfg(tmp_path, 150), resolve=True)
    assert same_run(mine, folder) and run_config(folder)[1].name.startswith("config_resolved.resumed-2026-11-28T0520")
    assert not same_run(OmegaConf.to_container(_budget_cfg(tmp_path, 100), resolve=True), folder)
    (folder / "config_resolved.resumed-2026-11-28T052000.1+0000.yaml").write_text("{unreadable: [")
    assert same_run(OmegaConf.to_container(_budget_cfg(tmp_path, 120), resolve=True), folder)  # the one before
