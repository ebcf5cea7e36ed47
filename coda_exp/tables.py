"""Run records + the papers' numbers -> the regenerated tables (Markdown, LaTeX, CSV).

A table spec (``configs/tables/<id>.yaml``) holds one paper table: its numbers, copied from ``SPEC.md``,
and how to select the run records (``coda_exp.results``) for each cell::

    id: table_2                     # must equal the file name stem
    title: "Table 2 — ..."
    paper: coda                     # coda | attconv
    notes: "..."                    # optional, printed under the title
    row_header: model               # optional, header of the first column (default "model")
    columns:
      - {name: "TrecQA MAP", task: trecqa, metric: test/map, percent: true}
      - {name: "NMT BLEU", task: iwslt15_envi, metric: val/bleu, match: {model: coda_transformer}}
    rows:
      - {name: "D-ATT + CoDA", match: {model: decompatt_coda, attention.center_e: false}, paper: [80.0, null]}
      - {name: "GA", match: null, paper: [26.4, 26.4]}        # paper-only baseline: ours says "not run"
      - {name: "dev: AttConv", split: val, match: {model: attconv_advanced}, paper: [62.26, 39.44]}
    compare:                        # optional: [baseline row, treatment row] pairs tested for significance
      - ["D-ATT", "D-ATT + CoDA"]
    parameters: parameters.attconv  # optional: a parameter count per row, ours (this record key) beside the
                                    # paper's (a row's ``paper_parameters: "360K"``): AttConv Table 7

Selection. A record fills cell (row, column) when ``record["task"] == column.task``, the cell's metric is in
``record["metrics"]``, and every ``key: value`` of the row's ``match`` merged with the column's ``match`` (the
column wins on a shared key) equals the record's value. Keys are dotted paths into the record
(``attention.n_fn``, ``hparams.contexts``); a missing key never matches, and ``true`` never equals ``1``.
``match: null`` marks a baseline that only the paper reports; an empty ``match`` is refused (it would match
every run of the task).

Splits. A column names a full metric (``test/acc``). A row may set ``split: val``, which replaces the part of
every column's metric before the first "/" (``test/acc`` -> ``val/acc``): one table can hold dev rows and test
rows over the same columns (AttConv Table 9, FEVER).

Numbers. ``percent: true`` columns hold fractions in the records (torchmetrics' convention) and are shown
multiplied by 100; other columns (BLEU) are shown as recorded. A column is printed with ``decimals`` digits
(default: as many as the column's paper numbers use, at least 1). ``null`` in ``paper`` is a dash.

Cells. Ours is the mean ± sample standard deviation (ddof=1) over seeds, the number of runs and the scale, e.g.
``85.71 ± 0.12 (n=3, cpu)``; one run gives just the value. When several runs share a scale and a seed the latest
one (by ``created``) counts, and a warning and a line under the table name the superseded one. A cell pools only
runs of the table's grid configuration (the record's fingerprint is the grid's,
``coda_exp.experiments.grid_fingerprint``: no setting, its experiment's or its command line's, beyond what the
table's experiments set and the grid axes task, model name, the attention options an experiment sweeps, seed,
scale, budget and output keys); a matching run of another configuration (``optimizer.lr=0.001``,
``model.scoring.beta=0``) is never pooled and never dropped silently: it is listed apart, under the table ("Not
pooled"). Records without a fingerprint (older ones), or of an earlier fingerprint rule, get the one their
``overrides`` give under today's rule, with a warning. When a cell has records at several scales, scale "paper" is
used if present, else the scale with the most runs (ties: alphabetical); the others' runs are listed under the
table ("Not pooled, another scale ..."; "another budget ..." where only budget overrides differ: ``fixture
(task.epochs=2)`` beside ``fixture``), their counts in the CSV; a record is one note per row and reason, naming the
columns it is left out of (:mod:`coda_exp.table_notes`). A cell with no record says ``no run``: ours is
never filled from the paper.

Evaluations. A record of ``coda-exp eval`` (``mode: "eval"``: a trained checkpoint evaluated again) enters a cell
as a training run's does (its task, model, seed, scale and fingerprint are the trained run's), but a cell counts one
sample per trained model: an evaluation is pooled only as a stand-in for its trained run (``trained_run_id``) when
that run's own record is absent, it read the trained run's data (``eval_data.same_data``) and that run is not known
to be unfinished (``trained_run_state``: a run folder without a finished record); otherwise it is
listed apart, never pooled: a re-evaluation of a run whose record counts, an evaluation on other data (another
``data.dir``), of a partly trained model or of a checkpoint whose run is unknown (:func:`evaluation_apart`).

Checks. A record that a cell would pool but that contradicts itself (a real-data scale on the tiny fixtures) or its
saved test predictions (a metric they give again, e.g. accuracy, that differs) is listed apart with the reason and a
warning, never pooled (:mod:`coda_exp.record_checks`); one edited after it was written fails its checksum when read.

Comparisons. Each ``compare`` pair adds, per column, the difference treatment − baseline of the two cells' means
with Welch's p across seeds and, where both runs of a seed kept their test predictions, McNemar's paired p
(:mod:`coda_exp.significance`); the renderers print them as extra rows ``Δ <treatment> − <baseline>``.

Parameters. With ``parameters`` the table gains two columns after the row name: the paper's count (the row's
``paper_parameters``, as printed) and ours, the value of that record key (``coda_exp.run_record.parameter_counts``)
in the runs the row's cells pooled, with thousands separators; several distinct values are all shown ("a / b").
"""

