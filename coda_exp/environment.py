"""Where the configs and the fixtures are, and the environment every entry point sets: a leaf that ``cli`` (the Hydra
entry point), ``resolvers`` and ``offline`` (``build_offline``) use, so none imports another for it.

A checkout reads its own ``configs/`` and ``tests/fixtures/``; an installed wheel ships both inside the package, as
``coda_exp/configs`` and ``coda_exp/fixtures`` (``setup.py`` maps the one onto the other), so ``scale=fixture`` works
from any folder."""

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


def in_the_checkout(folder: Path) -> bool:
    """Whether ``folder`` is the checkout or inside it (never where the package is installed from a wheel)."""
    try:
        folder.resolve().relative_to(CHECKOUT.resolve())
    except (ValueError, OSError):
        return False
    return in_checkout()


def root_dir() -> Path:
    """Where ``results/``, ``outputs/``, ``cache/`` and ``data/`` are (what ``paths.root_dir`` resolves to):
    ``$CODA_EXP_ROOT``, else the checkout when the current folder is inside it, else the current folder (an installed
    package, or a checkout installed with ``pip install -e`` used from a project folder of one's own: its runs go
    there, not into the checkout). The commands' default folders."""
    if os.environ.get("CODA_EXP_ROOT"):
        return Path(os.environ["CODA_EXP_ROOT"])
    return CHECKOUT if in_the_checkout(Path.cwd()) else Path.cwd()


def fixtures_dir() -> Path:
    """The folder of the tiny benchmark fixtures (one sub-folder per task, written by ``scripts/make_fixtures.py``):
    ``<checkout>/tests/fixtures`` in a checkout, else the copy installed with the package."""
    if in_checkout():
        return CHECKOUT / "tests" / "fixtures"
    return PACKAGE / "fixtures"


def is_fixture_data(path: str | os.PathLike | None) -> bool:
    """Whether a data folder is (inside) the fixtures of :func:`fixtures_dir`: a run on them is a smoke test,
    whatever its scale is called (``experiment=quickstart``'s ``quickstart``)."""
    if not path:
        return False
    try:
        Path(path).expanduser().resolve().relative_to(fixtures_dir().resolve())
    except (ValueError, OSError):
        return False
    return True


def fixture_dir(task: str) -> Path:
    """``scale=fixture``'s ``data.dir`` of ``task``: its folder of :func:`fixtures_dir`. A task without a fixture gets
    the path all the same, so the reader's error names the folder it looked in."""
    return fixtures_dir() / str(task)


#: whether ``$CODA_EXP_ROOT`` was the user's choice (set before :func:`set_environment` first ran)
ROOT_CHOSEN: bool | None = None


def set_environment() -> None:
    """The environment every entry point sets before torch runs: the root folder (:func:`root_dir`), and a passive
    OpenMP wait."""
    global ROOT_CHOSEN
    if ROOT_CHOSEN is None:
        ROOT_CHOSEN = bool(os.environ.get("CODA_EXP_ROOT"))
    os.environ.setdefault("CODA_EXP_ROOT", str(root_dir().absolute()))  # absolute: a config read from elsewhere
    # torch and numba each bring an OpenMP runtime; spinning idle threads of one starve the other (10x slower)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def trained_root_here(root: str | None, overrides: list[str]) -> bool:
    """Whether a command on a trained run (``coda-exp eval``) writes under that run's root folder ``root`` rather
    than the current folder: run outside any checkout, with no ``$CODA_EXP_ROOT`` nor ``paths.*`` of the user's, and
    ``root`` a folder here (an evaluation from /tmp of a run of /home/me/lab goes beside the run's own records)."""
    return (bool(root) and not ROOT_CHOSEN and not in_the_checkout(Path.cwd()) and Path(str(root)).is_dir()
            and not any(o.lstrip("+~").startswith("paths.") for o in overrides))


def group_choice(group: str) -> str | None:
    """The option this Hydra job chose for config ``group`` (``preset``: ``transformer_tiny``), else None (none
    chosen, or not a Hydra job)."""
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get().runtime.choices.get(group) if HydraConfig.initialized() else None


def in_sweep() -> bool:
    """Whether this process runs a job of a Hydra ``-m`` sweep (whose summary lists each job's outcome at its end)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
