"""Run records: one JSON file per finished training run, under ``results/runs/<run-id>.json``.

A record says what was run (task, model, attention options, seed, scale, overrides, git commit), what
came out (``metrics``: a flat ``{"test/acc": 0.857, "val/bleu": 27.3, ...}`` dict) and what it cost (steps,
epochs, wall time, device). ``coda_exp.tables`` turns records plus the papers' numbers into the regenerated
tables.

Units of ``metrics``: accuracy, MAP, MRR, EM, F1, FEVER score ... are fractions in [0, 1], as torchmetrics
returns them; BLEU stays on its 0-100 scale. The table specs say which columns are shown as percentages.

Records are written atomically (temporary file in the same directory, flush + fsync, ``os.replace``) so a
crashed or killed sweep never leaves a half-written record, and every record is validated before it is
written and when it is read. Keys beyond :data:`REQUIRED_KEYS` (``status``, one of :data:`STATUSES` when present;
``warnings``, ``hparams``, ``paths`` ...) are allowed and preserved; runs also record ``fingerprint``,
``fingerprint_overrides`` (the configuration beyond the grid axes), ``fingerprint_rule`` (the rule's version:
:mod:`coda_exp.fingerprint`), ``fingerprint_defaults`` (the overrides left out as the configuration's defaults:
``optimizer.lr=0.0003``; absent from older records), ``val_curve`` (the monitored metric after each validation), ``val_curve_steps`` (the
global step of each of those validations, same length; null where unknown: a run resumed from a checkpoint written
before steps were kept; absent from older records), ``val_curve_metric`` (the monitored metric's name),
``resumed_from`` (the ``ckpt_path`` a resumed run started from, else null; ``wall_time_s`` is then the whole run's
time, its earlier processes' included, and ``wall_time_segment_s`` its last process's) and ``vectors`` (what its
pretrained word vectors were: ``coda_exp.data.common.embeddings.vectors_identity``; null without). A record of
``coda-exp eval`` has ``mode: "eval"``, ``checkpoint``, ``trained_run_id``, ``trained_overrides``, ``eval_split``
and ``eval_data`` (:mod:`coda_exp.evaluate`); a training record has no ``mode``. A run with ``callbacks=gate_stats``
also records ``gate_stats``: ``{layer: {"steps": [...], "mean": [...], "frac_lt_0.01": [...]}}``
(:class:`coda_exp.callbacks.GateStats`; ``{}`` for a model without CoDA attention).

A record carries :data:`CHECKSUM_KEY`, the SHA-256 of its own content (canonical JSON:
sorted keys, every key but the checksum; :func:`record_checksum`), and a record whose content no longer matches it
(a metric, its scale or any other value edited after the run wrote it) fails validation when read: tables skip it
with a warning naming the file. A record written before records carried it has none and is read as before.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import secrets
import subprocess
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from coda_exp.io import atomic_write_text

SCHEMA_VERSION = 1

#: Required keys and a description of the type each must have (used in error messages).
REQUIRED_KEYS: dict[str, str] = {
    "schema_version": f"int equal to {SCHEMA_VERSION}",
    "run_id": "filename-safe str",
    "task": "non-empty str",
    "model": "non-empty str",
    "attention": "dict with str keys (the attention options)",
    "seed": "int",
    "scale": "non-empty str",
    "metrics": "dict of str -> finite float",
    "steps": "int >= 0",
    "epochs": "int >= 0",
    "wall_time_s": "float >= 0",
    "device": "str",
    "git_commit": "str or null",
    "overrides": "list of str",
    "created": "ISO 8601 time str",
}

#: the key of a record's own checksum (:func:`record_checksum`), written with it and checked when it is read
CHECKSUM_KEY = "record_sha256"

_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+=-]*$")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9.-]+")


class RecordError(ValueError):
    """A run record that is missing a key, has a value of the wrong type, or cannot be read."""


class RecordWarning(UserWarning):
    """A run record on disk that could not be read or failed validation (and was skipped)."""


# --------------------------------------------------------------------------------------------------
# small helpers


def utc_now_iso() -> str:
    """Current UTC time as an ISO 8601 string with seconds, e.g. ``2025-01-31T12:00:00+00:00``."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _slug(text: str) -> str:
    """Filename-safe version of ``text`` ("iwslt15_envi" -> "iwslt15-envi"); "_" separates run-id fields."""
    slug = _UNSAFE_CHARS.sub("-", str(text)).strip("-.")
    return slug or "x"


def make_run_id(task: str, model: str, seed: int) -> str:
    """Unique, sortable, filename-safe run id: UTC timestamp, task, model, seed, random suffix.

    Example: ``20250131T120000.123456Z_snli_decompatt-coda_s3_9f2c1a``. Ids sort by creation time (to the
    microsecond); the 6 hex digits keep two runs started at the same instant apart.
    """
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    return f"{stamp}_{_slug(task)}_{_slug(model)}_s{int(seed)}_{secrets.token_hex(3)}"