from __future__ import annotations

import os
import statistics
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coda_exp.experiments import fixture_data, record_configuration, table_grid
from coda_exp.fingerprint import FINGERPRINT_RULE, digest
from coda_exp.record_checks import RecordChecker
from coda_exp.results import created_time, utc_now_iso
from coda_exp.table_notes import listed, off_grid_notes, scale_status, unmatched  # noqa: F401 (off_grid_notes: API)
from coda_exp.table_spec import (  # noqa: F401 - re-exported: tables is the public face of the specs
    PAPERS,
    Column,
    Row,
    TableSpec,
    TableSpecError,
    find_specs,
    load_table_spec,
)

NO_RUN = "no run"
NOT_RUN = "not run"
NOT_RECORDED = "not recorded"  # a pooled run whose record lacks the spec's parameter key
DASH = "–"
_MISSING = object()


class SupersededRunWarning(UserWarning):
    """Two runs of one cell with the same scale and seed: the earlier is named and left out."""


class UnknownFingerprintWarning(UserWarning):
    """Records written before fingerprints existed, or under an earlier rule that reads their configuration otherwise
    today: their fingerprint is derived from their ``overrides`` (``coda_exp.experiments.record_configuration``)."""


def evaluation_apart(record: dict, trained_runs: set[str]) -> str | None:
    """Why an evaluation record (``mode: "eval"``) is not pooled, or None (a training record, or an evaluation that
    stands in for its absent trained run; module docstring). ``trained_runs``: the run ids of the training records."""
    if record.get("mode") != "eval":
        return None
    source = record.get("trained_run_id")
    if not source:
        return "an evaluation of a checkpoint of an unknown run"
    if source in trained_runs:
        return f"a re-evaluation of {source} (its training record counts)"
    state = record.get("trained_run_state")
    if state not in (None, "finished"):
        how = {"running": "was still running", "not finished": "had not finished"}.get(state, f"ended {state}")
        return f"an evaluation of {source} at step {record.get('steps')}, whose training {how}"
    data = record.get("eval_data") or {}
    if not data.get("same_data", False):
        return f"an evaluation of {source} on other data (data.dir={data.get('dir')})"
    return None


def record_fingerprint(record: dict) -> str:
    """The record's fingerprint under today's rule: its ``fingerprint``, or (an older record) the one its recorded
    ``overrides`` give (:func:`coda_exp.experiments.record_configuration`)."""
    return record_configuration(record)[0]


@dataclass
class Cell:
    row: str
    column: str
    task: str
    metric: str
    paper: float | None
    decimals: int
    status: str  # "ok", NO_RUN or NOT_RUN
    values: list[float] = field(default_factory=list)  # display units, one per seed, at the chosen scale
    scale: str | None = None
    other_scales: dict[str, int] = field(default_factory=dict)
    run_ids: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    off_grid: list[dict] = field(default_factory=list)  # matching runs not pooled: another configuration, scale...
    fixture: bool = False  # a pooled run read the tiny fixtures (coda_exp.experiments.fixture_data): a smoke test

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def std(self) -> float | None:
        return statistics.stdev(self.values) if len(self.values) > 1 else None

    def paper_text(self) -> str:
        return DASH if self.paper is None else f"{self.paper:.{self.decimals}f}"

    def ours_text(self) -> str:
        if self.status != "ok":
            return self.status
        d = self.decimals
        spread = "" if self.std is None else f" ± {self.std:.{d}f}"
        return f"{self.mean:.{d}f}{spread} (n={self.n}, {self.scale})"


@dataclass
class Table:
    spec: TableSpec
    cells: list[list[Cell]]  # [row][column]
    records_used: int
    records_total: int
    generated: str
    comparisons: list = field(default_factory=list)  # coda_exp.significance.Comparison, one per pair x column
    parameters: list[tuple[str, str]] = field(default_factory=list)  # (paper, ours) per row, with spec.parameters
    parameter_counts: list[list[int]] = field(default_factory=list)  # per row: the count of each pooled run having one
    grid: list[str] = field(default_factory=list)  # what the table's experiments set (coda_exp.experiments.table_grid)


