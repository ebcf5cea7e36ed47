"""The training entry point: ``coda-exp task=snli model=decompatt`` (installed), ``python -m coda_exp ...`` or
``python train.py ...`` (a checkout). All three compose the same ``train`` config and call
:func:`coda_exp.pipeline.run`.

The configs are the repository's top-level ``configs/`` folder in a checkout and ship inside the wheel as
``coda_exp/configs`` (``setup.py`` maps the one onto the other): :func:`config_dir` picks whichever exists, the
checkout first. Importing this module registers the configs' resolvers (:mod:`coda_exp.resolvers`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from coda_exp import resolvers  # noqa: F401 (registers ${dir_if_exists:...})

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


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="train")
def _train(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from coda_exp.errors import USER_ERROR_EXIT, UserError
    from coda_exp.hydra_callbacks import LOGGED, SweepUserError
    from coda_exp.pipeline import run

    try:
        return run(cfg)
    except UserError as err:
        if HydraConfig.get().mode == RunMode.MULTIRUN:  # the sweep goes on and lists this job at the end
            wrapped = SweepUserError(f"{type(err).__name__}: {err}")
            setattr(wrapped, LOGGED, getattr(err, LOGGED, False))
            wrapped.code = USER_ERROR_EXIT  # the sweep summary's exit status of this job
            raise wrapped from None
        if not getattr(err, LOGGED, False):
            print(f"error: {err}", file=sys.stderr, flush=True)
        raise SystemExit(USER_ERROR_EXIT) from None  # the message alone: no traceback, no HYDRA_FULL_ERROR hint


def main() -> None:
    """``coda-exp [overrides]``: train, validate and test one task x model (``-m`` for sweeps)."""
    set_environment()
    _train()


if __name__ == "__main__":
    main()
