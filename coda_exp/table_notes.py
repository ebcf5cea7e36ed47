"""What a table lists under it, never pooled ("Not pooled, ..."), split from :mod:`coda_exp.tables` (which builds the
cells and decides what each pools): a listed record's entry (:func:`listed`), how its configuration differs from the
table's grid (:func:`difference`), why a run of another scale is left out (:func:`scale_status`: a budget override is
called one) and the notes themselves, one per record, row and reason, naming
every column it is left out of (:func:`off_grid_notes`)."""

from __future__ import annotations

from typing import Any

from coda_exp.experiments import record_configuration


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
                key = (cell.row, run.get("status", "another configuration"), run["seed"], run["scale"],
                       difference(run), run["run_id"])
                columns.setdefault(key, []).append(cell.column)
    return [f"Not pooled, {status}: {row} / {', '.join(cols)}: seed {seed} ({scale}){diff} ({run_id})"
            for (row, status, seed, scale, diff, run_id), cols in columns.items()]
