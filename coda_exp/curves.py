"""Validation curves and run groups from run records: what the learning-curve plot and the comparison table
(``coda-exp plot-curves``, ``coda-exp compare``) share.

Records. :func:`load_run_records` reads every record of one or more folders (``<folder>/runs`` when there is one,
else the folder itself), skipping corrupt files with a warning as :func:`coda_exp.results.load_records` does; a run
found in two folders counts once.

Groups. :func:`group_label` names the group a run belongs to: its model (``by="model"``), or its model and attention
variant (``by="attention-variant"``): the CoDA options (``hparams.scoring`` of a Transformer, ``hparams.attention``
of a pairwise model, else the record's ``attention``) that differ from the defaults of the module that ran
(``CoDAOptions`` with the module's ``OPTION_DEFAULTS``, and its constructor's other defaults: ``hidden=200``...), e.g. ``coda_transformer[center_n=true]``. ``kernel`` is left
out (every kernel computes the same function), and so are Hydra's own keys and the option set's ``name``. A run of
another configuration than its table's grid (:mod:`coda_exp.fingerprint`: ``optimizer.lr=0.001``...) is a variant
too: its configuration overrides follow in braces, ``transformer {optimizer.lr=0.001}`` (an attention option the
brackets show already, ``coda_transformer[beta=0]``, not again), so it is never pooled with the grid's seeds.

Curves. :func:`validation_curve` gives a record's ``val_curve`` against training steps: the recorded
``val_curve_steps``; for a record without them (older runs) or with unknown (null) entries (a run resumed from an
older checkpoint), validation ``i`` (from 1) at ``i * val_check_interval`` when the record's overrides
(``task.val_check_interval=N``, ``trainer.val_check_interval=N``) or ``hparams.val_check_interval`` give an integer
interval; else the validation index (1, 2, ...), flagged as such (``Curve.kind``).
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from coda_exp.experiments import record_configuration
from coda_exp.fingerprint import digest, override_key
from coda_exp.results import RecordWarning, created_time, load_records

GROUP_BY = ("model", "attention-variant")
IGNORED_OPTIONS = ("name", "kernel")  # not what a variant computes (and Hydra's _target_, _partial_)
INTERVAL_KEYS = ("task.val_check_interval", "trainer.val_check_interval")


def runs_folder(folder: str | os.PathLike) -> Path:
    """Where a folder's records lie: ``<folder>/runs`` when it exists (a results folder), else the folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"no such folder of run records: {folder}")
    return folder / "runs" if (folder / "runs").is_dir() else folder


def load_run_records(folders: Iterable[str | os.PathLike]) -> list[dict]:
    """The valid training records (``*.json``) of every folder (:func:`runs_folder`), each run once (by ``run_id``;
    a second copy is reported with a warning), sorted by creation time then run id. Records of ``coda-exp eval``
    (``mode: "eval"``: no training curve, and not a second run of their seed) are left out."""
    out: dict[str, dict] = {}
    for folder in folders:
        for record in load_records(runs_folder(folder)):
            if record.get("mode") == "eval":
                continue
            if record["run_id"] in out:
                warnings.warn(f"run {record['run_id']} is in several folders: counted once", RecordWarning,
                              stacklevel=2)
                continue
            out[record["run_id"]] = record
    return list(out.values())


# --------------------------------------------------------------------------------------------------
# groups


def _where(record: dict) -> str:
    return f"run record {record.get('run_id', '?')}.json"


def _option_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)


def _same(a, b) -> bool:
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def attention_options(record: dict) -> dict:
    """The options of the run's attention as configured: ``hparams.scoring`` (Transformers), ``hparams.attention``
    (pairwise models), else the record's ``attention``; ``{}`` when none is recorded."""
    hparams = record.get("hparams") if isinstance(record.get("hparams"), dict) else {}
    for options in (hparams.get("scoring"), hparams.get("attention"), record.get("attention")):
        if isinstance(options, dict):
            return options
    return {}


def option_defaults(options: dict, record: dict | None = None) -> dict:
    """The defaults an option set is compared with: ``CoDAOptions()`` updated with the declared differences
    of the module that ran (``coda_exp.attention.option_defaults`` of its ``_target_``; without one,
    ``CoDAScoring``'s for a Transformer's ``scoring`` and ``CoDACrossAttention``'s for a pairwise model's
    ``attention``), and the module's other constructor defaults (:func:`constructor_defaults`:
    ``CoDACrossAttention``'s ``hidden``, ``dropout``, ``projection``, ``share_projections``)."""
    from coda_exp.attention import option_defaults as module_defaults

    target = options.get("_target_")
    if not target:
        hparams = (record or {}).get("hparams") or {}
        target = "CoDAScoring" if "scoring" in hparams else "CoDACrossAttention" if "attention" in hparams else None
    return {**constructor_defaults(target), **module_defaults(target)}


def constructor_defaults(target: str | None) -> dict:
    """The keyword defaults of the constructor of the class ``target`` names (a ``_target_``, or a class name of
    ``coda_exp.attention``); ``{}`` where it names none that can be imported (a record of older code)."""
    import importlib
    import inspect

    if not target:
        return {}
    module, _, name = str(target).rpartition(".")
    try:
        cls = getattr(importlib.import_module(module or "coda_exp.attention"), name)
        parameters = inspect.signature(cls).parameters.values()
    except (ImportError, AttributeError, TypeError, ValueError):
        return {}
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def attention_variant(record: dict) -> dict:
    """The run's CoDA options that differ from their defaults (:func:`option_defaults`), sorted by name; ``{}`` for
    a softmax run or a default CoDA one. An option today's code does not know (a record of older code) counts
    unless it is null (unset)."""
    options = attention_options(record)
    if options.get("name", "coda") != "coda":
        return {}
    defaults = option_defaults(options, record)
    return {key: value for key, value in sorted(options.items())
            if not key.startswith("_") and key not in IGNORED_OPTIONS
            and not (_same(value, defaults[key]) if key in defaults else value is None)}


