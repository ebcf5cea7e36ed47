"""Whether a run record says the same as itself and its test predictions, before a table pools it.

A record that fails validation (:mod:`coda_exp.results`: a missing key, a wrong type, content that no longer matches
its ``record_sha256``) is skipped when it is read. A valid one that a table would pool is checked for two more
contradictions (:func:`record_problem`); one that has one is listed under the table with the reason, never pooled:

- its ``scale`` is a real-data scale's (:data:`REAL_DATA_SCALES`: ``paper``, ``cpu``, with or without a budget) but
  its ``fixture_data`` says it read the tiny fixtures of ``tests/fixtures/``: a smoke test under a paper scale's
  name (a record without ``fixture_data``, written before it was recorded, is not checked);
- (a record without ``record_sha256``, written before it was, whose hand edits nothing else would show) a metric
  that its saved test predictions give again (:func:`coda_exp.significance.outcomes`: accuracy, sequence
  exact match, execution accuracy, span EM, R_N@1) differs from the recorded one by more than :data:`TOLERANCE`
  (float32 rounding is ~1e-7). The predictions are the record's ``predictions`` file, else
  ``<predictions folder>/<run id>.jsonl.gz`` (``results/predictions/`` beside ``results/runs/``); a record without
  any, or whose file cannot be read, is not checked.
"""

from __future__ import annotations

import functools
import os
import warnings
from pathlib import Path


class InconsistentRecordWarning(UserWarning):
    """A record a table would pool contradicts itself or its predictions (:func:`record_problem`); listed apart."""


#: scale names whose runs read the real data: a record of one of them on the fixtures contradicts itself
REAL_DATA_SCALES = ("paper", "cpu")
#: how far a recorded metric may lie from the one its predictions give (float32 means agree to ~1e-7)
TOLERANCE = 1e-5


def predictions_file(record: dict, predictions_dir: str | os.PathLike | None) -> Path | None:
    """A record's test predictions: its ``predictions`` path, else ``<predictions_dir>/<run_id>.jsonl.gz``, the first
    that is a file; None without either."""
    from coda_exp.results import prediction_paths

    return next((path for path in prediction_paths(record, predictions_dir) if path.is_file()), None)


@functools.lru_cache(maxsize=256)
def _recomputed(path: str, _stamp: tuple[int, int], metrics: tuple[str, ...]) -> dict[str, tuple[float, int]]:
    """{metric: (its value from the predictions file, units)} for each of ``metrics`` they give; {} when unreadable
    (the paired tests name such a file)."""
    from coda_exp.significance import (  # scipy: only when a table has predictions to read
        outcomes,
        read_predictions,
    )

    try:
        rows = read_predictions(path)
    except (OSError, EOFError, ValueError):
        return {}
    out = {}
    for metric in metrics:
        try:
            units = outcomes(metric, rows)
        except (KeyError, TypeError, ValueError):  # rows of another kind than the metric's
            continue
        if units:
            out[metric] = (sum(units.values()) / len(units), len(units))
    return out


def scale_problem(record: dict) -> str | None:
    """Why a record's scale contradicts its ``fixture_data``, or None."""
    scale = str(record.get("scale") or "")
    if record.get("fixture_data") is True and scale.split(" ", 1)[0] in REAL_DATA_SCALES:
        return f"its scale says {scale!r} but it read the tiny fixtures (fixture_data: true)"
    return None


def metric_problem(record: dict, predictions_dir: str | os.PathLike | None) -> str | None:
    """Why a record's metrics contradict its test predictions (the first metric that does), or None."""
    path = predictions_file(record, predictions_dir)
    if path is None:
        return None
    stat = path.stat()
    metrics = tuple(sorted(record.get("metrics") or {}))
    for metric, (value, units) in _recomputed(str(path), (stat.st_mtime_ns, stat.st_size), metrics).items():
        recorded = float(record["metrics"][metric])
        if abs(recorded - value) > TOLERANCE:
            return (f"its {metric} {recorded:.4f} is not what its test predictions give ({value:.4f} over {units} "
                    f"in {path})")
    return None


def record_problem(record: dict, predictions_dir: str | os.PathLike | None = None) -> str | None:
    """Why a valid record cannot be pooled as it stands (module docstring), or None. The metrics of a record whose
    ``record_sha256`` held when it was read are not recomputed: the run wrote them from these predictions, and
    reading a paper-scale predictions file (545K MLU test pairs: ~5 s) for every record at every ``make tables``
    would check nothing more; records written before the checksum are."""
    from coda_exp.results import CHECKSUM_KEY

    if scale_problem(record):
        return scale_problem(record)
    return None if record.get(CHECKSUM_KEY) else metric_problem(record, predictions_dir)


class RecordChecker:
    """:func:`record_problem` of each record once (a table asks per cell), warning of each problem found, naming the
    table ``table_id``; call it with a record: the problem or None."""

    def __init__(self, table_id: str, predictions_dir: str | os.PathLike | None = None):
        self.table_id, self.predictions_dir, self.found = table_id, predictions_dir, {}

    def __call__(self, record: dict) -> str | None:
        if record["run_id"] not in self.found:
            self.found[record["run_id"]] = problem = record_problem(record, self.predictions_dir)
            if problem:
                warnings.warn(f"{self.table_id}: run {record['run_id']} is not pooled: {problem}",
                              InconsistentRecordWarning, stacklevel=2)
        return self.found[record["run_id"]]
