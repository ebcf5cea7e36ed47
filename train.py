#!/usr/bin/env python
"""Train, validate and test one task x model: python train.py task=snli model=decompatt [key=value ...]

Sweeps: python train.py -m task=snli,wikiqa model=decompatt,decompatt_coda seed=1,2,3
"""

import os
from pathlib import Path

os.environ.setdefault("CODA_EXP_ROOT", str(Path(__file__).resolve().parent))
# torch and numba each bring an OpenMP runtime; spinning idle threads of one starve the other (10x slower steps)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
def main(cfg: DictConfig) -> float | None:
    from coda_exp.pipeline import run

    return run(cfg)


if __name__ == "__main__":
    main()