def _git(cwd: str | os.PathLike | None, *args: str) -> str | None:
    """``git <args>``'s output in ``cwd``, stripped; None where git fails or is not there."""
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_commit(cwd: str | os.PathLike | None = None) -> str | None:
    """Short hash of HEAD of the git repository at ``cwd`` (default: the current directory).

    Adds ``-dirty`` when tracked files have uncommitted changes (untracked files, e.g. new run records, do not
    count). Outside a git repository, without git, or when HEAD has no commit yet: the environment variable
    ``CODA_EXP_COMMIT`` when set (the commit a copy without its ``.git`` was made from, e.g. a tree synced to a
    cluster), else None.
    """
    head = _git(cwd, "rev-parse", "--short", "HEAD")
    if not head:
        return os.environ.get("CODA_EXP_COMMIT", "").strip() or None
    status = _git(cwd, "status", "--porcelain", "--untracked-files=no")
    return f"{head}-dirty" if status else head


def code_commit() -> str | None:
    """:func:`git_commit` of the code that runs: the checkout ``coda_exp`` is imported from (a clone, ``pip install
    -e``), whatever folder the run writes to (``CODA_EXP_ROOT``, a project folder of one's own: the run's root was
    asked before, and a record written outside the checkout said null). An installed copy (site-packages), or a
    package folder inside another repository, is no checkout: ``CODA_EXP_COMMIT`` where set, else None."""
    checkout = Path(__file__).resolve().parent.parent
    top = _git(checkout, "rev-parse", "--show-toplevel")
    if top and Path(top).resolve() == checkout:
        return git_commit(checkout)
    return os.environ.get("CODA_EXP_COMMIT", "").strip() or None


