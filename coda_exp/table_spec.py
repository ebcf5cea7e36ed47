"""Table specs (``configs/tables/<id>.yaml``): parsing and validation; the format is described in
:mod:`coda_exp.tables`."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PAPERS = {"coda": "CoDA (Compositional De-Attention Networks)", "attconv": "AttConv (Attentive Convolution)"}
_SPEC_KEYS = {"id", "title", "paper", "notes", "row_header", "columns", "rows", "compare", "parameters"}
_COLUMN_KEYS = {"name", "task", "metric", "percent", "decimals", "match"}
_ROW_KEYS = {"name", "match", "paper", "split", "paper_parameters"}
_ID = re.compile(r"^[A-Za-z0-9_.-]+$")


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
    paper_parameters: str | None = None  # the paper's parameter count as printed ("360K"); None: a dash


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
    parameters: str | None = None  # dotted record key of the parameter count printed beside the paper's

    def decimals(self, j: int) -> int:
        """Digits after the point for column ``j``: its ``decimals``, else its paper numbers' (>= 1)."""
        if self.columns[j].decimals is not None:
            return self.columns[j].decimals
        return max([1] + [_decimals_of(row.paper[j]) for row in self.rows if row.paper[j] is not None])


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
    counted = row.get("paper_parameters")
    if counted is not None and (not isinstance(counted, str) or not counted.strip()):
        raise TableSpecError(f"{where}: key 'paper_parameters' must be a non-empty string (\"360K\"), got {counted!r}")
    return Row(_need(row, "name", str, where), _match(row, where, True), paper, split=split,
               paper_parameters=counted)


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
    parameters = raw.get("parameters")
    if parameters is not None and (not isinstance(parameters, str) or not parameters.strip()):
        raise TableSpecError(f"{path}: key 'parameters' must be a dotted record key (parameters.attconv), "
                             f"got {parameters!r}")
    if parameters is None and any(r.paper_parameters for r in rows):
        raise TableSpecError(f"{path}: rows give 'paper_parameters' but the spec names no 'parameters' record key")
    return TableSpec(spec_id, title, paper, columns, rows, notes.strip(), row_header, path, compare, parameters)


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
