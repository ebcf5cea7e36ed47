"""Keys a user adds that nothing reads: a ``+key=value`` override of a key the config has under another section
(:func:`appended_key_problems`), and a key of the machine's ``configs/local/default.yaml`` that no config has
(:func:`local_key_problems`); with the keys a user may have meant (:func:`same_name_keys`). Reads composed configs
only (no Lightning, no torch): the entry point asks before Hydra sets up logging."""

from __future__ import annotations

import difflib
import re
from typing import Any

from omegaconf import DictConfig, OmegaConf

from coda_exp.fingerprint import OUTPUT_KEYS, PARALLEL_KEYS, VECTORS_PATH


def leaves(node: Any, prefix: str = "", keep_empty: bool = False) -> dict[str, Any]:
    """Every value's dotted path in a (to_container, unresolved) config, with the value, in the config's order. An
    empty mapping below the top (``x: {}``) holds no value and is left out, unless ``keep_empty``: then it is a value
    of its own (``{"x": {}}``), as an experiment's settings read it (``coda_exp.experiments``: ``x={}``)."""
    out: dict[str, Any] = {}
    if isinstance(node, dict) and (node or not (keep_empty and prefix)):
        for key, value in node.items():
            out.update(leaves(value, f"{prefix}{key}.", keep_empty))
    elif prefix:
        out[prefix[:-1]] = node
    return out


def raw_interpolation(node: DictConfig, key: str) -> str | None:
    """``node[key]``'s interpolation as written (``${task.cpu_scheduler}``), or None for a plain value; read from an
    unresolved copy of that key alone (nothing else is resolved or copied)."""
    if not OmegaConf.is_interpolation(node, key):
        return None
    return str(OmegaConf.to_container(OmegaConf.masked_copy(node, key), resolve=False)[key])


_REFERENCE = re.compile(r"\$\{([A-Za-z_][\w.]*)\}")  # ${task.patience}: a key, not a resolver (${oc.select:...})


def absent_references(cfg: DictConfig) -> dict[str, str]:
    """Each absent key that another key interpolates (a new task's YAML without ``patience:``, which
    ``callbacks.early_stopping.patience: ${task.patience}`` reads), with its message: OmegaConf would raise an
    InterpolationKeyError with a traceback where the run first resolves it, after the data had loaded. The
    ``hydra`` section left out; resolver calls (``${oc.select:key,default}``) may name absent keys."""
    paths = leaves(OmegaConf.to_container(cfg, resolve=False), keep_empty=True)
    present = set(paths) | {p.rsplit(".", i)[0] for p in paths for i in range(1, p.count(".") + 1)}
    problems: dict[str, str] = {}
    for key, value in paths.items():
        if key.startswith("hydra.") or not isinstance(value, str):
            continue
        for ref in _REFERENCE.findall(value):
            if ref not in present and ref not in problems:
                where = ("the task's YAML (configs/task/<task>.yaml)" if ref.startswith(("task.", "data."))
                         else "the YAML that should set it")
                problems[ref] = (f"{ref} is absent, but {key} reads it ({value}): give it a value (+{ref}=... on the "
                                 f"command line, or in {where})")
    return problems


def same_name_keys(cfg: DictConfig, key: str, close: bool = False) -> list[str]:
    """The config's other keys named like ``key``'s last part (``data.batch_size`` for ``task.batch_size``), and with
    ``close`` the keys spelled almost like ``key`` (``model.dropout`` for ``model.dropoutt``), the ``hydra`` section
    left out: what a user who typed ``key`` may have meant."""
    name = key.rsplit(".", 1)[-1]
    paths = [p for p in leaves(OmegaConf.to_container(cfg, resolve=False)) if p != key and not p.startswith("hydra.")]
    found = [p for p in paths if p.rsplit(".", 1)[-1] == name]
    if close:
        found += [p for p in difflib.get_close_matches(key, paths, n=3, cutoff=0.85) if p not in found]
    return found


def top_level_like(cfg: DictConfig, key: str) -> str | None:
    """The config's top-level key or config group spelled almost like ``key`` (``seed`` for ``seeds``), if any."""
    from coda_exp.environment import config_dir

    folder = config_dir()
    groups = [p.name for p in folder.iterdir() if p.is_dir()] if folder.is_dir() else []
    names = {str(k) for k in cfg if str(k) not in (key, "hydra")} | set(groups)
    close = difflib.get_close_matches(key, sorted(names), n=1, cutoff=0.8)
    return close[0] if close else None


