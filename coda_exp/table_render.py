"""Rendering of built tables (:mod:`coda_exp.tables`) as Markdown, LaTeX (:mod:`coda_exp.table_latex`) and CSV, and
writing them.

CSV: one line per cell, per parameter count and per comparison; text columns as they are, numeric columns as
numbers only (empty when absent), rounded so that no float32 noise of a record reaches them: means, standard
deviations, differences and paper numbers to the column's display digits + 2 (Table 6: 41.65, not 41.65000021),
p-values and degrees of freedom to 4 significant digits. :data:`CSV_FIELDS` and their meaning are in
``docs/tables.md``.
"""

from __future__ import annotations

import csv
import io
import os
import re
import statistics
from pathlib import Path

from coda_exp.results import atomic_write_text, utc_now_iso
from coda_exp.table_latex import latex_escape, render_latex  # noqa: F401 - re-exported: one place to render from
from coda_exp.tables import (
    PAPERS,
    Table,
    TableSpecError,
    build_table,
    load_table_spec,
    off_grid_notes,
    smoke_test,
    smoke_test_note,
)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _comparison_rows(table: Table) -> list[list[str]]:
    """One row per ``compare`` pair: its name, then (paper Δ, ours Δ with p) per column."""
    rows: dict[str, list[str]] = {}
    blank = ["", ""] if table.parameters else []  # no parameter count for a difference
    for comp in table.comparisons:
        rows.setdefault(comp.row_name, [comp.row_name, *blank]).extend([comp.paper_text(), comp.ours_text()])
    return list(rows.values())


def _table_rows(table: Table) -> list[list[str]]:
    """One per spec row: its name, the parameter counts (paper, ours) when the spec has them, then (paper, ours)
    per column."""
    counts = table.parameters or [()] * len(table.cells)
    return [[row.name, *count] + [t for cell in cell_row for t in (cell.paper_text(), cell.ours_text())]
            for row, count, cell_row in zip(table.spec.rows, counts, table.cells)]


def _body_rows(table: Table) -> list[list[str]]:
    return _table_rows(table) + _comparison_rows(table)


SIGNIFICANCE_LEGEND = (
    "Δ rows: treatment − baseline of the means above (paper: the paper's difference); p: Welch's two-sided "
    "t-test across seeds (n = seeds per cell); paired p: McNemar's exact test on the test predictions of the "
    "seeds both models ran, pooled (accuracy, exact match, R@1 only). See coda_exp/significance.py."
)


def render_markdown(table: Table) -> str:
    spec = table.spec
    lines = [f"# {_md(spec.title)}", ""]
    if smoke_test(table):
        lines += [f"> **{_md(smoke_test_note(table))}**", ""]
    if spec.notes:
        lines += [_md(spec.notes), ""]
    legend = (
        f"Paper: {PAPERS[spec.paper]}. Each column shows the paper's number beside ours: mean ± sample std "
        "over seeds (n = runs, scale run at). `no run`: no run record yet; `not run`: a baseline only the "
        "paper reports. Ours is never filled from the paper."
    )
    provenance = (
        f"Generated {table.generated} from {table.records_used} run record(s) "
        f"({table.records_total} loaded) by `coda-exp tables`."
    )
    lines += [legend, ""]
    if table.grid:
        lines += [(f"Configuration: the settings of `configs/experiment/{spec.id}*.yaml`, "
                   f"`{' '.join(table.grid)}` (given by the experiment or on the command line); runs of another "
                   "configuration are listed under the table."), ""]
    if table.comparisons:
        lines += [SIGNIFICANCE_LEGEND, ""]
    lines += [provenance, ""]
    params = ["parameters (paper)", "parameters (ours)"] if table.parameters else []
    header = [spec.row_header, *params] + [f"{c.name} ({p})" for c in spec.columns for p in ("paper", "ours")]
    lines.append("| " + " | ".join(_md(h) for h in header) + " |")
    lines.append("| --- |" + " ---: |" * (len(header) - 1))
    for texts in _body_rows(table):
        lines.append("| " + " | ".join(_md(t) for t in texts) + " |")
    notes = off_grid_notes(table)
    if notes:
        lines += [""] + [f"- {_md(note)}" for note in notes]
    return "\n".join(lines) + "\n"


_CSV_CELL = ("row", "column", "paper", "mean", "std", "n", "scale")
_CSV_TRACE = ("task", "metric", "status", "other_scales", "run_ids")
_CSV_SIGNIFICANCE = ("n_baseline", "n_treatment", "p_welch", "df_welch", "p_paired", "paired_b", "paired_c",
                     "paired_seeds")
CSV_FIELDS = _CSV_CELL + _CSV_TRACE + _CSV_SIGNIFICANCE
EXTRA_DIGITS = 2  # CSV means, stds and differences: the column's display digits + this many


def csv_number(x: float | None, decimals: int | None = None, significant: int | None = None) -> str:
    """``x`` rounded to ``decimals`` places or ``significant`` digits, as the shortest text of that float
    (``41.65``, ``8.366e-241``); '' for None."""
    if x is None:
        return ""
    value = round(x, decimals) if decimals is not None else float(f"{x:.{significant}g}")
    return repr(value + 0.0)  # + 0.0: no "-0.0"


