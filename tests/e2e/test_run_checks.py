"""Checks before the first step (config values, output folders) and the run's outputs never lost after the last."""

import json
import os

import pytest

from coda_exp import results, run_folder
from coda_exp.config_checks import ConfigError
from coda_exp.pipeline import run
from coda_exp.run_record import RecordWriteError


@pytest.fixture
def no_data(monkeypatch):
    """Fail the test if the run gets as far as loading data or building anything."""
    monkeypatch.setattr("coda_exp.pipeline.instantiate", lambda *a, **k: pytest.fail("data loaded before the check"))


@pytest.mark.parametrize("override,message", [
    ("trainer.max_epochs=abc", "trainer.max_epochs = 'abc': expected an int >= 1 or -1 or null"),
    ("task.epochs=-1", "task.epochs = -1: expected an int >= 1"),
    ("data.batch_size=-4", "data.batch_size = -4: expected an int >= 1"),
    ("optimizer.lr=0", "optimizer.lr = 0: expected a number > 0"),
    ("+task.val_check_interval=1.5", "task.val_check_interval = 1.5: expected an int >= 1 (batches), a float in"),
])
def test_a_bad_config_value_names_its_key_before_any_data(make_cfg, no_data, override, message):
    with pytest.raises(ConfigError) as err:
        run(make_cfg("task=snli", "scale=fixture", override))
    assert message in str(err.value)


def test_every_bad_value_is_listed_once(make_cfg, no_data):
    with pytest.raises(ConfigError) as err:
        run(make_cfg("task=snli", "task.epochs=0", "data.eval_batch_size=x", "seed=1.5"))
    lines = str(err.value).splitlines()[1:]
    assert [line.split(" =")[0].strip() for line in lines] == ["seed", "task.epochs", "data.eval_batch_size"]
    # trainer.max_epochs and task.patience follow ${task.epochs}: reported through task.epochs only


def test_unwritable_results_folder_fails_before_any_data(make_cfg, no_data, tmp_path):
    (tmp_path / "blocked").write_text("a file where a folder should be")
    with pytest.raises(run_folder.OutputDirError) as err:
        run(make_cfg("task=snli", "scale=fixture", f"paths.results_dir={tmp_path}/blocked/results"))
    assert f"paths.results_dir (runs/): {tmp_path}/blocked/results/runs is not writable" in str(err.value)


def test_a_record_that_cannot_be_written_goes_to_a_named_fallback(make_cfg, tmp_path, monkeypatch, capsys):
    def refuse(record, runs_dir, **kw):
        raise PermissionError(13, "Permission denied", str(runs_dir))

    monkeypatch.setattr(results, "write_record", refuse)
    with pytest.raises(RecordWriteError) as err:
        run(make_cfg("task=wikiqa", "scale=fixture", "task.epochs=1", "logger=none"))
    fallback = tmp_path / "run" / "run_record.json"
    assert f"the run record is at {fallback}" in str(err.value) and "Permission denied" in str(err.value)
    record = results.validate_record(json.loads(fallback.read_text()))
    assert "test/map" in capsys.readouterr().out  # the metric summary was printed anyway
    assert os.path.isfile(record["predictions"])  # the record points at its predictions: none orphaned


def test_a_taken_folder_is_never_shared(tmp_path):
    first = run_folder.claim(tmp_path / "run")
    second = run_folder.claim(tmp_path / "run")
    assert first == tmp_path / "run" and second == tmp_path / "run-2"
    # a resume takes over the claim of a dead process, never the claim of a live one
    (tmp_path / "run" / run_folder.OWNER).write_text(json.dumps({"host": os.uname().nodename, "pid": 2 ** 22 + 7}))
    assert run_folder.claim(tmp_path / "run", resume=True) == tmp_path / "run"
    (tmp_path / "run" / run_folder.OWNER).write_text(json.dumps({"host": os.uname().nodename, "pid": os.getppid()}))
    with pytest.raises(run_folder.OutputDirError, match="in use by process"):
        run_folder.claim(tmp_path / "run", resume=True)


def test_two_runs_in_one_folder_write_apart(make_cfg, tmp_path):
    for _ in range(2):
        run(make_cfg("task=snli", "scale=fixture", "task.epochs=1", "logger=none", "save_predictions=false"))
    a, b = results.load_records(tmp_path / "results" / "runs", strict=True)
    assert (a["output_dir"], b["output_dir"]) == (str(tmp_path / "run"), str(tmp_path / "run-2"))
    assert (tmp_path / "run-2" / "checkpoints" / "last.ckpt").is_file()
