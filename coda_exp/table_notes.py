"""What a table lists under it, never pooled ("Not pooled, ..."), split from :mod:`coda_exp.tables` (which builds the
cells and decides what each pools): a listed record's entry (:func:`listed`), how its configuration differs from the
table's grid (:func:`difference`), why a run of another scale is left out (:func:`scale_status`: a budget override is
called one), the records of a row's model that no row takes because their configuration differs (:func:`unmatched`:
``model/scoring=softmax`` on the CoDA Transformer), and the notes themselves, one per record, row and reason, naming
every column it is left out of (:func:`off_grid_notes`), and the runs they name (:func:`listed_apart`)."""

from __future__ import annotations

from typing import Any

from coda_exp.experiments import record_configuration

#: the reason of a listed record without a ``status`` of its own: its fingerprint is not the table's grid's
ANOTHER_CONFIGURATION = "another configuration"


def listed(rec: dict, grid: list[str] | tuple = (), **extra) -> dict:
    """A record listed under the table (not pooled): its id, seed, scale, and how its configuration differs from the
    table's grid: ``overrides`` beyond it, ``missing`` (the grid's settings it lacks)."""
    overrides = record_configuration(rec)[1]
    return {"run_id": rec["run_id"], "seed": rec["seed"], "scale": rec["scale"],
            "overrides": [o for o in overrides if o not in grid], "missing": [o for o in grid if o not in overrides],
            **extra}


def scale_status(scale: str, cell_scale: str) -> str:
    """Why a run of ``scale`` is not pooled in a cell of ``cell_scale``: the same scale with other budget overrides
    (``fixture (task.epochs=2)`` beside ``fixture``) is another budget, not another scale."""
    if scale.split(" (", 1)[0] == cell_scale.split(" (", 1)[0]:
        return f"another budget than the cell's ({cell_scale})"
    return f"another scale than the cell's ({cell_scale})"


def unmatched(spec: Any, records: list[dict], fingerprints: dict[str, str], expected: str, grid: list[str],
              matches) -> dict[tuple[int, int], list[dict]]:
    """``{(row, column): [listed records]}``: the records of a column's task and metric (a diverged one, without
    test metrics: of its task, listed as diverged) that no row of the table takes in that column
    (``matches(record, task, metric, match)`` false for every row), of a row's model
    (its ``match``'s ``model``: the first such row), and of another configuration than the grid's; without this,
    ``model=coda_transformer model/scoring=softmax`` was left out of Table 6 without a word. A run of the grid's
    configuration that no row takes (Table 8's centring on Table 6) belongs to another table: not listed."""
    out: dict[tuple[int, int], list[dict]] = {}
    for j, col in enumerate(spec.columns):
        for rec in records:
            if rec.get("task") != col.task or fingerprints[rec["run_id"]] == expected:
                continue
            diverged = rec.get("status", "finished") == "diverged"
            rows = [(i, row, col.metric_for(row.split)) for i, row in enumerate(spec.rows) if row.match is not None]
            if any(matches(_as_matched(rec, metric, diverged), col.task, metric, {**row.match, **col.match})
                   for _, row, metric in rows):
                continue  # a row takes it (a diverged one: the row's cell lists it)
            own = next((i for i, row, metric in rows if row.match.get("model") == rec.get("model")
                        and (diverged or metric in (rec.get("metrics") or {}))), None)
            if own is not None:
                extra = {"status": f"diverged at step {rec.get('diverged_at_step')}"} if diverged else {}
                out.setdefault((own, j), []).append(listed(rec, grid, **extra))
    return out


def _as_matched(rec: dict, metric: str, diverged: bool) -> dict:
    """``rec`` as the rows match it: a diverged run has no test metrics, so ``metric`` is taken as present."""
    if diverged:
        return {**rec, "metrics": {metric: None}}
    return rec if rec.get("metrics") is not None else {**rec, "metrics": {}}  # copied only where it has none


def difference(run: dict) -> str:
    """`` with X`` / `` without the grid's Y``: how a listed run's configuration differs from the table's grid."""
    text = f" with {' '.join(run['overrides'])}" if run["overrides"] else ""
    return text + (f" without the grid's {' '.join(run['missing'])}" if run.get("missing") else "")


def off_grid_notes(table: Any) -> list[str]:
    """One line per record left out of a row (never pooled), for each reason: the row, every column it is left out
    of (WikiQA MAP and MRR on one line), its seed, scale, how its configuration differs, its run id."""
    columns: dict[tuple, list[str]] = {}
    for cell_row in table.cells:
        for cell in cell_row:
            for run in cell.off_grid:
                key = (cell.row, run.get("status", ANOTHER_CONFIGURATION), run["seed"], run["scale"],
                       difference(run), run["run_id"])
                columns.setdefault(key, []).append(cell.column)
    return [f"Not pooled, {status}: {row} / {', '.join(cols)}: seed {seed} ({scale}){diff} ({run_id})"
            for (row, status, seed, scale, diff, run_id), cols in columns.items()]


def listed_apart(table: Any) -> dict[str, str]:
    """``{run id: reason}`` of every record listed under the table (the first reason of a run listed for several):
    what its notes name, whether or not any cell pooled a run."""
    runs: dict[str, str] = {}
    for cell_row in table.cells:
        for cell in cell_row:
            for run in cell.off_grid:
                runs.setdefault(run["run_id"], run.get("status", ANOTHER_CONFIGURATION))
    return runs