# the sections whose appended keys go straight to a constructor that checks them (Lightning's Trainer, Hydra's
# instantiation of callbacks and loggers; the trainer's and the loggers' keys are checked before any data loads:
# run_checks.check_trainer, logger_checks.logger_key_problems) or to Hydra itself
_PASSED_ON = ("trainer.", "callbacks.", "logger.", "hydra.")


def _read_through(raw: dict[str, Any]):
    """A test of whether a value of the flattened, unresolved config ``raw`` refers to a key (``${key}``,
    ``${oc.select:key,...}``): a key read through another is read."""
    text = " ".join(v for v in raw.values() if isinstance(v, str) and "${" in v)
    return lambda key: re.search(rf"[{{:,\s]{re.escape(key)}[}},\s]", text) is not None


def appended_key_problems(cfg: DictConfig, appended: list[tuple[str, str]]) -> list[str]:
    """Of the ``+key=value`` overrides (``appended``: (key, override as typed)), those that add a key the config
    already has under another section and that no config value refers to: ``+task.batch_size=0`` (Hydra's own hint
    after ``task.batch_size=0``) adds a key nothing reads while ``data.batch_size`` goes on at its default. A key
    another value refers to (``+task.gradient_clip_val``, which ``trainer.gradient_clip_val`` selects) is not one;
    nor is a new top-level key that nothing refers to and is spelled like one the config has (``+seeds=2`` for
    ``seed``, ``+threds=1``). ``++key=value`` adds a key without this check."""
    raw = leaves(OmegaConf.to_container(cfg, resolve=False))
    referenced = _read_through(raw)
    problems = []
    for key, typed in appended:
        if key not in raw or key.startswith(_PASSED_ON) or referenced(key):
            continue  # a group's option (+experiment=...), a constructor's argument, or read through another key
        others = same_name_keys(cfg, key)
        if not others and "." not in key and "/" not in key:
            close = top_level_like(cfg, key)
            if close is not None:
                value = typed.split("=", 1)[1] if "=" in typed else ""
                problems.append(f"{typed} adds a new top-level key {key} that nothing reads, spelled like {close}: "
                                f"did you mean {close}={value}? (to add the key anyway: +{typed})")
                continue
        if others:
            value = typed.split("=", 1)[1] if "=" in typed else ""
            meant = " or ".join(f"{o}={value}" for o in others[:3])
            problems.append(f"{typed} adds a new key {key} that no config value refers to, while the config has "
                            f"{', '.join(others[:3])}: did you mean {meant}? (to add the key anyway: +{typed})")
    return problems


#: the machine's own settings (``configs/train.yaml``: ``optional local@_global_: default``), git-ignored
LOCAL_CONFIG = "local/default.yaml"


def local_key_problems(cfg: DictConfig, overrides: list[str], compose) -> list[str]:
    """The keys ``configs/local/default.yaml`` adds that no other config has and no config value refers to
    (``paths: {data_dirr: /data}``, which the run would ignore, falling back to the default folder or the hub), each
    with the key spelled almost alike where there is one. ``cfg``: the config composed from ``overrides``;
    ``compose(overrides)``: Hydra's compose, inside its initialisation, which composes the config without the file
    (with the groups the file's own defaults list overrides) to tell its new keys apart. Keys of the sections passed
    on to a constructor that checks them (``trainer``, ``callbacks``, ``logger``, ``hydra``) are left to it; a config
    that does not compose without the file (an override of a key only the file has) is not checked."""
    from hydra.errors import HydraException

    from coda_exp.environment import config_dir

    path = config_dir() / LOCAL_CONFIG
    if not path.is_file():
        return []
    defaults = OmegaConf.load(path).get("defaults") or []
    chosen = [f"{str(k).split()[-1].lstrip('/')}={v}" for entry in defaults if isinstance(entry, DictConfig)
              for k, v in entry.items() if str(k).startswith("override ")]
    try:
        without = compose([*overrides, *chosen, "~local@_global_"])
    except HydraException:
        return []
    raw = leaves(OmegaConf.to_container(cfg, resolve=False))
    known = {".".join(k.split(".")[:n]) for k in leaves(OmegaConf.to_container(without, resolve=False), keep_empty=True)
             for n in range(1, k.count(".") + 2)} | {str(k) for k in without}  # a section set to a value is known
    referenced = _read_through(raw)
    problems = []
    for key in raw:  # (a location key another task has, data.cache_dir for MLU: the file serves every task)
        if key in known or key.startswith(_PASSED_ON) or key in OUTPUT_KEYS or referenced(key):
            continue
        meant = same_name_keys(without, key, close=True) or (
            [close] if "." not in key and (close := top_level_like(without, key)) else [])
        hint = f": did you mean {' or '.join(meant[:3])}?" if meant else ""
        problems.append(f"{path} sets {key}, a key no config has and nothing reads{hint}")
    return problems or local_setting_problems(path)