def paper_count(text: str | None) -> int | None:
    """A parameter count as a paper prints it, as a number: "360K" -> 360000, "3.5M" -> 3500000, "834" -> 834."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMB]?)\s*", text or "")
    if not m:
        return None
    return round(float(m.group(1)) * {"": 1, "K": 10**3, "M": 10**6, "B": 10**9}[m.group(2)])


def _counts(counts: list[int]) -> list:
    """paper-style columns mean, std, n of the parameter counts of a row's pooled runs."""
    if not counts:
        return ["", "", 0]
    mean = statistics.fmean(counts)
    std = statistics.stdev(counts) if len(counts) > 1 else None
    return [int(mean) if mean.is_integer() else csv_number(mean, 1), csv_number(std, 1), len(counts)]


def render_csv(table: Table) -> str:
    """One line per cell; numbers in display units (percent columns x100), rounded (module docstring), empty when
    absent. With a spec's ``parameters``, one line per row in column "parameters" (status "parameters"): the
    paper's count as a number ("360K": 360000) and the mean, std and number of ours over the row's pooled runs.
    One line per comparison (status "delta", or why there is none): paper and mean are the differences."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    no_test = [""] * len(_CSV_SIGNIFICANCE)
    for cell_row in table.cells:
        for cell in cell_row:
            d = cell.decimals
            numbers = [csv_number(cell.paper, d), csv_number(cell.mean, d + EXTRA_DIGITS),
                       csv_number(cell.std, d + EXTRA_DIGITS), cell.n, cell.scale or ""]
            others = ";".join(f"{s}:{n}" for s, n in cell.other_scales.items())
            extra = [cell.task, cell.metric, cell.status, others, ";".join(cell.run_ids)]
            writer.writerow([cell.row, cell.column, *numbers, *extra, *no_test])
    for row, counts in zip(table.spec.rows, table.parameter_counts):
        paper = paper_count(row.paper_parameters)
        writer.writerow([row.name, "parameters", "" if paper is None else paper, *_counts(counts), "", "",
                         table.spec.parameters, "parameters", "", "", *no_test])
    for comp in table.comparisons:
        w, pr = comp.welch, comp.paired
        d = comp.decimals
        numbers = [csv_number(comp.paper_delta, d), csv_number(w.delta if w else None, d + EXTRA_DIGITS), "", "", ""]
        trace = ["", comp.metric, "delta" if w else comp.note, "", ""]
        welch = [w.n_a, w.n_b, csv_number(w.p, significant=4), csv_number(w.df, significant=4)] if w else [""] * 4
        paired = ([csv_number(pr.p, significant=4), pr.b, pr.c, pr.seeds] if pr and pr.p is not None
                  else [""] * 4)
        writer.writerow([comp.row_name, comp.column, *numbers, *trace, *welch, *paired])
    return out.getvalue()


def load_specs(spec_paths: list[str | os.PathLike]) -> list:
    """The specs of ``spec_paths`` (:func:`coda_exp.table_spec.load_table_spec`); two of one id are refused."""
    specs = [load_table_spec(p) for p in spec_paths]
    ids = [s.id for s in specs]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise TableSpecError(f"duplicate table id(s) {dupes} in {list(map(str, spec_paths))}")
    return specs


def write_table(table: Table, out_dir: str | os.PathLike) -> list[Path]:
    """Write ``<out_dir>/<id>.md``, ``.tex`` and ``.csv`` of a built table atomically; a file that would change only
    in its generation time is left as it is (:func:`unchanged`)."""
    written = []
    for suffix, render in ((".md", render_markdown), (".tex", render_latex), (".csv", render_csv)):
        path, text = Path(out_dir) / f"{table.spec.id}{suffix}", render(table)
        written.append(path if unchanged(path, text) else atomic_write_text(path, text))
    return written


def write_tables(
    spec_paths: list[str | os.PathLike],
    records: list[dict],
    out_dir: str | os.PathLike,
    generated: str | None = None,
    predictions_dir: str | os.PathLike | None = None,
) -> list[Path]:
    """Build each spec's table and write ``<out_dir>/<id>.md``, ``.tex`` and ``.csv`` atomically.

    ``predictions_dir``: where to look for a run's test predictions when its record's path does not exist."""
    generated = generated or utc_now_iso()
    return [path for spec in load_specs(spec_paths)
            for path in write_table(build_table(spec, records, generated=generated, predictions_dir=predictions_dir),
                                    out_dir)]


#: the time in a table's provenance line (Markdown's ``Generated <time> from``, LaTeX's ``% id: generated <time> from``)
_GENERATED = re.compile(r"^(% \S+: generated|Generated) \S+ from ", re.MULTILINE)


def unchanged(path: Path, text: str) -> bool:
    """Whether ``path`` holds ``text`` already but for the time it was generated: such a file is left as it is, so
    that ``make tables`` over the same records leaves a checkout clean (no diff of a timestamp alone)."""
    try:
        old = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return _GENERATED.sub(r"\1 - from ", old) == _GENERATED.sub(r"\1 - from ", text)
