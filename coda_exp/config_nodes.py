"""Pre-data checks of whole config nodes, beyond :data:`coda_exp.config_checks.CHECKS`' one rule a key: the CoDA
attention options of every ``model.*`` node that builds a CoDA module, and the ``paths.*`` folders.

A CoDA option is checked by the module's own validation (``CoDAOptions`` and
``coda_exp.attention.coda.check_module_options``), one option at a time, so that each bad key gets its own message
(``model.attention.e_fn = 'bogus': CoDA option e_fn must be one of [...]``) before the data loads, instead of a
traceback when the model is built. ``kernel`` is left to ``coda_exp.run_checks.check_kernels`` (``$CODA_KERNEL``
overrides it). Each function returns {key: (message, the raw interpolation or None)}.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig
from omegaconf.errors import OmegaConfBaseException

from coda_exp.config_keys import raw_interpolation

#: the CoDA modules' class names (a node's ``_target_`` ends with one of them)
_CODA_MODULES = ("CoDACrossAttention", "CoDAScoring")
_SKIPPED = ("_target_", "_partial_", "name", "kernel")


def _resolved(node: DictConfig, key: str) -> tuple[Any, str | None, bool]:
    """(value, raw interpolation or None, whether it resolved)."""
    raw = raw_interpolation(node, key)
    try:
        return node[key], raw, True
    except OmegaConfBaseException:  # reported by the missing-value or interpolation checks
        return None, raw, False


def coda_option_problems(cfg: DictConfig) -> dict[str, tuple[str, str | None]]:
    """Each bad option of a ``model.<node>`` whose ``_target_`` is a CoDA module, with its message."""
    model = cfg.get("model") if isinstance(cfg, DictConfig) else None
    if not isinstance(model, DictConfig):
        return {}
    nodes = {f"model.{name}": node for name, node in model.items_ex(resolve=False)
             if isinstance(node, DictConfig) and str(node.get("_target_", "")).rpartition(".")[2] in _CODA_MODULES}
    if not nodes:
        return {}
    import inspect

    from coda_exp.attention.coda import check_module_options
    from coda_exp.attention.options import DEFAULTS, OPTION_NAMES

    module_args = set(inspect.signature(check_module_options).parameters)
    problems = {}
    for path, node in nodes.items():
        cross = str(node.get("_target_")).endswith("CoDACrossAttention")
        for key in node:
            if key in _SKIPPED or not (key in OPTION_NAMES or (cross and key in module_args)):
                continue
            value, raw, ok = _resolved(node, key)
            if not ok:
                continue
            try:
                if key in OPTION_NAMES:
                    DEFAULTS.replace(**{key: value})
                else:
                    check_module_options(**{key: value})
            except (ValueError, TypeError) as err:
                reason = str(err) if str(err).startswith("CoDA option") else f"CoDA option {err}"
                source = f" (from {raw})" if raw is not None else ""
                problems[f"{path}.{key}"] = (f"{path}.{key} = {value!r}{source}: {reason}", raw)
    return problems


def path_problems(cfg: DictConfig) -> dict[str, tuple[str, str | None]]:
    """Each ``paths.*`` folder that is empty, blank or null, and a blank ``data.dir``: an empty path is the current
    folder, where records and predictions would land unseen (``paths.results_root=``)."""
    problems = {}
    paths = cfg.get("paths") if isinstance(cfg, DictConfig) else None
    keys = [(paths, "paths", k) for k in paths] if isinstance(paths, DictConfig) else []
    data = cfg.get("data") if isinstance(cfg, DictConfig) else None
    if isinstance(data, DictConfig) and "dir" in data:
        keys.append((data, "data", "dir"))
    for node, section, key in keys:
        value, raw, ok = _resolved(node, key)
        if not ok or (raw is not None and raw.startswith("${hydra:")) or (section, key) == ("paths", "output_dir"):
            continue  # the run's own folder: Hydra's (``${hydra:...}``), or chosen by the command (eval: None here)
        empty = isinstance(value, str) and not value.strip()
        if empty or (value is None and section == "paths"):
            source = f" (from {raw})" if raw is not None else ""
            what = ("the data would be read from there" if section == "data"
                    else "where the run's files would land unseen")
            problems[f"{section}.{key}"] = (
                (f"{section}.{key} = {value!r}{source}: expected a folder path; an empty one is the current folder, "
                f"{what} (give a path, or leave the key out for its default)"), raw)
    return problems


def anchor_paths(cfg: DictConfig) -> None:
    """A relative ``data.dir``, and the relative paths of ``imports`` (``coda_exp.plugins``), made absolute from the
    current folder they were given in: the run's saved config and its checkpoint name them wherever they are read
    (``coda-exp eval`` from another folder read ``data/mine`` there)."""
    from coda_exp.plugins import KEY, is_path

    value = cfg.get(KEY) if isinstance(cfg, DictConfig) else None
    entries = [value] if isinstance(value, str) else list(value) if isinstance(value, ListConfig) else []
    if any(isinstance(e, str) and is_path(e) for e in entries):
        cfg[KEY] = [str(Path(e).expanduser().absolute()) if isinstance(e, str) and is_path(e) else e for e in entries]
    data = cfg.get("data") if isinstance(cfg, DictConfig) else None
    if not isinstance(data, DictConfig) or "dir" not in data:
        return
    value, _, ok = _resolved(data, "dir")
    if ok and isinstance(value, str) and value.strip() and not Path(value).expanduser().is_absolute():
        data.dir = str(Path(value).expanduser().absolute())
