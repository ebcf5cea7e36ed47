"""Optional dependencies: what some features need and the core install leaves out (``pyproject.toml``'s extras).

``[wandb]`` (``logger=wandb``), ``[tensorboard]`` (``logger=tensorboard``), ``[plots]`` (the ``plot-*`` commands:
matplotlib), ``[fever]`` (FEVER retrieval, ``task=fever``, ``fever-index``, ``fever-retrieve``: scikit-learn);
``[all]`` is every one of them (``[dev]`` includes it); ``[keops]`` (pykeops, for the benchmark peer
``coda_exp.peers.keops_coda``) is not in it: KeOps compiles C++ on first use. :func:`require` is called where a
feature starts, before the import that needs the package, so a missing one is one message naming the extra to
install (``coda_exp.cli`` prints it and exits 2), not a traceback from deep inside a library. A leaf: imports
nothing of coda_exp but ``errors``.
"""

from __future__ import annotations

import importlib.util

from coda_exp.errors import UserError

#: import name -> (the extra that installs it, the pip package)
EXTRAS = {
    "wandb": ("wandb", "wandb"),
    "tensorboard": ("tensorboard", "tensorboard"),
    "matplotlib": ("plots", "matplotlib"),
    "sklearn": ("fever", "scikit-learn"),
    "pykeops": ("keops", "pykeops"),
}
#: import name -> other packages that serve instead (Lightning's TensorBoardLogger takes either)
ALTERNATIVES = {"tensorboard": ("tensorboardX",)}
#: a logger class (the end of its ``_target_``) -> the import name it needs
LOGGERS = {"WandbLogger": "wandb", "TensorBoardLogger": "tensorboard"}


class MissingExtraError(UserError, ModuleNotFoundError):
    """An optional dependency a feature needs is not installed; the message names the extra to install."""


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        return False


def require(module: str, feature: str) -> None:
    """Raise :class:`MissingExtraError` when ``module`` (a key of :data:`EXTRAS`) is not installed; ``feature`` is
    what the user asked for (``logger=wandb``, ``coda-exp plot-curves``)."""
    if any(installed(name) for name in (module, *ALTERNATIVES.get(module, ()))):
        return
    extra, package = EXTRAS[module]
    raise MissingExtraError(f"{feature} needs {package}, which is not installed: pip install 'coda-exp[{extra}]' "
                            f"(or pip install {package}; from a checkout: pip install -e '.[{extra}]')")


def require_loggers(targets: list[str]) -> None:
    """:func:`require` the package of each logger class among ``targets`` (``logger=wandb``, ``logger=tensorboard``)."""
    for target in targets:
        module = LOGGERS.get(str(target).rsplit(".", 1)[-1])
        if module is not None:
            require(module, f"logger={module} ({target})")
