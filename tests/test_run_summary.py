"""The summary a run prints at its end (coda_exp.run_record.print_summary), and what its end could not write to
the results folder (save_outputs)."""

from __future__ import annotations

import tempfile

import pytest
from omegaconf import OmegaConf

from coda_exp import results
from coda_exp.run_record import RecordWriteError, print_summary, save_outputs


def _record(**changes):
    record = {"task": "snli", "model": "decompatt", "seed": 1, "scale": "fixture", "status": "finished", "steps": 1,
              "wall_time_s": 1.2, "metrics": {}, "output_dir": "/runs/x"}
    return {**record, **changes}


def test_one_step_is_singular_and_an_evaluation_says_its_steps_are_the_checkpoints(capsys):
    print_summary(_record())
    assert "finished, 1 step in 1 s" in capsys.readouterr().out
    print_summary(_record(steps=3))
    assert "finished, 3 steps in 1 s" in capsys.readouterr().out
    print_summary(_record(steps=3, mode="eval"))
    out = capsys.readouterr().out
    assert "evaluated in 1 s (checkpoint trained 3 steps)" in out and "finished" not in out


@pytest.mark.parametrize("overrides, label", [
    (["model/attention=coda", "scale=fixture"], "snli × decompatt [model/attention=coda] (seed 1"),
    (["model/scoring=softmax"], "snli × decompatt [model/scoring=softmax] (seed 1"),
    (["trainer.precision=bf16-mixed", "trainer.devices=2"],
     "snli × decompatt [trainer.precision=bf16-mixed trainer.devices=2] (seed 1"),
    (["task.epochs=2", "seed=1", "paths.root_dir=/tmp", "logger=wandb"], "snli × decompatt (seed 1"),
])
def test_the_title_names_the_overrides_that_change_the_configuration(capsys, overrides, label):
    """model/attention=coda, model/scoring=softmax, bf16-mixed or two devices printed the plain task × model."""
    print_summary(_record(overrides=overrides))
    assert capsys.readouterr().out.startswith(label)


def test_the_log_file_gets_the_summary_the_console_gets_as_a_table(caplog, capsys):
    """train.log ended with Lightning's lines: no final metric at all."""
    from coda_exp.console import FILE_ONLY

    caplog.set_level("INFO", logger="coda_exp.run_record")
    print_summary(_record(metrics={"test/acc": 0.5, "val/acc": 0.25}))
    (line,) = [r for r in caplog.records if "snli × decompatt" in r.getMessage()]
    assert line.getMessage().endswith("finished, 1 step in 1 s; test/acc 0.5000, val/acc 0.2500")
    assert getattr(line, FILE_ONLY) is True and "│ test/acc" in capsys.readouterr().out  # the console: the table


def test_the_summary_names_the_checkpoint_to_evaluate_before_the_run_folder(capsys):
    """Runs write checkpoints/epochNNN-stepN.ckpt (and last.ckpt), never the best.ckpt that eval's help named."""
    best = "/runs/x/checkpoints/epoch003-step40.ckpt"
    print_summary(_record(best_checkpoint=best))
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2:] == [f"best checkpoint (tested; coda-exp eval ckpt_path=...): {best}", "run folder: /runs/x"]
    print_summary(_record(best_checkpoint="/runs/x/checkpoints/averaged.ckpt", checkpoints_averaged=5))
    assert "averaged checkpoint (tested; coda-exp eval ckpt_path=...): /runs/x/checkpoints/averaged.ckpt" in (
        capsys.readouterr().out)
    print_summary(_record(best_checkpoint=None))  # debug=fdr: none
    print_summary(_record(best_checkpoint=best, mode="eval"))  # an evaluation's is the file it evaluated
    assert "checkpoint (tested" not in capsys.readouterr().out


def test_what_results_could_not_take_is_named_where_it_was_kept(tmp_path, monkeypatch, capsys):
    """The results folder unwritable at the run's end: the message named the record's fallback, not the predictions'
    (kept in the run folder too), nor where to move them; with save_record=false it said nothing at all."""
    monkeypatch.setattr(results, "validate_record", lambda record: record)  # this test's record is a sketch
    res, run = tmp_path / "results", tmp_path / "run"
    res.mkdir(), run.mkdir()
    (res / "predictions").write_text("a file where the folder should be")
    (res / "runs").write_text("a file where the folder should be")
    cfg = OmegaConf.create({"paths": {"results_dir": str(res), "output_dir": str(run)}})
    kept_predictions = (f"the test predictions are at {run / 'predictions.jsonl.gz'} (move them into "
                        f"{res / 'predictions'}/ as r1.jsonl.gz)")
    with pytest.raises(RecordWriteError) as err:
        save_outputs(_record(run_id="r1"), [{"index": 0, "prediction": 1}], cfg)
    said = str(err.value)
    assert said.startswith(f"could not write {res / 'predictions'}/r1.jsonl.gz: ")
    assert f"the run record is at {run / 'run_record.json'} (move it into {res / 'runs'}/ as r1.json)" in said
    assert kept_predictions in said and (run / "predictions.jsonl.gz").is_file()
    cfg.save_record = False  # nothing into results/ (no record to name the predictions): they go into the run folder
    (run / "predictions.jsonl.gz").unlink()
    record = _record(run_id="r1")
    assert save_outputs(record, [{"index": 0, "prediction": 1}], cfg) is None
    assert record["predictions"] == str(run / "predictions.jsonl.gz") and (run / "predictions.jsonl.gz").is_file()
    (tmp_path / "file").write_text("")  # a run folder that cannot be written either (even by root): the
    cfg.paths.output_dir = str(tmp_path / "file" / "run")  # temporary folder's copy, and where to move it
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    with pytest.raises(RecordWriteError) as err:
        save_outputs(_record(run_id="r1"), [{"index": 0, "prediction": 1}], cfg)
    assert (f"the test predictions are at {tmp_path}/tmp/coda_exp/r1/predictions.jsonl.gz (move them into "
            f"{tmp_path}/file/run/ as predictions.jsonl.gz)") in str(err.value) and "run record" not in str(err.value)
