"""Running train.py in a subprocess, every output under one folder (sweeps, DDP, kills)."""

import os
import subprocess
import sys
from pathlib import Path

from tests import ROOT


def train(args: list[str], folder: Path, cache: Path | None = None, timeout: int = 300,
          **popen) -> subprocess.CompletedProcess:
    """``python train.py *args`` with results, logs (and the data cache, unless ``cache``) under ``folder``."""
    env = dict(os.environ, HYDRA_FULL_ERROR="1")
    cmd = [sys.executable, str(ROOT / "train.py"), *args, f"paths.results_dir={folder}/results",
           f"paths.cache_dir={cache or folder / 'cache'}", f"paths.log_dir={folder}/outputs", "logger=none"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False, **popen)
