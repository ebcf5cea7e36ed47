"""A fixture run as a user sees it (issue 23): the rich progress bar and the summary with the run folder, without the
datasets progress bars, Lightning's INFO lines and advert, torch's LeafSpec warning, the FLOPs Lightning does not
measure and v_num; verbose=true brings all of it back."""

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
    assert "Epoch 1/1" in out  # the progress bar stays
    (folder,) = [line.removeprefix("run folder: ") for line in out.splitlines() if line.startswith("run folder: ")]
    assert Path(folder).parent == tmp_path / "outputs" / "runs" / "wikiqa-decompatt"
    assert (Path(folder) / "config_resolved.yaml").is_file() and (Path(folder) / "checkpoints" / "last.ckpt").is_file()
    assert "litlogger" in (Path(folder) / "train.log").read_text(encoding="utf-8")  # the log file keeps every line


@pytest.mark.slow  # ~11 s: a training process; make test keeps the quiet default's run above
def test_verbose_brings_everything_back(tmp_path):
    out = _run(tmp_path, "task.epochs=1", "verbose=true")
    assert [noise for noise in NOISE if noise not in out] == []
    assert "run folder: " in out
