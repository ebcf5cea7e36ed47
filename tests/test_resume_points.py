"""The checkpoint a stopped run resumes from (coda_exp.resume_points): its latest complete checkpoint, last.ckpt,
interrupted.ckpt or the best one beside them, whichever is at the latest step. A run killed while it wrote its
first last.ckpt resumed nothing: resume=auto started a second, fresh run beside it."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from coda_exp import results
from coda_exp.pipeline import run
from tests.test_auto_resume import BASE


def _save(path, step, **extra):
    import torch

    torch.save({"global_step": step, "epoch": 0, "state_dict": {"w": torch.full((16,), 3.0)}, "loops": {},
                "callbacks": {}, "optimizer_states": [], **extra}, path)


def test_a_run_killed_writing_its_first_last_ckpt_resumes_from_its_best_one_to_the_uninterrupted_run(
        compose, tmp_path, caplog):
    """Its best checkpoint (epoch 0's, written before last.ckpt at the same validation) is complete: the run goes on
    from it in its own folder, says so in one line, and ends as the run never stopped, bit for bit."""
    caplog.set_level("INFO", logger="coda_exp.auto_resume")
    whole_dir = tmp_path / "whole"
    run(compose([o.replace("step=7", "step=1000") for o in BASE], whole_dir))  # never stopped
    (whole,) = results.load_records(whole_dir / "results" / "runs", strict=True)
    # stopped at epoch 0's end (step 5, after its checkpoints: the resumed run never reaches it again), then left
    # as a SIGKILL while last.ckpt was written leaves it
    auto = [*(o.replace("step=7", "step=5") for o in BASE), "resume=auto"]
    first = tmp_path / "runs" / "first"
    with pytest.raises(SystemExit):
        run(compose([*auto, f"paths.output_dir={first}"], tmp_path))
    folder = first / "checkpoints"
    best = folder / "epoch000-step5.ckpt"
    assert best.is_file() and (folder / "last.ckpt").is_file()
    for name in ("last.ckpt", "interrupted.ckpt"):
        (folder / name).unlink(missing_ok=True)
    (folder / ".last.ckpt.x1y2z3.tmp").write_bytes(best.read_bytes()[:4096])  # the write a kill cut short
    caplog.clear()
    run(compose([*auto, f"paths.output_dir={tmp_path}/runs/second"], tmp_path))
    (resumed,) = results.load_records(tmp_path / "results" / "runs", strict=True)
    assert resumed["output_dir"] == str(first) and resumed["resumed_from"] == str(best)  # not a second, fresh run
    (said,) = [r.getMessage() for r in caplog.records if "resume=auto: resuming" in r.getMessage()]
    assert said.startswith(f"resume=auto: resuming the same run from {best} (step 5)")
    assert said.endswith(", its latest complete checkpoint: no last.ckpt beside it (a kill cut its write short: "
                         ".last.ckpt.x1y2z3.tmp left)")
    for key in ("steps", "val_curve", "val_curve_steps", "metrics"):
        assert resumed[key] == whole[key], key
    assert not list(folder.glob(".last.ckpt.*.tmp"))  # the cut-short write is tidied away
    # and the best checkpoint it resumed from, which a later one replaced (Lightning keeps a resumed-from file)
    whole_files = sorted(p.name for p in (Path(whole["output_dir"]) / "checkpoints").glob("*.ckpt"))
    assert sorted(p.name for p in folder.glob("*.ckpt")) == whole_files and best.name not in whole_files
    import torch

    a, b = (torch.load(f / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
            for f in (whole_dir / "run", first))
    assert a["global_step"] == b["global_step"] == 15
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])  # bit for bit


def test_the_latest_complete_checkpoint_is_the_one_at_the_latest_step(tmp_path, caplog):
    """A best checkpoint later than last.ckpt (a kill while last.ckpt was written again), last.ckpt cut short or
    damaged in place: the latest complete one is taken, and why is said; an average, a weights-only checkpoint or a
    temporary file is no point to resume from; ties go to last.ckpt; nothing readable at all stays one error."""
    from coda_exp import auto_resume
    from coda_exp.checkpoint_avg import CheckpointError

    run_dir = (tmp_path / "runs" / "a").resolve()
    folder = run_dir / "checkpoints"
    folder.mkdir(parents=True)
    last, best, later = folder / "last.ckpt", folder / "epoch000-step5.ckpt", folder / "epoch001-step10.ckpt"
    _save(last, 5)
    _save(best, 5)
    assert auto_resume.latest_complete([run_dir]) == ((last, 5), None)  # the same step: last.ckpt, as before
    _save(later, 10)
    _save(folder / "averaged.ckpt", 15, averaged_checkpoints=["a", "b"])  # averaged weights, no training state
    import torch

    torch.save({"global_step": 20, "epoch": 1, "state_dict": {}, "loops": {}}, folder / "epoch001-step20.ckpt")
    (folder / ".epoch002-step25.ckpt.abc.tmp").write_bytes(b"PK\x03\x04")
    point, why = auto_resume.latest_complete([run_dir])
    assert point == (later, 10) and why == "its latest complete checkpoint: last.ckpt is at step 5, an earlier one"
    assert auto_resume.resume_checkpoint(run_dir) == (later, 10)  # coda-exp runs: stopped at step 10
    weights = struct.pack("<16f", *[3.0] * 16)  # damaged in place, its size unchanged: its CRC check fails
    later.write_bytes(later.read_bytes().replace(weights, bytes(len(weights))))
    last.write_bytes(last.read_bytes()[:100])  # cut short
    point, why = auto_resume.latest_complete([run_dir])
    assert point == (best, 5)
    assert f"{later}: damaged" in why and f"{last}: cannot be read" in why and "\n" not in why
    best.unlink()
    with pytest.raises(CheckpointError, match="no checkpoint that can be read"):
        auto_resume.latest_complete([run_dir])
    for path in folder.iterdir():  # killed while it wrote its first checkpoint: nothing to resume, a fresh run
        if path.suffix == ".ckpt":
            path.unlink()
    assert auto_resume.latest_complete([run_dir]) == (None, None)


def test_ckpt_path_a_missing_last_ckpt_names_the_latest_complete_one_beside_it(make_cfg, tmp_path, monkeypatch):
    """ckpt_path= the last.ckpt a stop's message named, which a kill then left missing or cut short, or a run's
    folder: one line that names the checkpoint to resume from instead (resume=auto's choice), before any data
    loads."""
    from coda_exp.checkpoint_avg import CheckpointError

    folder = tmp_path / "runs" / "a" / "checkpoints"
    folder.mkdir(parents=True)
    best = folder / "epoch000-step5.ckpt"
    _save(best, 5)
    monkeypatch.setattr("coda_exp.pipeline.build_data", lambda cfg: pytest.fail("data loaded before the check"))
    last = folder / "last.ckpt"
    # missing, cut short; the run's folder or its checkpoints/: the file in it to give instead
    for given, said, where in ((last, "", "beside it"), (last, "", "beside it"),
                               (folder, " a folder, not a checkpoint file", "in it"),
                               (folder.parent, " a folder, not a checkpoint file", "in it")):
        with pytest.raises(CheckpointError) as err:
            run(make_cfg("task=snli", "scale=fixture", "logger=none", f"ckpt_path={given}"))
        message = str(err.value)
        assert message.startswith(f"{given}:{said}") and "\n" not in message
        assert message.endswith(f"the latest complete checkpoint {where} is at step 5: resume with ckpt_path={best} "
                                "(or resume=auto instead of ckpt_path)")
        if given == last and not last.exists():
            last.write_bytes(best.read_bytes()[:100])  # the next case: cut short


def test_a_run_killed_before_its_first_checkpoint_is_named_not_called_no_earlier_run(compose, tmp_path, caplog):
    """A kill while the run wrote its very first checkpoint (the best one, before last.ckpt) leaves a run of this
    configuration with nothing to resume from: resume=auto starts afresh, and says that run saved none (it said
    "no earlier run of this configuration", which there was)."""
    caplog.set_level("INFO", logger="coda_exp.auto_resume")
    auto = [*(o.replace("step=7", "step=5") for o in BASE), "resume=auto"]
    first = tmp_path / "runs" / "first"
    with pytest.raises(SystemExit):
        run(compose([*auto, f"paths.output_dir={first}"], tmp_path))
    for ckpt in (first / "checkpoints").glob("*.ckpt"):
        ckpt.unlink()
    (first / "checkpoints" / ".epoch000-step5.ckpt.x1y2z3.tmp").write_bytes(b"cut short")
    caplog.clear()
    with pytest.raises(SystemExit):  # the same configuration, started afresh: stopped at step 5 again
        run(compose([*auto, f"paths.output_dir={tmp_path}/runs/second"], tmp_path))
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("resume=auto:")]
    assert said == [(f"resume=auto: the earlier run of this configuration ({first}) saved no checkpoint to go on "
                     "from (stopped before its first was written); a fresh run")]


def test_a_damaged_best_checkpoint_is_named_before_the_resumed_run_trains(compose, tmp_path):
    """The best checkpoint, which a run validates and tests at its end, cut short beside a sound interrupted.ckpt:
    the resumed run trained to its end, then its final validation raised an OSError's traceback (no record). Now
    one error names the file before any training; deleted, the same."""
    from coda_exp.checkpoint_avg import CheckpointError

    stopped = [*(o.replace("step=7", "step=6") for o in BASE)]
    folder = tmp_path / "runs" / "first"
    with pytest.raises(SystemExit):
        run(compose([*stopped, f"paths.output_dir={folder}"], tmp_path))
    best = folder / "checkpoints" / "epoch000-step5.ckpt"
    resume = folder / "checkpoints" / "interrupted.ckpt"
    assert best.is_file() and resume.is_file()
    best.write_bytes(best.read_bytes()[:30000])
    with pytest.raises(CheckpointError, match=f"{best}.*one of the best checkpoints {resume} names"):
        run(compose([*stopped, f"ckpt_path={resume}"], tmp_path))
    assert not results.load_records(tmp_path / "results" / "runs")  # nothing trained, nothing recorded
    best.unlink()
    with pytest.raises(CheckpointError, match=f"{best}: no such checkpoint file. It is one of the best"):
        run(compose([*stopped, f"ckpt_path={resume}"], tmp_path))


def test_a_run_resumed_before_a_later_best_it_had_saved_writes_that_best_under_its_own_name(compose, tmp_path):
    """Killed after a validation's best checkpoint and before its last.ckpt, or resumed by hand from an earlier
    checkpoint: the resumed run saved that best again as ``...-v1.ckpt`` beside the killed process's file
    (Lightning's version counter), and its record named it, unlike the uninterrupted run's. The best checkpoint's file
    is this run's own again (the killed process's one, of the same step, replaced). SNLI's fixture: 5 steps an epoch;
    stopped at step 7, the killed process's best of epoch 1 (step 10) stands in the folder."""
    import torch

    base = ["task=snli", "scale=fixture", "logger=none", "save_predictions=false", "seed=3", "task.epochs=2",
            "callbacks.model_checkpoint.monitor=epoch", "callbacks.model_checkpoint.mode=max",  # the best: the latest
            "+callbacks.sig._target_=tests.e2e.kill_hook.SignalAtStep", "+callbacks.sig.step=7",
            "+callbacks.sig.signum=2"]
    with pytest.raises(SystemExit):
        run(compose(base, tmp_path))
    folder = tmp_path / "run" / "checkpoints"
    later = folder / "epoch001-step10.ckpt"
    later.write_bytes((folder / "interrupted.ckpt").read_bytes())  # the killed process's file (another state)
    run(compose([*base, f"ckpt_path={folder / 'interrupted.ckpt'}"], tmp_path))
    (record,) = results.load_records(tmp_path / "results" / "runs", strict=True)
    assert record["best_checkpoint"] == str(later) and not list(folder.glob("*-v1.ckpt"))
    assert torch.load(later, map_location="cpu", weights_only=False)["global_step"] == 10
