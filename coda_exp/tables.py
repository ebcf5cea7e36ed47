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

Selection. A record fills cell (row, column) when ``record["task"] == column.task``, the cell's metric is in
``record["metrics"]``, and every ``key: value`` of the row's ``match`` merged with the column's ``match`` (the
column wins on a shared key) equals the record's value. Keys are dotted paths into the record
(``attention.n_fn``, ``hparams.context_mode``); a missing key never matches, and ``true`` never equals ``1``.
``match: null`` marks a baseline that only the paper reports; an empty ``match`` is refused (it would match
every run of the task).

Splits. A column names a full metric (``test/acc``). A row may set ``split: val``, which replaces the part of
every column's metric before the first "/" (``test/acc`` -> ``val/acc``): one table can hold dev rows and test
rows over the same columns (AttConv Table 9, FEVER).

Numbers. ``percent: true`` columns hold fractions in the records (torchmetrics' convention) and are shown
multiplied by 100; other columns (BLEU) are shown as recorded. A column is printed with ``decimals`` digits
(default: as many as the column's paper numbers use, at least 1). ``null`` in ``paper`` is a dash.

Cells. Ours is the mean ± sample standard deviation (ddof=1) over seeds, the number of runs and the scale,
e.g. ``85.71 ± 0.12 (n=3, cpu)``; one run gives just the value. When several runs share a scale and a seed the
latest one (by ``created``) counts. When a cell has records at several scales, scale "paper" is used if
present, else the scale with the most runs (ties: alphabetical); the others are listed in the CSV. A cell with
no record says ``no run``: ours is never filled from the paper.

Comparisons. Each ``compare`` pair adds, per column, the difference treatment − baseline of the two cells' means
with Welch's p across seeds and, where both runs of a seed kept their test predictions, McNemar's paired p
(:mod:`coda_exp.significance`); the renderers print them as extra rows ``Δ <treatment> − <baseline>``.
"""

from __future__ import annotations

import os
import re
import statistics
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from coda_exp.results import created_time, utc_now_iso

PAPERS = {"coda": "CoDA (Compositional De-Attention Networks)", "attconv": "AttConv (Attentive Convolution)"}
NO_RUN = "no run"
NOT_RUN = "not run"
DASH = "–"
_SPEC_KEYS = {"id", "title", "paper", "notes", "row_header", "columns", "rows", "compare"}
_COLUMN_KEYS = {"name", "task", "metric", "percent", "decimals", "match"}
_ROW_KEYS = {"name", "match", "paper", "split"}
_ID = re.compile(r"^[A-Za-z0-9_.-]+$")
_MISSING = object()


class TableSpecError(ValueError):
    """An invalid table spec; the message names the YAML file and the offending key."""


@dataclass(frozen=True)
class Column:
    name: str
    task: str
    metric: str
    percent: bool = False
    decimals: int | None = None
    match: dict[str, Any] = field(default_factory=dict)

    def metric_for(self, split: str | None) -> str:
        """The metric of this column for a row with ``split`` (``test/acc`` + ``val`` -> ``val/acc``)."""
        return self.metric if split is None else f"{split}/{self.metric.split('/', 1)[1]}"


@dataclass(frozen=True)
class Row:
    name: str
    match: dict[str, Any] | None  # None: paper-only baseline
    paper: list[float | None]
    split: str | None = None


@dataclass(frozen=True)
class TableSpec:
    id: str
    title: str
    paper: str
    columns: list[Column]
    rows: list[Row]
    notes: str = ""
    row_header: str = "model"
    path: Path | None = None
    compare: list[tuple[str, str]] = field(default_factory=list)  # (baseline row, treatment row)

    def decimals(self, j: int) -> int:
        """Digits after the point for column ``j``: its ``decimals``, else its paper numbers' (>= 1)."""
        if self.columns[j].decimals is not None:
            return self.columns[j].decimals
        return max([1] + [_decimals_of(row.paper[j]) for row in self.rows if row.paper[j] is not None])


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


# --------------------------------------------------------------------------------------------------
# specs


def _decimals_of(x: float) -> int:
    text = repr(float(x))
    if "e" in text or "." not in text:
        return 2
    return len(text.split(".", 1)[1].rstrip("0"))


def _need(mapping: dict, key: str, kind: type | tuple, where: str) -> Any:
    if key not in mapping:
        raise TableSpecError(f"{where}: missing key {key!r}")
    value = mapping[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise TableSpecError(f"{where}: key {key!r} must be {getattr(kind, '__name__', kind)}, got {value!r}")
    if isinstance(value, str) and not value.strip():
        raise TableSpecError(f"{where}: key {key!r} must not be empty")
    return value


def _match(mapping: dict, where: str, allow_none: bool) -> dict | None:
    value = mapping.get("match")
    if value is None and allow_none:
        return None
    if not isinstance(value, dict) or not value or not all(isinstance(k, str) and k for k in value):
        hint = " (use `match: null` for a paper-only row)" if allow_none else ""
        raise TableSpecError(
            f"{where}: key 'match' must be a non-empty mapping of dotted keys{hint}, got {value!r}"
        )
    return dict(value)


def _unknown(mapping: dict, allowed: set, where: str) -> None:
    extra = sorted(set(mapping) - allowed)
    if extra:
        raise TableSpecError(f"{where}: unknown key(s) {extra}; allowed: {sorted(allowed)}")


def _parse_column(col: Any, where: str) -> Column:
    if not isinstance(col, dict):
        raise TableSpecError(f"{where}: must be a mapping")
    _unknown(col, _COLUMN_KEYS, where)
    decimals = col.get("decimals")
    if decimals is not None and (not isinstance(decimals, int) or isinstance(decimals, bool) or decimals < 0):
        raise TableSpecError(f"{where}: key 'decimals' must be an int >= 0, got {decimals!r}")
    percent = col.get("percent", False)
    if not isinstance(percent, bool):
        raise TableSpecError(f"{where}: key 'percent' must be true or false, got {percent!r}")
    match = _match(col, where, False) if "match" in col else {}
    name, task, metric = (_need(col, key, str, where) for key in ("name", "task", "metric"))
    return Column(name, task, metric, percent=percent, decimals=decimals, match=match)


def _parse_row(row: Any, where: str, columns: list[Column]) -> Row:
    if not isinstance(row, dict):
        raise TableSpecError(f"{where}: must be a mapping")
    _unknown(row, _ROW_KEYS, where)
    if "match" not in row:
        raise TableSpecError(f"{where}: missing key 'match' (use `match: null` for a paper-only row)")
    numbers = _need(row, "paper", list, where)
    if len(numbers) != len(columns):
        raise TableSpecError(f"{where}: key 'paper' has {len(numbers)} values, expected {len(columns)}")
    for x in numbers:
        if x is not None and (not isinstance(x, (int, float)) or isinstance(x, bool)):
            raise TableSpecError(f"{where}: key 'paper' holds {x!r}; expected numbers or null")
    split = row.get("split")
    if split is not None:
        if not isinstance(split, str) or not split or "/" in split:
            raise TableSpecError(f"{where}: key 'split' must be a str without '/', got {split!r}")
        bad = [c.name for c in columns if "/" not in c.metric]
        if bad:
            raise TableSpecError(f"{where}: key 'split' needs 'split/name' metrics; not in columns {bad}")
    paper = [None if x is None else float(x) for x in numbers]
    return Row(_need(row, "name", str, where), _match(row, where, True), paper, split=split)


def load_table_spec(path: str | os.PathLike) -> TableSpec:
    """Read and validate one table spec YAML; ``ValueError`` naming the file and the offending key."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise TableSpecError(f"{path}: cannot read table spec: {err}") from err
    if not isinstance(raw, dict):
        raise TableSpecError(f"{path}: a table spec must be a mapping")
    _unknown(raw, _SPEC_KEYS, str(path))
    spec_id = _need(raw, "id", str, str(path))
    if not _ID.match(spec_id) or spec_id != path.stem:
        raise TableSpecError(f"{path}: key 'id' ({spec_id!r}) must be filename-safe and equal the file stem")
    paper = _need(raw, "paper", str, str(path))
    if paper not in PAPERS:
        raise TableSpecError(f"{path}: key 'paper' must be one of {sorted(PAPERS)}, got {paper!r}")
    raw_columns = _need(raw, "columns", list, str(path))
    if not raw_columns:
        raise TableSpecError(f"{path}: key 'columns' must not be empty")
    columns = [_parse_column(col, f"{path}: columns[{j}]") for j, col in enumerate(raw_columns)]
    raw_rows = _need(raw, "rows", list, str(path))
    rows = [_parse_row(row, f"{path}: rows[{i}]", columns) for i, row in enumerate(raw_rows)]
    for kind, names in (("column", [c.name for c in columns]), ("row", [r.name for r in rows])):
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise TableSpecError(f"{path}: duplicate {kind} name(s) {dupes}")
    notes = raw.get("notes") or ""
    row_header = raw.get("row_header", "model")
    if not isinstance(notes, str) or not isinstance(row_header, str):
        raise TableSpecError(f"{path}: keys 'notes' and 'row_header' must be strings")
    title = _need(raw, "title", str, str(path))
    compare = _parse_compare(raw.get("compare") or [], rows, f"{path}: compare")
    return TableSpec(spec_id, title, paper, columns, rows, notes.strip(), row_header, path, compare)


def _parse_compare(raw: Any, rows: list[Row], where: str) -> list[tuple[str, str]]:
    runnable = {r.name for r in rows if r.match is not None}
    if not isinstance(raw, list):
        raise TableSpecError(f"{where}: must be a list of [baseline row, treatment row] pairs")
    pairs = []
    for k, pair in enumerate(raw):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise TableSpecError(f"{where}[{k}]: expected [baseline row, treatment row], got {pair!r}")
        bad = [x for x in pair if x not in runnable]
        if bad or pair[0] == pair[1]:
            raise TableSpecError(f"{where}[{k}]: {bad or pair} must be two different rows with a `match`")
        pairs.append((pair[0], pair[1]))
    return pairs


def find_specs(spec_dir: str | os.PathLike) -> list[Path]:
    """The ``*.yaml`` table specs in ``spec_dir``, sorted by name."""
    return sorted(p for p in Path(spec_dir).glob("*.yaml") if not p.name.startswith("."))


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


def _build_cell(spec: TableSpec, row: Row, j: int, records: list[dict]) -> Cell:
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
    latest: dict[tuple[str, int], dict] = {}
    for rec in sorted(records, key=lambda r: (created_time(r), r["run_id"])):
        if record_matches(rec, col.task, metric, match):
            latest[(rec["scale"], rec["seed"])] = rec  # a later run of the same scale and seed replaces it
    if not latest:
        cell.status = NO_RUN
        return cell
    counts: dict[str, int] = {}
    for scale, _ in latest:
        counts[scale] = counts.get(scale, 0) + 1
    cell.scale = choose_scale(counts)
    cell.other_scales = {s: n for s, n in sorted(counts.items()) if s != cell.scale}
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
    cell.status = "ok"
    return cell


def build_table(spec: TableSpec, records: list[dict], generated: str | None = None,
                predictions_dir: str | os.PathLike | None = None) -> Table:
    """Fill every cell of ``spec`` from ``records`` (validated run records), and its ``compare`` pairs.

    Test predictions are read from each record's ``predictions`` path, else ``<predictions_dir>/<run_id>.jsonl.gz``.
    """
    from coda_exp.significance import compare_table

    cells = [[_build_cell(spec, row, j, records) for j in range(len(spec.columns))] for row in spec.rows]
    used = {rid for cell_row in cells for cell in cell_row for rid in cell.run_ids}
    return Table(
        spec=spec,
        cells=cells,
        records_used=len(used),
        records_total=len(records),
        generated=generated or utc_now_iso(),
        comparisons=compare_table(spec, cells, records, Path(predictions_dir) if predictions_dir else None),
    )
