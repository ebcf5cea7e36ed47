"""Shared test helpers: composing the Hydra config the way train.py does, offline, into a temporary folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
os.environ["CODA_EXP_ROOT"] = str(ROOT)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # torch + numba OpenMP pools: see docs/attention.md


def compose_cfg(overrides: list[str], tmp: Path):
    """The train config with ``overrides``, every output path under ``tmp``, HydraConfig set (as in a run)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "configs")):
        cfg = compose("train", overrides=[
            f"paths.results_dir={tmp}/results", f"paths.cache_dir={tmp}/cache", f"paths.log_dir={tmp}/outputs",
            f"paths.data_dir={tmp}/data",
            f"paths.output_dir={tmp}/run", *overrides], return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


@pytest.fixture
def make_cfg(tmp_path):
    return lambda *overrides: compose_cfg(list(overrides), tmp_path)


@pytest.fixture
def one_thread():
    """One torch thread for the test: tiny models run faster without pool wake-ups, much faster on a busy
    machine (``pytestmark = pytest.mark.usefixtures("one_thread")`` in a module)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