# --------------------------------------------------------------------------------------------------
# building


def lookup(record: dict, dotted: str) -> Any:
    """``record["a"]["b"]`` for ``"a.b"``; a private sentinel when any part is missing."""
    value: Any = record
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _same(a: Any, b: Any) -> bool:
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def record_matches(record: dict, task: str, metric: str, match: dict[str, Any]) -> bool:
    """Whether ``record`` is a run of ``task`` reporting ``metric`` that agrees with every ``match`` item."""
    if record.get("task") != task or metric not in record.get("metrics", {}):
        return False
    return all(_same(lookup(record, key), want) for key, want in match.items())


def choose_scale(counts: dict[str, int]) -> str:
    """Scale "paper" if present, else the one with the most runs, ties broken alphabetically."""
    if "paper" in counts:
        return "paper"
    return min(counts, key=lambda s: (-counts[s], s))


def _build_cell(spec: TableSpec, row: Row, j: int, records: list[dict], trained_runs: set[str],
                fingerprints: dict[str, str], grid: list[str], problem=lambda rec: None, warned=None) -> Cell:
    col = spec.columns[j]
    metric = col.metric_for(row.split)
    cell = Cell(
        row=row.name,
        column=col.name,
        task=col.task,
        metric=metric,
        paper=row.paper[j],
        decimals=spec.decimals(j),
        status=NOT_RUN,
    )
    if row.match is None:
        return cell
    match = {**row.match, **col.match}
    expected = digest(grid)
    latest: dict[tuple[str, int], dict] = {}
    superseded: list[dict] = []
    for rec in sorted(records, key=lambda r: (created_time(r), r["run_id"])):
        if rec.get("status", "finished") == "diverged":  # no test metrics: listed under the table, never pooled
            if rec.get("task") == col.task and all(_same(lookup(rec, k), v) for k, v in match.items()):
                cell.off_grid.append(listed(rec, status=f"diverged at step {rec.get('diverged_at_step')}"))
            continue
        if not record_matches(rec, col.task, metric, match):
            continue
        apart = evaluation_apart(rec, trained_runs) or problem(rec)
        if apart is not None:  # one sample per trained model; a record contradicting itself: listed apart, not pooled
            cell.off_grid.append(listed(rec, status=apart))
            continue
        if fingerprints[rec["run_id"]] != expected:  # another configuration: listed apart, never pooled
            cell.off_grid.append(listed(rec, grid))
            continue
        key = (rec["scale"], rec["seed"])
        if key in latest:  # a later run of the same scale and seed replaces it
            old = latest[key]["run_id"]
            if warned is None or old not in warned:  # once a table, not a cell
                warnings.warn(f"{spec.id}: {row.name}: run {old} is superseded by the later {rec['run_id']} (scale "
                              f"{key[0]!r}, seed {key[1]}); only the later counts (listed under the table)",
                              SupersededRunWarning, stacklevel=3)
            if warned is not None:
                warned.add(old)
            superseded.append(listed(latest[key], grid, status=f"superseded by the later {rec['run_id']}"))
        latest[key] = rec
    cell.off_grid += superseded  # named under the table, as the runs of other scales below
    if not latest:
        cell.status = NO_RUN
        return cell
    counts: dict[str, int] = {}
    for scale, _ in latest:
        counts[scale] = counts.get(scale, 0) + 1
    cell.scale = choose_scale(counts)
    cell.other_scales = {s: n for s, n in sorted(counts.items()) if s != cell.scale}
    cell.off_grid += [listed(latest[key], grid, status=scale_status(key[0], cell.scale))
                      for key in sorted(latest, key=lambda k: (k[0], k[1])) if key[0] != cell.scale]
    chosen = [latest[key] for key in sorted(k for k in latest if k[0] == cell.scale)]
    raw = [float(rec["metrics"][metric]) for rec in chosen]
    if col.percent and any(abs(x) > 1.0 + 1e-9 for x in raw):
        warnings.warn(
            f"{spec.id}: {row.name} / {col.name}: {metric} > 1 in a percent column; records should "
            "hold fractions (it is multiplied by 100)",
            stacklevel=3,
        )
    cell.values = [100.0 * x if col.percent else x for x in raw]
    cell.run_ids = [rec["run_id"] for rec in chosen]
    cell.seeds = [rec["seed"] for rec in chosen]
    cell.fixture = any(fixture_data(rec) for rec in chosen)
    cell.status = "ok"
    return cell