#: what the machine's file may choose: where things are and how a run is placed and logged, never what it computes
#: (a run's fingerprint holds its command line's and experiment's settings, not this file's)
LOCAL_GROUPS = ("trainer", "callbacks", "logger", "paths", "hydra")


def local_setting_problems(path) -> list[str]:
    """The settings of the machine's ``configs/local/default.yaml`` (at ``path``) that change what a run computes
    (``optimizer.lr``, ``data.batch_size``, the word vectors, ``override /optimizer: adagrad``): refused, since
    tables tell runs apart by what their command lines and experiments set (``coda_exp.fingerprint``), so a run
    changed there would be pooled with the default's. Where things are (``paths``, ``data.dir``), how a run is
    placed and logged (``fingerprint.OUTPUT_KEYS``, the number of processes) are what the file is for."""
    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}
    defaults = raw.pop("defaults", None) or []
    groups = [str(k).split()[-1].lstrip("/") for entry in defaults if isinstance(entry, dict) for k in entry]
    allowed = tuple(k for k in OUTPUT_KEYS + PARALLEL_KEYS if k != VECTORS_PATH)
    keys = [k for k in leaves(raw) if not any(k == a or k.startswith(a + ".") for a in allowed)]
    keys += [f"{g} (a defaults choice)" for g in groups if g.split("/")[0] not in LOCAL_GROUPS]
    if not keys:
        return []
    return [(f"{path} sets {', '.join(keys)}: that file says where things are on this machine (paths.*, data.dir, "
             "data.cache_dir, the logger, the trainer's accelerator and devices), not what a run computes, which "
             "tables would not see (a run's fingerprint holds what its command line and experiment set); give "
             f"{'it' if len(keys) == 1 else 'them'} on the command line or in an experiment")]


def group_option_hint(key: str, cfg: DictConfig | None, value: str) -> str:
    """For ``model.scoring.kernel=...`` where the model's ``model/scoring`` option (softmax) has no ``kernel``: the
    options of the ``model/<group>`` groups that have it, as a line of its own, or empty when none has it or ``cfg``
    (the config composed without the override) is None. Hydra's advice, ``+model.scoring.kernel``, would add a key
    the chosen module refuses."""
    import yaml

    from coda_exp.environment import config_dir

    parts = key.split(".")
    if cfg is None or len(parts) < 3 or parts[0] != "model":
        return ""
    group, option = parts[1], parts[2]
    folder = config_dir() / "model"
    holders: dict[str, list[str]] = {}
    for path in sorted(folder.glob("*/*.yaml")) if folder.is_dir() else []:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(loaded, dict) and option in loaded:
            holders.setdefault(f"model/{path.parent.name}", []).append(path.stem)
    choices = cfg.hydra.runtime.choices
    own = {g: holders[g] for g in holders if choices.get(g) is not None}
    if not own:
        return ""
    name, current = cfg.model.get("name"), choices.get(f"model/{group}")
    ways = " or ".join(f"{g}={o} model.{g.split('/')[1]}.{'.'.join(parts[2:])}={value}"
                       for g, options in own.items() for o in options)
    where = (f"model={name} chooses model/{group}={current}, which has no {option}" if current is not None
             else f"model={name} has no model/{group}")
    found = ", ".join(f"{g}={o}" for g, options in holders.items() for o in options)
    return f"\n{where}; {option} is an option of {found}: did you mean {ways}?"
