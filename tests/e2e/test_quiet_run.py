"""A fixture run as a user sees it (issue 23): the rich progress bar and the summary with the run folder (and, its
output not a terminal, the run folder as the training starts and a line per validation), without the datasets
progress bars, Lightning's INFO lines and advert, torch's LeafSpec warning, the FLOPs Lightning does not measure and
v_num; verbose=true brings all of it back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import ROOT

NOISE = ("Generating train split", "Map:", "tokenising", "litlogger", "LeafSpec", "Total FLOPs", "v_num",
         "GPU available", "Seed set to")


def _run(tmp_path: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_DATASETS_DISABLE_PROGRESS_BARS", "HYDRA_FULL_ERROR")}
    cmd = [sys.executable, str(ROOT / "train.py"), "task=wikiqa", "model=decompatt", "scale=fixture",
           f"paths.root_dir={tmp_path}", f"paths.cache_dir={tmp_path}/cache", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def test_a_fixture_run_is_quiet_and_names_its_run_folder(tmp_path):
    out = _run(tmp_path, "task.epochs=2")
    assert [noise for noise in NOISE if noise in out] == []
    assert "wikiqa × decompatt (seed 1, scale fixture (task.epochs=2)): finished" in out and "test/map" in out
    assert "Epoch 2/2" in out  # the progress bar stays, its epochs counted from 1 as the log lines count them
    (folder,) = [line.removeprefix("run folder: ") for line in out.splitlines() if line.startswith("run folder: ")]
    assert Path(folder).parent == tmp_path / "outputs" / "runs" / "wikiqa-decompatt"
    assert (Path(folder) / "config_resolved.yaml").is_file() and (Path(folder) / "checkpoints" / "last.ckpt").is_file()
    log = (Path(folder) / "train.log").read_text(encoding="utf-8")
    assert "litlogger" in log  # the log file keeps every line
    # not a terminal (a redirect, nohup, a cluster job): the run folder as the training starts (a run failing before
    # is its error alone: test_cli.py), then a line per validation, there and in train.log (issue: nothing between the
    # model summary and the final table, no value in the log); train.log names the folder from its start
    said = [line.split("] - ", 1)[1] for line in out.splitlines() if "[coda_exp." in line and "] - " in line]
    validations = [line for line in said if line.startswith("validation at epoch ")]
    assert said.index(f"run folder: {folder}") == said.index(validations[0]) - 1, said
    assert log.split("] - ", 1)[1].startswith(f"run folder: {folder}\n") and log.count("run folder: ") == 1
    assert [v.split(":")[0].split(" (")[0] for v in validations] == ["validation at epoch 1/2", "validation at epoch 2/2"]
    assert all("val/map " in v and "(best " in v and v.endswith(" elapsed") for v in validations)
    assert all(v in log for v in validations)
    assert "finished, " in log and "test/map " in log  # and the final metrics


@pytest.mark.slow  # ~11 s: a training process; make test keeps the quiet default's run above
def test_verbose_brings_everything_back(tmp_path):
    out = _run(tmp_path, "task.epochs=1", "verbose=true")
    assert [noise for noise in NOISE if noise not in out] == []
    assert "run folder: " in out