def build_table(spec: TableSpec, records: list[dict], generated: str | None = None,
                predictions_dir: str | os.PathLike | None = None) -> Table:
    """Fill every cell of ``spec`` from ``records`` (validated run records), and its ``compare`` pairs.

    Test predictions are read from each record's ``predictions`` path, else ``<predictions_dir>/<run_id>.jsonl.gz``.
    """
    from coda_exp.significance import compare_table

    try:
        grid = table_grid(spec.id)
    except ValueError as err:
        raise TableSpecError(str(err)) from None
    _warn_derived(spec.id, records)
    problem = RecordChecker(spec.id, predictions_dir)  # a record contradicting itself or its predictions
    fingerprints = {r["run_id"]: record_fingerprint(r) for r in records}
    trained_runs = {r["run_id"] for r in records if r.get("mode") != "eval"}
    warned: set[str] = set()
    cells = [[_build_cell(spec, row, j, records, trained_runs, fingerprints, grid, problem, warned)
              for j in range(len(spec.columns))]
             for row in spec.rows]
    for (i, j), apart in unmatched(spec, records, fingerprints, digest(grid), grid, record_matches).items():
        cells[i][j].off_grid += apart  # a row's model in another configuration, which no row takes
    used = {rid for cell_row in cells for cell in cell_row for rid in cell.run_ids}
    by_id = {r["run_id"]: r for r in records}
    pooled_rows = [list({i: by_id[i] for c in cell_row for i in c.run_ids}.values()) for cell_row in cells]  # once each
    return Table(
        spec=spec,
        cells=cells,
        records_used=len(used),
        records_total=len(records),
        generated=generated or utc_now_iso(),
        grid=grid,
        comparisons=compare_table(spec, cells, records, Path(predictions_dir) if predictions_dir else None),
        parameters=[] if spec.parameters is None else [
            (row.paper_parameters or DASH, _parameters_text(row, pooled, spec.parameters))
            for row, pooled in zip(spec.rows, pooled_rows)],
        parameter_counts=[] if spec.parameters is None else [
            [v for v in (lookup(rec, spec.parameters) for rec in pooled) if isinstance(v, int)
             and not isinstance(v, bool)] for pooled in pooled_rows],
    )


def _warn_derived(table_id: str, records: list[dict]) -> None:
    """Warn of the records whose fingerprint is derived from their overrides: none recorded, or one of an earlier
    rule that today's reads otherwise (``coda_exp.fingerprint``: rule 1 left every attention option and the
    experiment's settings out)."""
    unknown = [r["run_id"] for r in records if not r.get("fingerprint")]
    if unknown:
        warnings.warn(f"{table_id}: {len(unknown)} run record(s) carry no configuration fingerprint (written before "
                      f"it was recorded; e.g. {unknown[0]}): derived from their recorded overrides",
                      UnknownFingerprintWarning, stacklevel=3)
    changed = [(r["run_id"], configuration) for r in records if r.get("fingerprint")
               and r.get("fingerprint_rule") != FINGERPRINT_RULE
               and (configuration := record_configuration(r))[0] != r["fingerprint"]]
    if changed:
        run_id, (_, overrides) = changed[0]
        warnings.warn(f"{table_id}: {len(changed)} run record(s) written under an earlier fingerprint rule have "
                      f"another fingerprint under today's, derived from their recorded overrides and today's file of "
                      f"their experiment (e.g. {run_id}: {' '.join(overrides) or 'no configuration override'})",
                      UnknownFingerprintWarning, stacklevel=3)


def _parameters_text(row: Row, pooled: list[dict], key: str) -> str:
    """Ours in the parameter column: the distinct values of ``key`` in the pooled runs ("360,300")."""
    if row.match is None:
        return NOT_RUN
    if not pooled:
        return NO_RUN
    def text(v: Any) -> str:
        if v is _MISSING:
            return NOT_RECORDED
        return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)

    return " / ".join(sorted({text(lookup(rec, key)) for rec in pooled}))


def smoke_test(table: Table) -> bool:
    """Whether a cell pools runs on the tiny fixtures (``tests/fixtures/``: scale ``fixture``, ``make quickstart``'s
    ``quickstart``...), told by the data they read, not by the scale's label."""
    return any(cell.fixture for row in table.cells for cell in row)


def smoke_test_note(table: Table, latex: bool = False) -> str:
    """The banner of a table that :func:`smoke_test` finds, naming the scales of its fixture cells (LaTeX, whose cells
    carry no scale where they share one: the table's numbers at those scales, without Markdown's backticks)."""
    scales = sorted({c.scale for row in table.cells for c in row if c.fixture})
    what = ("this table's numbers at scale " + ", ".join(scales) + " come from" if latex else
            "the cells at scale " + ", ".join(f"`{s}`" for s in scales) + " pool")
    return (f"Smoke test: {what} runs on the tiny fixtures (tests/fixtures/, a few dozen examples written by us) that "
            f"check the pipeline end to end; {'they say' if latex else 'their numbers say'} nothing about the models.")
