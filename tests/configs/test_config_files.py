"""A config file a user edits (``configs/local/default.yaml``, a task's YAML): a file PyYAML cannot read used to be
its traceback (exit status 1), and a misspelt key of the local file was ignored without a word. Each is one message
naming the file (and line), exit status 2, before anything runs. The tests compose a copy of ``configs/``."""

from __future__ import annotations

import shutil
import sys

import pytest

from coda_exp import cli, composition, environment
from tests import ROOT


@pytest.fixture
def configs(tmp_path, monkeypatch):
    """A copy of ``configs/`` that the entry point composes instead of the checkout's."""
    folder = tmp_path / "configs"
    shutil.copytree(ROOT / "configs", folder, ignore=shutil.ignore_patterns("local"))
    (folder / "local").mkdir()
    monkeypatch.setattr(environment, "config_dir", lambda: folder)
    monkeypatch.setattr(cli, "config_dir", lambda: folder)
    monkeypatch.setattr(composition, "config_dir", lambda: folder)
    monkeypatch.setattr(sys, "argv", ["train.py"])
    return folder


def refused(argv: list[str], capsys, tmp_path) -> str:
    with pytest.raises(SystemExit) as exit_:
        cli.main([*argv, f"paths.log_dir={tmp_path}/outputs"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err and err.count("error:") == 1, err
    assert not (tmp_path / "outputs").exists()  # nothing started
    return err


@pytest.mark.parametrize("path,text,message", [
    ("local/default.yaml", "paths:\n  data_dir: /data\n   cache_dir: /x\n",
     "local/default.yaml, line 3, column 13: mapping values are not allowed here: not valid YAML; fix that file"),
    ("task/snli.yaml", None, ("task/snli.yaml, line 21, column 1: expected ',' or ']', but got '<stream end>' (while "
                              "parsing a flow sequence started at line 20, column 6)")),
])
def test_a_config_file_pyyaml_cannot_read_is_one_message(configs, capsys, tmp_path, path, text, message):
    file = configs / path
    file.write_text(text if text is not None else file.read_text() + "\nfoo: [a, b\n")
    err = refused(["task=snli", "scale=fixture"], capsys, tmp_path)
    assert err.startswith(f"error: {configs}/") and message in err, err


def test_eval_and_other_commands_name_the_file_pyyaml_cannot_read(configs, capsys):
    from coda_exp.commands import run_command

    (configs / "local" / "default.yaml").write_text("paths: [unclosed\n")
    assert run_command("estimate", ["task=snli", "scale=fixture"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {configs}/local/default.yaml, line 2, column 1: ") and "Traceback" not in err, err


@pytest.mark.parametrize("text,message", [
    ("paths:\n  data_dirr: /data\n", ("local/default.yaml sets paths.data_dirr, a key no config has and nothing "
                                      "reads: did you mean paths.data_dir?")),
    ("seeds: 3\n", "local/default.yaml sets seeds, a key no config has and nothing reads: did you mean seed?"),
])
def test_a_key_of_the_local_file_that_nothing_reads_is_refused(configs, capsys, tmp_path, text, message):
    """It was ignored: at scale=paper the run fell back to the default data folder, or to the hub."""
    (configs / "local" / "default.yaml").write_text(text)
    assert message in refused(["task=snli", "scale=fixture"], capsys, tmp_path)


@pytest.mark.parametrize("text,keys", [
    ("optimizer:\n  lr: 0.5\n", "optimizer.lr"),
    ("data:\n  batch_size: 7\n  embeddings:\n    path: /v/glove.6B.50d.txt\n", "data.batch_size, data.embeddings.path"),
    ("trainer:\n  precision: bf16-mixed\n", "trainer.precision"),
    ("defaults:\n  - override /optimizer: adagrad\n", "optimizer (a defaults choice)"),
])
def test_a_setting_of_the_local_file_that_changes_results_is_refused(configs, capsys, tmp_path, text, keys):
    """Taken since the file lands at the top level, and invisible to tables: its runs were pooled with the default's."""
    (configs / "local" / "default.yaml").write_text(text)
    err = refused(["task=snli", "scale=fixture"], capsys, tmp_path)
    assert f"local/default.yaml sets {keys}: that file says where things are" in err, err


def test_the_local_files_own_keys_and_the_keys_it_sets_are_taken(configs):
    """A key the config has, a new key another value refers to, a Trainer argument (the Trainer checks it) and a
    group its defaults list overrides; the file's keys land at the top level (no ``# @package`` header needed)."""
    from hydra import compose, initialize_config_dir

    (configs / "local" / "default.yaml").write_text(
        "defaults:\n  - override /logger: none\npaths:\n  data_dir: /data\n  mine: /x\n  cache_dir: ${paths.mine}/c\n"
        "trainer:\n  accelerator: cpu\nlogger: null\n")
    cli.check_composition(["task=snli", "scale=fixture", "--cfg", "job"])
    with initialize_config_dir(config_dir=str(configs), version_base="1.3"):
        assert compose("train", overrides=["task=snli"]).paths.data_dir == "/data"