def off_grid_overrides(record: dict, grid: Iterable[str] = ()) -> list[str]:
    """The run's configuration overrides beyond the grid axes, under today's rule
    (:func:`coda_exp.experiments.record_configuration`: an older record's from its overrides); empty for a run of
    the grid (``grid``: a table's, ``coda_exp.experiments.table_grid``; by default the plain configuration, whose
    fingerprint is ``GRID_FINGERPRINT``)."""
    fingerprint, overrides = record_configuration(record)
    return [] if fingerprint == digest(sorted(grid)) else overrides


def shown_in(override: str, variant: dict) -> bool:
    """Whether ``override`` sets an attention option the group label already shows (``model.scoring.beta=0`` in
    ``coda_transformer[beta=0]``)."""
    key = override_key(override)
    return key.startswith(("model.attention.", "model.scoring.")) and key.split(".", 2)[2] in variant


def group_label(record: dict, by: str = "attention-variant", grid: Iterable[str] = ()) -> str:
    """The name of the run's group: its model (``by="model"``) or its model, non-default CoDA options and
    configuration beyond the grid (``by="attention-variant"``; ``grid``: :func:`off_grid_overrides`), e.g.
    ``coda_transformer[center_n=true]``."""
    if by not in GROUP_BY:
        raise ValueError(f"group by must be one of {list(GROUP_BY)}, got {by!r}")
    label = str(record["model"])
    if by == "model":
        return label
    variant = attention_variant(record)
    if variant:
        label += "[" + ", ".join(f"{key}={_option_text(value)}" for key, value in variant.items()) + "]"
    config = [o for o in off_grid_overrides(record, grid) if not shown_in(o, variant)]
    return f"{label} {{{', '.join(config)}}}" if config else label


def latest_per_seed(records: list[dict]) -> tuple[list[dict], list[str]]:
    """One group's runs, one per seed (the latest by ``created``, then run id), in seed order, and a line per run
    that a later one of the same seed superseded."""
    latest: dict[int, dict] = {}
    superseded = []
    for record in sorted(records, key=lambda r: (created_time(r), r["run_id"])):
        if record["seed"] in latest:
            superseded.append(f"{latest[record['seed']]['run_id']} (superseded by {record['run_id']}, seed "
                              f"{record['seed']})")
        latest[record["seed"]] = record
    return [latest[s] for s in sorted(latest)], superseded



# --------------------------------------------------------------------------------------------------
# curves


@dataclass(frozen=True)
class Curve:
    """A run's validation curve: ``values`` at ``steps``. ``kind``: ``"steps"`` (all recorded), ``"interval"`` (some
    or all from the validation interval), ``"index"`` (steps unknown: validation 1, 2, ...)."""

    values: list[float]
    steps: list[int]
    kind: str

    @property
    def has_steps(self) -> bool:
        return self.kind != "index"


def val_check_interval(record: dict) -> int | None:
    """The run's validation interval in steps, from its overrides (the last ``task.`` or
    ``trainer.val_check_interval=N``) or ``hparams.val_check_interval``; None when neither gives an integer."""
    found = None
    for override in record.get("overrides") or []:
        if override_key(override) in INTERVAL_KEYS:
            text = override.split("=", 1)[1].strip() if "=" in override else ""
            found = int(text) if text.isascii() and text.isdigit() and int(text) > 0 else None
    if found is None:
        value = (record.get("hparams") or {}).get("val_check_interval")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            found = value
    return found


def validation_curve(record: dict) -> Curve:
    """The record's ``val_curve`` against steps (module docstring); ValueError naming the record and key when
    ``val_curve`` is not a list of finite numbers or ``val_curve_steps`` not a list of ints (or null) of its length."""
    values = record.get("val_curve") or []
    if not isinstance(values, list) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
        raise ValueError(f"{_where(record)}: key 'val_curve': expected a list of finite numbers, got {values!r:.80}")
    recorded = record.get("val_curve_steps")
    if recorded is None:
        recorded = [None] * len(values)
    if not isinstance(recorded, list) or len(recorded) != len(values) or not all(
            s is None or (isinstance(s, int) and not isinstance(s, bool) and s >= 0) for s in recorded):
        raise ValueError(f"{_where(record)}: key 'val_curve_steps': expected a list of {len(values)} ints >= 0 or "
                         f"null (one per val_curve entry), got {recorded!r:.80}")
    values = [float(v) for v in values]
    if all(s is not None for s in recorded):
        return Curve(values, list(recorded), "steps")
    interval = val_check_interval(record)
    if interval is not None:
        return Curve(values, [s if s is not None else interval * (i + 1) for i, s in enumerate(recorded)], "interval")
    return Curve(values, list(range(1, len(values) + 1)), "index")


def monitored_metrics(records: Iterable[dict]) -> dict[str, int]:
    """{metric: how many of ``records`` monitored it} (their ``val_curve_metric``; a record without one, older,
    is not counted), the most common first, then by name."""
    counts: dict[str, int] = {}
    for record in records:
        if record.get("val_curve_metric") is not None:
            counts[record["val_curve_metric"]] = counts.get(record["val_curve_metric"], 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def first_step_reaching(curve: Curve, threshold: float) -> int | None:
    """The first step at which the curve is >= ``threshold``; None when it never is."""
    return next((step for step, value in zip(curve.steps, curve.values) if value >= threshold), None)