def benchmark_environment() -> dict:
    """What a benchmark record under ``results/bench/`` names about where it ran: torch, python and triton (None
    without it) versions, the commit (:func:`code_commit`, "unknown" outside git), the machine,
    torch's thread count, the time (UTC) and, where CUDA is available, the GPU and CUDA version."""
    import platform

    import torch

    env = {"torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
           "commit": code_commit() or "unknown", "threads": torch.get_num_threads(),
           "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if torch.cuda.is_available():
        env.update(gpu=torch.cuda.get_device_name(0), cuda=torch.version.cuda)
    return env


# --------------------------------------------------------------------------------------------------
# validation


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: a record's ``status``: trained (or evaluated) to its end, or stopped at a non-finite loss (no test metrics)
STATUSES = ("finished", "diverged")


def _check_value(key: str, value: Any) -> str | None:
    """Return why ``value`` is not acceptable for required ``key``, or None if it is."""
    if key == "schema_version":
        ok = _is_int(value) and value == SCHEMA_VERSION
    elif key == "run_id":
        ok = isinstance(value, str) and bool(_SAFE_ID.match(value)) and len(value) <= 200
    elif key in ("task", "model", "scale"):
        ok = isinstance(value, str) and bool(value.strip())
    elif key == "device":
        ok = isinstance(value, str)
    elif key == "attention":
        ok = isinstance(value, dict) and all(isinstance(k, str) for k in value)
    elif key == "seed":
        ok = _is_int(value)
    elif key in ("steps", "epochs"):
        ok = _is_int(value) and value >= 0
    elif key == "wall_time_s":
        ok = _is_number(value) and math.isfinite(value) and value >= 0
    elif key == "git_commit":
        ok = value is None or isinstance(value, str)
    elif key == "overrides":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    elif key == "created":
        ok = isinstance(value, str)
        if ok:
            try:
                datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                ok = False
    elif key == "metrics":
        if not isinstance(value, dict):
            ok = False
        else:
            for name, number in value.items():
                if not isinstance(name, str) or not name:
                    return f"metric name {name!r} is not a non-empty str"
                if not (_is_number(number) and math.isfinite(number)):
                    return f"metric {name!r} has value {number!r}; expected a finite float"
            ok = True
    else:  # pragma: no cover - REQUIRED_KEYS and this function must agree
        raise KeyError(key)
    if ok:
        return None
    return f"expected {REQUIRED_KEYS[key]}, got {type(value).__name__} {value!r:.80}"


def record_checksum(record: dict) -> str:
    """SHA-256 (hex) of ``record``'s canonical JSON (sorted keys, compact; as it reads back from its file), every key
    but :data:`CHECKSUM_KEY`. ``TypeError`` / ``ValueError`` for a value JSON cannot hold."""
    body = json.loads(json.dumps({k: v for k, v in record.items() if k != CHECKSUM_KEY}, allow_nan=False))
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def validate_record(record: Any, source: str | os.PathLike = "<memory>", checksum: bool = True) -> dict:
    """Check that ``record`` has every key of :data:`REQUIRED_KEYS` with the right type, and (``checksum``) that its
    content matches its :data:`CHECKSUM_KEY` where it has one; return it.

    Raises :class:`RecordError` (a ``ValueError``) naming ``source`` (the file, or ``<memory>``), the key
    and what was expected. Extra keys are allowed and not checked.
    """
    if not isinstance(record, dict):
        raise RecordError(f"{source}: a run record must be a JSON object, got {type(record).__name__}")
    for key, expected in REQUIRED_KEYS.items():
        if key not in record:
            raise RecordError(f"{source}: missing required key {key!r} (expected {expected})")
        problem = _check_value(key, record[key])
        if problem is not None:
            raise RecordError(f"{source}: key {key!r}: {problem}")
    if record.get("status", "finished") not in STATUSES:  # absent: a record written before runs recorded it
        raise RecordError(f"{source}: key 'status': expected one of {', '.join(STATUSES)}, got "
                          f"{record['status']!r}")
    if checksum and CHECKSUM_KEY in record and record[CHECKSUM_KEY] != record_checksum(record):
        raise RecordError(f"{source}: its content does not match its {CHECKSUM_KEY}: the record was changed after "
                          "its run wrote it (a hand edit?); restore the record as written (e.g. git checkout "
                          "results/runs/), or run again")
    return record


def record_text(record: dict) -> str:
    """``record`` as its file holds it (indented JSON), with its :data:`CHECKSUM_KEY` set (in ``record`` too) after
    validating it; :class:`RecordError` for a value JSON cannot hold."""
    try:
        record[CHECKSUM_KEY] = record_checksum(record)
    except (TypeError, ValueError) as err:
        raise RecordError(f"<memory>: run record {record.get('run_id')!r} is not JSON-serialisable: {err}") from err
    validate_record(record)
    return json.dumps(record, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


# --------------------------------------------------------------------------------------------------
# reading and writing


def prediction_paths(record: dict, predictions_dir: str | os.PathLike | None) -> list[Path]:
    """Where a record's test predictions may lie, in order: its ``predictions`` path, then
    ``<predictions_dir>/<run_id>.jsonl.gz`` (``results/predictions/`` beside ``results/runs/``); the paired tests
    and the AttConv figures read them from the same places."""
    paths = [Path(record["predictions"])] if record.get("predictions") else []
    if predictions_dir is not None:
        paths.append(Path(predictions_dir) / f"{record['run_id']}.jsonl.gz")
    return paths


def write_record(record: dict, runs_dir: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Validate ``record`` and write it atomically to ``<runs_dir>/<run_id>.json`` with its checksum
    (:func:`record_text`); return the path.

    Refuses (``FileExistsError``) to replace an existing record unless ``overwrite=True``: run ids are unique,
    so a clash means a bug upstream.
    """
    validate_record({k: v for k, v in record.items() if k != CHECKSUM_KEY})  # its own keys first: a clear error
    text = record_text(record)
    path = Path(runs_dir) / f"{record['run_id']}.json"
    if path.exists() and not overwrite:
        raise FileExistsError(f"run record already exists: {path}")
    return atomic_write_text(path, text)


def read_record(path: str | os.PathLike, checksum: bool = True) -> dict:
    """Read and validate one record file; ``ValueError`` (naming the file) if unreadable or invalid (``checksum=False``:
    an edited one too, for what a run's bookkeeping reads: whether it finished, not its numbers)."""
    path = Path(path)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RecordError(f"{path}: cannot read run record: {err}") from err
    return validate_record(record, source=path, checksum=checksum)


def load_records(runs_dir: str | os.PathLike, strict: bool = False) -> list[dict]:
    """Load every ``*.json`` record in ``runs_dir`` (not recursive; hidden/temporary files are ignored).

    Returns the valid records sorted by creation time, then run id. A corrupt or invalid file is reported
    with a :class:`RecordWarning` naming the file and skipped, or, with ``strict=True``, raises
    :class:`RecordError` (a ``ValueError``). A missing directory gives an empty list.
    """
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        return []
    records = []
    for path in sorted(runs_dir.glob("*.json")):
        if path.name.startswith("."):
            continue
        try:
            records.append(read_record(path))
        except ValueError as err:
            if strict:
                raise
            warnings.warn(f"skipping run record: {err}", RecordWarning, stacklevel=2)
    records.sort(key=lambda r: (created_time(r), r["run_id"]))
    return records


def created_time(record: dict) -> datetime:
    """The record's ``created`` as an aware datetime (a time without offset is taken as UTC)."""
    when = datetime.fromisoformat(record["created"].replace("Z", "+00:00"))
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


__all__ = [
    "CHECKSUM_KEY",
    "REQUIRED_KEYS",
    "SCHEMA_VERSION",
    "RecordError",
    "RecordWarning",
    "atomic_write_text",
    "created_time",
    "git_commit",
    "load_records",
    "make_run_id",
    "read_record",
    "record_checksum",
    "record_text",
    "utc_now_iso",
    "validate_record",
    "write_record",
]
