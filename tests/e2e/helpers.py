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


class CtrlCMidWrite:
    """A file object for torch.save that receives a Ctrl-C (SIGINT to this process) at its third write: a second
    Ctrl-C arriving while a checkpoint is written."""

    def __init__(self, f):
        self.f, self.writes = f, 0

    def write(self, data):
        import signal

        self.writes += 1
        if self.writes == 3:
            signal.raise_signal(signal.SIGINT)  # Python's own handler: a KeyboardInterrupt inside torch's writer
        return self.f.write(data)

    def flush(self):
        return self.f.flush()


def logged_losses(folder: Path) -> dict[str, dict[int, float]]:
    """metric -> {logger step: value} of a run's CSV log, each (metric, step) once (a repeat fails)."""
    import csv

    out: dict[str, dict[int, float]] = {}
    for path in sorted((folder / "run" / "csv").rglob("metrics.csv")):
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                for name in ("train/loss_step", "train/loss_epoch"):
                    if row.get(name):
                        assert int(row["step"]) not in out.setdefault(name, {}), (name, row["step"])
                        out[name][int(row["step"])] = float(row[name])
    return out
