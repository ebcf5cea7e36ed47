"""An experiment's own settings, a table's grid, and a run's configuration fingerprint with both
(:mod:`coda_exp.fingerprint` holds the rule; this module reads ``configs/experiment/*.yaml`` for it).

Settings. ``experiment=attconv_table_7`` trains with AdaGrad at batch 50 and SNLI truncated at 70 tokens because its
YAML says so, not its command line. An experiment's settings count as if they were overrides of the run
(:func:`experiment_settings`): every key its file sets outside ``hydra:`` and outside its own sweep parameters
(``data.batch_size=50``; a value in ``${...}`` as written), and each defaults-list line ``override /group: option``
as ``group=option`` (``optimizer=adagrad``). The run's own overrides follow them, a key the command line sets
replacing the experiment's (:func:`coda_exp.fingerprint.with_settings`), and the fingerprint's rule then drops the
grid axes, budget and output keys of both as ever. So a plain run that gives the same settings on its command line
(``task=snli model=attconv_light optimizer=adagrad data.batch_size=50 data.max_len_a=70 data.max_len_b=70``) has the
experiment's fingerprint and pools with its runs; one without them has another and is listed apart.

Grids. A table's grid (:func:`table_grid`) is the configuration its experiments set: ``configs/experiment/<id>.yaml``
and ``<id>_*.yaml``, the files ``make reproduce-<id>`` runs, which must agree (a :class:`ValueError` names them
where they do not). A table whose experiments set nothing beyond the grid axes (``table_6``'s ``task=mlu``, Table 8's
centring) keeps :data:`coda_exp.fingerprint.GRID_FINGERPRINT`: only the AttConv SciTail and SNLI tables have one
of their own (:func:`grid_fingerprint`).

Records. A run records its experiment and the settings it read (``experiment``, ``experiment_overrides``), so its
fingerprint never depends on a later version of the file; an experiment file changed since is another
configuration. A record without them (written under an earlier fingerprint rule) is read with today's file of the
``experiment=`` its overrides name (none if that file is gone), and its fingerprint derived again
(:func:`record_configuration`).
"""

from __future__ import annotations

import functools
from pathlib import Path

import yaml

from coda_exp.config_keys import leaves
from coda_exp.environment import config_dir
from coda_exp.fingerprint import (
    FINGERPRINT_RULE,
    configuration_overrides,
    digest,
    is_fixture_scale,
    override_key,
    record_overrides,
    with_settings,
    without_defaults,
)


def experiment_dir() -> Path:
    return config_dir() / "experiment"


