"""A run folder's configuration tag: which overrides made this run another configuration, readable in ``ls``.

``configs/hydra/default.yaml`` names a single run's folder ``runs/<task>-<model>/<time>-s<seed>[-<tag>]`` and a sweep
job's ``<n>-<task>-<model>-s<seed>[-<tag>]`` through the ``${run_tag:...}`` resolver (:mod:`coda_exp.resolvers`),
which Hydra resolves with the job's own overrides (``hydra.overrides.task``) before the job runs.

Which overrides count is :func:`coda_exp.fingerprint.configuration_items`' rule (what ``coda-exp runs`` lists as a
run's configuration): the experiment's name, then every override but the seed, the task, model and scale choices,
the budget keys and where or how a run is stored or logged. A plain run (none of them) has no tag, so its folder
is named as before tags existed. The tag:

- the experiment's name, then each override as ``<key>_<value>`` in the order of its key, joined by ``+``, but for
  what the folder's ``<task>-<model>`` says already (``task.name``, a ``data.dataset`` of the task's name): ``<key>``
  is the key's last component (``optimizer.lr`` -> ``lr``, ``model/attention`` -> ``attention``), or as many of its
  last components as tell it from the run's other keys (``attention.center_e``, ``scoring.center_e``); a deletion
  ``~key`` is ``del_<key>``;
- only ``A-Z a-z 0-9 . _ - +`` and the ``@`` of the hash: every other character (``/``, ``,``, ``[``, quotes,
  spaces) becomes ``_``. All are safe in file names on Linux, macOS and Windows, in a shell without quotes, and in a
  Hydra override value (``ckpt_path=<folder>/checkpoints/last.ckpt``), which takes neither ``=`` nor ``,``;
- at most :data:`MAX_CHARS` characters: the rendering cut where it is longer;
- always ending with ``@`` and :data:`HASH_CHARS` hex digits of the SHA-256 of the configuration (its items
  normalised, ``1e-3`` as ``0.001``, and sorted), so two configurations never share a tag however the rendering
  shortened, replaced or cut them, and one configuration has the same hash whatever order its overrides were
  typed in: ``2026-11-27_21-30-00.123456-s1-attention_coda+lr_3e-4@5d41a7``.
"""

from __future__ import annotations

import hashlib
import json
import re

from coda_exp.experiments import experiment_of
from coda_exp.fingerprint import configuration_items, normalise, override_key

MAX_CHARS = 60  # the whole tag, its @hash included
HASH_CHARS = 6
#: a tag as it ends a folder's name (after ``-s<seed>-``); a folder ``<name>-2`` (run_folder.claim) may follow it
TAG_PATTERN = rf"[A-Za-z0-9._+-]*@[0-9a-f]{{{HASH_CHARS}}}"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _safe(text: str) -> str:
    return _UNSAFE.sub("_", text).strip("_")


def _suffixes(key: str) -> list[str]:
    """``model.attention.center_e`` -> ``center_e``, ``attention.center_e``, ``model.attention.center_e``."""
    cuts = [m.end() for m in re.finditer(r"[./]", key)]
    return [key[c:] for c in reversed(cuts)] + [key]


def _short(key: str, keys: list[str]) -> str:
    """The shortest tail of ``key`` (whole components) that no other of the run's ``keys`` ends with."""
    others = [k for k in keys if k != key]
    return next(s for s in _suffixes(key) if s == key or not any(k == s or k.endswith(("." + s, "/" + s))
                                                                 for k in others))


def _value(item: str) -> str:
    """An override's value without its quotes: ``x.y='a b'`` -> ``a b``."""
    return item.partition("=")[2].strip().strip("'\"")


def _in_folder_name(item: str, task_names: set[str]) -> bool:
    """Whether ``item`` says what the folder's ``<task>-<model>`` part says already (``task_names``: the ``task=``
    and ``task.name=`` values): ``task.name=mine``, and ``data.dataset=mine`` beside it (your own data named as
    docs/layout.md advises). Rendered, the tag would repeat ``dataset_mine+name_mine``; the hash still counts it."""
    key = override_key(item)
    return key == "task.name" or key == "data.dataset" and _value(item) in task_names


def config_tag(overrides: list[str], experiment: str | None = None) -> str:
    """The tag of a run with these overrides (its command line's) and ``experiment``; "" for a plain run."""
    items = configuration_items([str(o) for o in overrides], experiment)
    if not items:
        return ""
    digest = hashlib.sha256(json.dumps(sorted(normalise(i) for i in items)).encode("utf-8")).hexdigest()
    task_names = {_value(o) for o in overrides if override_key(o) in ("task", "task.name")}
    named = [i for i in items if override_key(i) != "experiment" and not _in_folder_name(i, task_names)]
    keys = [override_key(i) for i in named]
    parts = [_safe(i.split("=", 1)[1]) for i in items if override_key(i) == "experiment"]
    for item in sorted(named, key=lambda i: (override_key(i), i)):
        key = item.partition("=")[0]
        name = _safe(_short(override_key(item), keys))
        value = _safe(_value(item))
        parts.append(f"del_{name}" + (f"_{value}" if value else "") if key.startswith("~")
                     else f"{name}_{value}" if value else name)
    body = "+".join(p for p in parts if p)[: MAX_CHARS - 1 - HASH_CHARS].rstrip("+_.-")
    return f"{body}@{digest[:HASH_CHARS]}"


def folder_suffix(overrides) -> str:
    """``${run_tag:${hydra:overrides.task}}``: ``-<tag>`` of a job's overrides (``experiment=`` among them), or ""
    for a plain run, whose folder keeps the name it had before tags."""
    overrides = [str(o) for o in (overrides or [])]
    tag = config_tag(overrides, experiment_of(overrides))
    return f"-{tag}" if tag else ""
