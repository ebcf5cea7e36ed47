"""Where the configs are and the environment every entry point sets: a leaf that ``cli`` (the Hydra entry point)
and ``pipeline`` (``build_offline``) both use, so neither imports the other."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
CHECKOUT = PACKAGE.parent  # the repository root when coda_exp is used from a checkout


def in_checkout() -> bool:
    return (CHECKOUT / "pyproject.toml").is_file() and (CHECKOUT / "configs" / "train.yaml").is_file()


def config_dir() -> Path:
    """The config folder: ``<checkout>/configs`` in a checkout, else the copy installed with the package."""
    if in_checkout():
        return CHECKOUT / "configs"
    if (PACKAGE / "configs" / "train.yaml").is_file():
        return PACKAGE / "configs"
    raise FileNotFoundError(f"no train.yaml in {CHECKOUT / 'configs'} (a checkout) or {PACKAGE / 'configs'} "
                            "(an installed package): reinstall coda-exp or run from the repository")


def set_environment() -> None:
    """The environment every entry point sets before torch runs: the checkout root, and a passive OpenMP wait."""
    if in_checkout():  # a checkout: outputs, data and results under it, wherever the shell is
        os.environ.setdefault("CODA_EXP_ROOT", str(CHECKOUT))
    # torch and numba each bring an OpenMP runtime; spinning idle threads of one starve the other (10x slower)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