def _text(value) -> str:
    """A YAML value as the command line writes it: ``true``, ``null``, ``[0.9,0.98]``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ",".join(_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_text(v)}" for k, v in value.items()) + "}"
    return str(value)


@functools.lru_cache(maxsize=256)
def _settings(path: str, _mtime_ns: int) -> tuple[str, ...]:
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    swept = set(((raw.get("hydra") or {}).get("sweeper") or {}).get("params") or {})
    out = []
    for entry in raw.get("defaults") or []:
        for key, option in (entry.items() if isinstance(entry, dict) else ()):
            group = str(key).split()[-1].lstrip("/")  # "override /optimizer" -> optimizer
            if group not in swept and not group.startswith("hydra"):
                out.append(f"{group}={_text(option)}")
    body = {k: v for k, v in raw.items() if k not in ("defaults", "hydra")}
    settings = [f"{key}={_text(value)}" for key, value in leaves(body, keep_empty=True).items()]
    return tuple(out + [o for o in settings if override_key(o) not in swept])


def searched_experiment_folders() -> list[Path]:
    """The ``experiment/`` folders of the running Hydra job's config sources on disk, in Hydra's search order (the
    configs, then ``hydra.searchpath``'s folders); none outside a Hydra job."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    sources = HydraConfig.get().runtime.get("config_sources") or []
    return [Path(str(s.path)) / "experiment" for s in sources if str(s.get("schema")) == "file" and s.get("path")]


def experiment_settings(name: str | None, folder: Path | None = None) -> list[str] | None:
    """What ``<folder>/<name>.yaml`` sets, as overrides (module docstring); without ``folder``, the first of
    ``configs/experiment/`` and, in a Hydra job, its :func:`searched_experiment_folders` (an experiment of one's own
    in a ``hydra.searchpath`` folder, docs/layout.md: it was counted as none, its settings left out of the
    fingerprint); ``[]`` without an experiment, None when there is no such file."""
    if not name:
        return []
    for place in [folder] if folder is not None else [experiment_dir(), *searched_experiment_folders()]:
        path = place / f"{name}.yaml"
        if path.is_file():
            return list(_settings(str(path), path.stat().st_mtime_ns))
    return None


def experiment_of(overrides: list[str]) -> str | None:
    """The ``experiment=`` a command line names (the last), else None."""
    names = [o.split("=", 1)[1].strip() for o in overrides if "=" in o and override_key(o) == "experiment"]
    return names[-1] if names and names[-1].lower() not in ("", "null", "none") else None


def run_configuration(overrides: list[str], vectors: dict | None, experiment: str | None,
                      settings: list[str] | None = None, world_size: int | None = None,
                      defaults: list[str] | None = None) -> dict:
    """The record's ``experiment``, ``experiment_overrides``, ``fingerprint``, ``fingerprint_overrides``,
    ``fingerprint_rule`` and ``fingerprint_defaults`` of a run of ``overrides`` (``settings``: its experiment's, read
    from its file when None; ``world_size``: its processes, :data:`coda_exp.fingerprint.PARALLEL_KEYS`, else what
    the overrides say; ``defaults``: those of ``overrides`` that set what the configuration has without them,
    ``coda_exp.default_overrides``, left out of the fingerprint and recorded)."""
    experiment = experiment or experiment_of(overrides)
    if settings is None:
        settings = experiment_settings(experiment) or []
    counted = without_defaults(overrides, defaults)
    configuration = configuration_overrides(with_settings(settings, counted), vectors, world_size)
    return {"experiment": experiment, "experiment_overrides": list(settings), "fingerprint": digest(configuration),
            "fingerprint_overrides": configuration, "fingerprint_rule": FINGERPRINT_RULE,
            "fingerprint_defaults": [str(d) for d in defaults or []]}


def record_settings(record: dict) -> list[str]:
    """A record's settings as overrides: its experiment's (``experiment_overrides``; an older record: today's file of
    the ``experiment=`` its overrides name), then its own (:func:`coda_exp.fingerprint.record_overrides`: less those
    it recorded as its configuration's defaults, ``fingerprint_defaults``)."""
    overrides = record_overrides(record)
    settings = record.get("experiment_overrides")
    if not isinstance(settings, list):
        settings = experiment_settings(experiment_of(overrides)) or []
    return with_settings(settings, overrides)


def fixture_data(record: dict) -> bool:
    """Whether a run read the tiny fixtures (a smoke test): its ``fixture_data``; an older record without it: its scale
    label starts with ``fixture``, or its settings chose ``scale=fixture`` (``experiment=quickstart`` does)."""
    if isinstance(record.get("fixture_data"), bool):
        return record["fixture_data"]
    if is_fixture_scale(record.get("scale")):
        return True
    chosen = [o.split("=", 1)[1].strip() for o in record_settings(record) if "=" in o and override_key(o) == "scale"]
    return bool(chosen) and chosen[-1] == "fixture"


#: what runs of an earlier fingerprint rule (before 2026-11-27) computed otherwise under the same overrides: their
#: defaults changed with rule 2, so such a run is another configuration than today's grid, whatever it overrode
EARLIER_DEFAULTS = "defaults_before_rule_2"


def earlier_defaults(task: str, model: str, n_fn: str | None = None, gate_scale=None) -> list[str]:
    """The pseudo-override that keeps a run of an earlier rule out of today's cells where its defaults differed:
    IWSLT (a word vocabulary, not the joint BPE), Quasar-T / SearchQA (DecaProp's spans of at most 15 tokens; random
    vectors frozen), AttConv on SNLI / SciTail (no truncation), and a tanh / arctan / algebraic gate with
    ``gate_scale`` null (doubled); empty elsewhere (MLU, the ranking and NLI tables' DecompAtt, ...)."""
    changed = []
    if task == "iwslt15_envi":
        changed.append("word-vocabulary")
    if task in ("quasart", "searchqa"):
        changed.append("span-15")
    if task in ("snli", "scitail") and str(model).startswith("attconv"):
        changed.append("untruncated")
    if n_fn not in (None, "sigmoid") and gate_scale is None:
        changed.append("doubled-gate")
    return [f"{EARLIER_DEFAULTS}={'+'.join(changed)}"] if changed else []


def record_configuration(record: dict) -> tuple[str, list[str]]:
    """(fingerprint, configuration overrides) of a run record under today's rule: as recorded when the record says it
    was computed under it (``fingerprint_rule``), else derived from its overrides
    (:func:`coda_exp.fingerprint.record_overrides`), its experiment's settings (``experiment_overrides``; an older
    record: today's file), ``vectors`` and, where rule 2 changed the defaults of its task, :func:`earlier_defaults`."""
    recorded = record.get("fingerprint_overrides")
    if record.get("fingerprint_rule") == FINGERPRINT_RULE and record.get("fingerprint") and isinstance(recorded, list):
        return str(record["fingerprint"]), list(recorded)
    attention = record.get("attention") if isinstance(record.get("attention"), dict) else {}
    earlier = earlier_defaults(str(record.get("task")), str(record.get("model")), attention.get("n_fn"),
                               attention.get("gate_scale"))
    world = record.get("world_size")
    configuration = configuration_overrides(record_settings(record) + earlier, record.get("vectors"),
                                            world if isinstance(world, int) and not isinstance(world, bool) else None)
    return digest(configuration), configuration


def table_experiments(table_id: str, folder: Path | None = None) -> list[Path]:
    """``<id>.yaml`` and ``<id>_*.yaml`` of the experiments folder: what ``make reproduce-<id>`` runs."""
    folder = folder or experiment_dir()
    return sorted({*folder.glob(f"{table_id}.yaml"), *folder.glob(f"{table_id}_*.yaml")})


def table_grid(table_id: str, folder: Path | None = None) -> list[str]:
    """The configuration overrides of a table's grid: what its experiments set beyond the grid axes; ValueError where
    two of them set different configurations (a cell pools one)."""
    grids = {path.stem: configuration_overrides(experiment_settings(path.stem, path.parent) or [])
             for path in table_experiments(table_id, folder)}
    if len({tuple(g) for g in grids.values()}) > 1:
        found = "; ".join(f"{name}: {' '.join(g) or '(nothing)'}" for name, g in grids.items())
        raise ValueError(f"{table_id}: its experiments set different configurations ({found}); a cell pools one "
                         "configuration: make configs/experiment/" + table_id + "*.yaml agree")
    return next(iter(grids.values()), [])


def grid_fingerprint(table_id: str, folder: Path | None = None) -> str:
    """The fingerprint of a table's grid (:func:`table_grid`): ``GRID_FINGERPRINT`` where its experiments set
    nothing beyond the grid axes."""
    return digest(table_grid(table_id, folder))
