"""coda_exp.sweep_data: a plain train.py -m sweep whose tasks lack their data stops before its first job with one
message (it used to start every job, each failing with the same DataError); scripts/check_sweep_data.py asks the
same (tests/scripts/test_check_sweep_data.py)."""

from __future__ import annotations

import sys

import pytest

from coda_exp import cli


def test_a_sweep_without_its_data_is_one_message_before_its_first_job(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(sys, "argv", ["train.py"])
    with pytest.raises(SystemExit) as exit_:
        cli.main(["-m", "experiment=table_3", f"paths.data_dir={tmp_path}/data", f"paths.log_dir={tmp_path}/outputs"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert err.startswith("error: the sweep cannot start, 4 task(s) lack their data"), err
    assert f"  snli: no data folder ({tmp_path}/data/snli does not exist)" in err
    assert "dnli: no data folder" in err and "has no hub copy" in err
    assert err.count("snli:") == 1 and "Traceback" not in err and "job failed" not in err
    assert not (tmp_path / "outputs").exists()  # no sweep folder, no job


def test_the_data_a_sweep_finds_lets_it_start(tmp_path):
    """The jobs the entry point composed are checked once, where the sweep starts: fixtures, generated MLU."""
    from hydra import compose, initialize_config_dir

    from coda_exp.environment import config_dir
    from coda_exp.sweep_data import data_problem, data_refusal

    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        fixture = compose("train", overrides=["task=snli", "scale=fixture"], return_hydra_config=True)
        mlu = compose("train", overrides=["task=mlu", "model=transformer", f"paths.data_dir={tmp_path}"],
                      return_hydra_config=True)
        gone = compose("train", overrides=["task=snli", f"data.dir={tmp_path}/gone"], return_hydra_config=True)
    assert data_problem(fixture) is None and data_problem(mlu) is None
    assert data_refusal([fixture, mlu]) is None
    assert data_refusal([fixture, gone]) == (
        "the sweep cannot start, 1 task(s) lack their data (docs/data.md says where to get each benchmark); no job "
        f"has run:\n  snli: data.dir '{tmp_path}/gone' does not exist: expected a folder holding the official files "
        "snli_1.0_train.jsonl, snli_1.0_dev.jsonl, snli_1.0_test.jsonl. Get them from https://nlp.stanford.edu/projects/"
        "snli/ (snli_1.0.zip, folder snli_1.0/).")


def test_the_sweep_checks_the_reader_data_dataset_names(tmp_path):
    """A sweep on ``task=snli data.dataset=<another reader>`` was refused for lacking SNLI's files (the check looked
    the reader up by the task's name); a misspelt ``data.dataset`` is named before the first job."""
    from hydra import compose, initialize_config_dir

    from coda_exp.environment import config_dir, fixture_dir
    from coda_exp.sweep_data import data_problem

    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        other = compose("train", overrides=["task=snli", "data.dataset=mnli", f"data.dir={fixture_dir('mnli')}"],
                        return_hydra_config=True)
        typo = compose("train", overrides=["task=snli", "scale=fixture", "data.dataset=snil"], return_hydra_config=True)
    assert data_problem(other) is None
    assert "unknown dataset 'snil' (data.dataset)" in data_problem(typo) and "did you mean data.dataset=snli?" in (
        data_problem(typo))


def test_a_sweep_with_a_misspelt_logger_key_is_one_message_before_its_first_job(tmp_path, capsys, monkeypatch):
    """Each job checked its logger settings only as it started: a sweep of N jobs failed N times, after each job's
    folder; the sweep's jobs' loggers are checked once, before the first."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(sys, "argv", ["train.py"])
    with pytest.raises(SystemExit) as exit_:
        cli.main(["-m", "task=snli", "scale=fixture", "seed=1,2", "+logger.csv.flush_every=5",
                  f"paths.log_dir={tmp_path}/outputs", f"paths.results_dir={tmp_path}/results"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert err.startswith("error: the sweep cannot start: logger.csv.flush_every is not a parameter of"), err
    assert err.rstrip().endswith("no job has run") and "Traceback" not in err
    assert not (tmp_path / "outputs").exists()  # no sweep folder, no job
