"""Overrides that change nothing: a run's override whose value is what its configuration has without it.

``task=snli model=decompatt optimizer.lr=0.0003`` trains exactly as ``task=snli model=decompatt`` (Adam's 3e-4 is
that configuration's learning rate), so its fingerprint must be the same (``coda_exp.fingerprint``, "Defaults typed
out"). :func:`default_overrides` finds such overrides among those the fingerprint hashes
(:func:`coda_exp.fingerprint.hashed`): the run's config is composed by Hydra with all its overrides and with
none of those, and an override is a default where its key has the same value in both (resolved:
``${model.hidden_size}`` is its value; the same type and value: ``3e-4`` = ``0.0003``, but ``1`` is not ``1.0``), or
for a group choice (``optimizer=adam``) the same option. Where only some are, those are checked again left out
together (the others kept), so that leaving them out of the fingerprint describes the same run.

The composition is Hydra's compose API: within the running Hydra app (its config folders, ``--config-dir`` and
``hydra.searchpath`` included), else of ``configs/`` (a run started by a test, or by ``pipeline.run`` from a
composed config). Whatever fails (a config that does not compose here, a value that does not resolve without the
run's Hydra job) keeps that override in the fingerprint, as before: this never stops a run.

An experiment's own settings (``experiment=...``: ``coda_exp.experiments``) are never judged here: a table's grid is
what its experiments' files set, read without composing (``coda_exp.experiments.table_grid``), so a run of the
experiment must hash its settings as written; and a setting cannot be left out of a composition by an override.
A typed override equal to what the experiment sets is a default like any other: left out, the experiment's own
setting of that key takes its place in the fingerprint (``coda_exp.fingerprint.with_settings``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from coda_exp.fingerprint import hashed, override_key

log = logging.getLogger(__name__)

_ABSENT = object()


def candidates(overrides: list[str]) -> list[str]:
    """The overrides the fingerprint hashes that could be a default: not a deletion (``~key``), not a sweep."""
    return [o for o in overrides if "=" in o and not o.startswith("~") and hashed(o)]


def default_overrides(overrides: list[str]) -> list[str]:
    """The overrides of ``overrides`` (a run's own, as typed: Hydra's task overrides) whose value is what the
    configuration has without them (module docstring), in their order; ``[]`` where none is or none can be told."""
    if not (found := candidates(overrides)):
        return []
    try:
        with _composer() as compose:
            # few compositions (each ~0.15 s; a run's start, every test's): the values all left out at once, under
            # the run's group choices (``optimizer=adagrad optimizer.lr=0.01``: AdaGrad's lr); each group choice
            # alone (rare); then, where only some are defaults, those left out together (the others may feed
            # their values: ``${model.hidden_size}``)
            full = compose(overrides)
            groups = [o for o in found if override_key(o) in full.hydra.runtime.choices]
            values = [o for o in found if o not in groups]
            base = compose(_without(overrides, values)) if values else None
            chosen = [o for o in values if _unchanged(full, lambda: base, o)]
            chosen += [o for o in groups if _unchanged(full, lambda o=o: compose(_without(overrides, [o])), o)]
            chosen = [o for o in found if o in chosen]  # in their order
            if chosen and chosen != found:
                rest = compose(_without(overrides, chosen))
                if not all(_unchanged(full, lambda: rest, o) for o in chosen):
                    return []
            found = chosen
    except Exception as err:  # noqa: BLE001 - no default known: the fingerprint counts every override, as before
        log.debug("the configuration's defaults could not be composed (%s): every override counts", err)
        return []
    return found


def _without(overrides: list[str], left_out: list[str]) -> list[str]:
    return [o for o in overrides if o not in left_out]


def _unchanged(full, compose_without: Callable, override: str) -> bool:
    """Whether the override's key has the same value in ``full`` and in ``compose_without()``; False where either
    fails (not composed, not resolved)."""
    key = override_key(override)
    try:
        mine, other = _value(full, key), _value(compose_without(), key)
    except Exception as err:  # noqa: BLE001 - not known: the override counts
        log.debug("%s: its default could not be told (%s)", override, err)
        return False
    return mine is not _ABSENT and _typed(mine) == _typed(other)


def _value(cfg, key: str):
    """A group's option (``optimizer`` -> ``adam``), else the key's resolved value; ``_ABSENT`` where there is none."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    choices = cfg.hydra.runtime.choices
    if key in choices:
        return ("option", choices.get(key))
    if "/" in key or "@" in key:
        return _ABSENT
    node = OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=True)
    if isinstance(node, (DictConfig, ListConfig)):
        return OmegaConf.to_container(node, resolve=True)
    return node


def _typed(value):
    """A value with the type of each of its parts, so that ``1`` and ``1.0``, ``true`` and ``1`` differ."""
    if isinstance(value, dict):
        return ("dict", tuple(sorted((str(k), _typed(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_typed(v) for v in value))
    return (type(value).__name__, value)


@contextmanager
def _composer() -> Iterator[Callable[[list[str]], object]]:
    """``compose(overrides)``: the config with its Hydra node, composed as the running app composes (its config
    name, its search path, its ``hydra.searchpath=`` override), else from ``configs/train.yaml``."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    if GlobalHydra.instance().is_initialized():
        name, extra = "train", []
        if HydraConfig.initialized():
            job = HydraConfig.get()
            name = str(job.job.get("config_name") or name)
            extra = [str(o) for o in job.overrides.get("hydra") or [] if override_key(str(o)) == "hydra.searchpath"]
        yield lambda overrides: compose(name, overrides=[*extra, *overrides], return_hydra_config=True)
        return
    from coda_exp.environment import config_dir

    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        yield lambda overrides: compose("train", overrides=list(overrides), return_hydra_config=True)
