"""Type and range checks of the composed config's numeric keys, run before any data is loaded.

One :class:`ConfigError` lists every bad key with its value and what was expected (``task.epochs = -1: expected
an int >= 1``), instead of a bare assertion inside Lightning after the data has loaded, a negative batch size
caught by torch without the key, or ``task.epochs=-1`` training nothing and recording a "finished" run. A key that
is an interpolation of a key already reported (``trainer.max_epochs: ${task.epochs}``) is not reported twice. A
key absent from the config is not checked (a family may not use it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

_ABSENT = object()


class ConfigError(ValueError):
    """Config values of the wrong type or out of range; the message names every bad key."""


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _int_at_least(lo: int, *, null: bool = False, also: tuple = ()) -> tuple[Callable[[Any], bool], str]:
    extra = "".join(f" or {x}" for x in also) + (" or null" if null else "")
    return (lambda v: (null and v is None) or (_int(v) and (v >= lo or v in also)), f"an int >= {lo}{extra}")


def _interval(lo: int) -> tuple[Callable[[Any], bool], str]:
    """Lightning's val_check_interval (lo=1) / limit_*_batches (lo=0): an int count >= lo, a float fraction of an
    epoch (in (0, 1], or [0, 1] with lo=0), or null."""
    ok = (lambda v: v is None or (_int(v) and v >= lo)
          or (isinstance(v, float) and (0.0 < v or lo == 0) and 0.0 <= v <= 1.0))
    fraction = "(0, 1]" if lo else "[0, 1]"
    return ok, f"an int >= {lo} (batches), a float in {fraction} (fraction of an epoch) or null"


_POSITIVE = (lambda v: _number(v) and v > 0, "a number > 0")
_NON_NEGATIVE_OR_NULL = (lambda v: v is None or (_number(v) and v >= 0), "a number >= 0 or null")

#: key -> (predicate, what was expected)
CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "seed": (_int, "an int"),
    "threads": _int_at_least(1, null=True),
    "task.epochs": _int_at_least(1),
    "task.max_steps": _int_at_least(1, null=True, also=(-1,)),
    "task.patience": _int_at_least(0, null=True),
    "task.val_check_interval": _interval(1),
    "task.check_val_every_n_epoch": _int_at_least(1, null=True),
    "task.average_last": _int_at_least(0, null=True),
    "task.gradient_clip_val": _NON_NEGATIVE_OR_NULL,
    "trainer.max_epochs": _int_at_least(1, null=True, also=(-1,)),
    "trainer.max_steps": _int_at_least(1, also=(-1,)),
    "trainer.val_check_interval": _interval(1),
    "trainer.check_val_every_n_epoch": _int_at_least(1, null=True),
    "trainer.log_every_n_steps": _int_at_least(1),
    "trainer.num_sanity_val_steps": _int_at_least(0, also=(-1,)),
    "trainer.limit_train_batches": _interval(0),
    "trainer.limit_val_batches": _interval(0),
    "trainer.limit_test_batches": _interval(0),
    "trainer.gradient_clip_val": _NON_NEGATIVE_OR_NULL,
    "trainer.accumulate_grad_batches": _int_at_least(1),
    "data.batch_size": _int_at_least(1),
    "data.eval_batch_size": _int_at_least(1, null=True),  # null: the training batch size
    "data.max_tokens": _int_at_least(1, null=True),
    "data.num_workers": _int_at_least(0),
    "data.max_train_examples": _int_at_least(1, null=True),
    "data.max_eval_examples": _int_at_least(1, null=True),
    "optimizer.lr": _POSITIVE,
}


def _value(cfg: DictConfig, key: str) -> tuple[Any, str | None]:
    """(resolved value or _ABSENT, the raw interpolation string if the node is one)."""
    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
    if not isinstance(parent, DictConfig) or leaf not in parent:
        return _ABSENT, None
    raw = None
    if OmegaConf.is_interpolation(parent, leaf):
        raw = str(parent._get_node(leaf)._value())
    try:
        return parent[leaf], raw
    except OmegaConfBaseException as err:  # an interpolation that does not resolve
        return f"<unresolvable: {err}>", raw


def check_config(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` listing every key of :data:`CHECKS` whose value is of the wrong type or range."""
    bad: dict[str, str] = {}
    for key, (ok, expected) in CHECKS.items():
        value, raw = _value(cfg, key)
        if value is _ABSENT or ok(value):
            continue
        if raw is not None and any(other in raw for other in bad):
            continue  # e.g. trainer.max_epochs: ${task.epochs} with task.epochs already reported
        source = f" (from {raw})" if raw is not None else ""
        bad[key] = f"{key} = {value!r}{source}: expected {expected}"
    if bad:
        raise ConfigError("invalid config values (fix the override or the YAML):\n  " + "\n  ".join(bad.values()))
