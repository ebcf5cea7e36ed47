"""Rendering of built tables (:mod:`coda_exp.tables`) as Markdown, LaTeX (booktabs) and CSV, and writing them."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from coda_exp.results import atomic_write_text, utc_now_iso
from coda_exp.tables import PAPERS, Table, TableSpecError, build_table, load_table_spec


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


def off_grid_notes(table: Table) -> list[str]:
    """One line per matching run of another configuration (never pooled): the cell, seed, scale, its overrides."""
    return [f"Not pooled, {run['status']}: {cell.row} / {cell.column}: seed {run['seed']} ({run['scale']})"
            + (f" with {' '.join(run['overrides'])}" if run["overrides"] else "") + f" ({run['run_id']})"
            if "status" in run else
            f"Not pooled, another configuration: {cell.row} / {cell.column}: seed {run['seed']} ({run['scale']}) "
            f"with {' '.join(run['overrides'])} ({run['run_id']})"
            for cell_row in table.cells for cell in cell_row for run in cell.off_grid]


SMOKE_TEST = (
    "Smoke test: cells marked `fixture` pool runs on the tiny fixtures (tests/fixtures/, a few dozen examples "
    "written by us, scale=fixture) that check the pipeline end to end; their numbers say nothing about the models."
)


def smoke_test(table: Table) -> bool:
    """Whether a cell shows runs at the fixture scale (``fixture``, ``fixture (task.epochs=2)``)."""
    return any((cell.scale or "").split(" ")[0] == "fixture" for row in table.cells for cell in row)


def render_markdown(table: Table) -> str:
    spec = table.spec
    lines = [f"# {_md(spec.title)}", ""]
    if smoke_test(table):
        lines += [f"> **{_md(SMOKE_TEST)}**", ""]
    if spec.notes:
        lines += [_md(spec.notes), ""]
    legend = (
        f"Paper: {PAPERS[spec.paper]}. Each column shows the paper's number beside ours: mean ± sample std "
        "over seeds (n = runs, scale run at). `no run`: no run record yet; `not run`: a baseline only the "
        "paper reports. Ours is never filled from the paper."
    )
    provenance = (
        f"Generated {table.generated} from {table.records_used} run record(s) "
        f"({table.records_total} loaded) by `scripts/make_tables.py`."
    )
    lines += [legend, ""]
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


_LATEX_SPECIAL = (
    {ch: "\\" + ch for ch in "&%$#_{}"}
    | {"~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}"}
    | {"±": r"$\pm$", "·": r"$\cdot$", "—": "---", "–": "--", "′": "$'$", "’": "'"}
    | {"†": r"$^\dagger$", "³": r"$^3$", "→": r"$\rightarrow$"}
    | {"Δ": r"$\Delta$", "−": "$-$", "≥": r"$\geq$", "≤": r"$\leq$", "×": r"$\times$", "≈": r"$\approx$"}
)


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def render_latex(table: Table) -> str:
    spec = table.spec
    lines = [
        f"% {spec.id}: generated {table.generated} from {table.records_used} run record(s)",
        *([f"% {SMOKE_TEST}"] if smoke_test(table) else []),
        r"\begin{table}[t]",
        r"\centering",
        r"\caption{" + latex_escape(spec.title) + "}",
        r"\label{tab:" + spec.id + "}",  # ids are filename-safe: fine in a label as they are
    ]
    groups = (["parameters"] if table.parameters else []) + [c.name for c in spec.columns]
    lines += [
        r"\begin{tabular}{l" + " rr" * len(groups) + "}",
        r"\toprule",
        " & ".join([""] + [r"\multicolumn{2}{c}{" + latex_escape(name) + "}" for name in groups]) + r" \\",
        " ".join(rf"\cmidrule(lr){{{2 + 2 * j}-{3 + 2 * j}}}" for j in range(len(groups))),
        " & ".join([latex_escape(spec.row_header)] + ["paper", "ours"] * len(groups)) + r" \\",
        r"\midrule",
    ]
    for texts in _table_rows(table):
        lines.append(" & ".join(latex_escape(t) for t in texts) + r" \\")
    comparison_rows = _comparison_rows(table)
    if comparison_rows:
        lines.append(r"\midrule")
    for texts in comparison_rows:
        lines.append(" & ".join(latex_escape(t) for t in texts) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    if smoke_test(table):
        lines.append(r"\par\footnotesize\textbf{" + latex_escape(SMOKE_TEST) + "}")
    lines += [r"\par\footnotesize " + latex_escape(note) for note in off_grid_notes(table)]
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


_CSV_CELL = ("row", "column", "paper", "mean", "std", "n", "scale")
_CSV_TRACE = ("task", "metric", "status", "other_scales", "run_ids")
_CSV_SIGNIFICANCE = ("p_welch", "df_welch", "p_paired", "paired_discordant", "paired_seeds")
CSV_FIELDS = _CSV_CELL + _CSV_TRACE + _CSV_SIGNIFICANCE


def _num(x: float | None) -> str:
    return "" if x is None else format(x, ".10g")


def render_csv(table: Table) -> str:
    """One line per cell; numbers in display units (percent columns x100), empty when absent. With a spec's
    ``parameters``, one line per row in column "parameters": paper and ours as printed ("360K", "360,300")."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for cell_row in table.cells:
        for cell in cell_row:
            numbers = [_num(cell.paper), _num(cell.mean), _num(cell.std), cell.n, cell.scale or ""]
            others = ";".join(f"{s}:{n}" for s, n in cell.other_scales.items())
            extra = [cell.task, cell.metric, cell.status, others, ";".join(cell.run_ids)]
            writer.writerow([cell.row, cell.column, *numbers, *extra, "", "", "", "", ""])
    for row, (paper, ours) in zip(table.spec.rows, table.parameters):  # status "parameters": counts as printed
        writer.writerow([row.name, "parameters", paper, ours, "", "", "", "", table.spec.parameters, "parameters",
                         "", "", "", "", "", "", ""])
    for comp in table.comparisons:  # status "delta": mean = treatment − baseline, paper = the paper's difference
        w, pr = comp.welch, comp.paired
        numbers = [_num(comp.paper_delta), _num(w.delta if w else None), "", f"{w.n_a}/{w.n_b}" if w else "", ""]
        paired = [_num(pr.p), f"{pr.b}/{pr.c}", pr.seeds] if pr and pr.p is not None else ["", "", ""]
        writer.writerow([comp.row_name, comp.column, *numbers, "", comp.metric, "delta" if w else comp.note, "", "",
                         _num(w.p if w else None), _num(w.df if w else None), *paired])
    return out.getvalue()


def write_tables(
    spec_paths: list[str | os.PathLike],
    records: list[dict],
    out_dir: str | os.PathLike,
    generated: str | None = None,
    predictions_dir: str | os.PathLike | None = None,
) -> list[Path]:
    """Build each spec's table and write ``<out_dir>/<id>.md``, ``.tex`` and ``.csv`` atomically.

    ``predictions_dir``: where to look for a run's test predictions when its record's path does not exist."""
    specs = [load_table_spec(p) for p in spec_paths]
    ids = [s.id for s in specs]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise TableSpecError(f"duplicate table id(s) {dupes} in {list(map(str, spec_paths))}")
    generated = generated or utc_now_iso()
    written = []
    for spec in specs:
        table = build_table(spec, records, generated=generated, predictions_dir=predictions_dir)
        for suffix, render in ((".md", render_markdown), (".tex", render_latex), (".csv", render_csv)):
            written.append(atomic_write_text(Path(out_dir) / f"{spec.id}{suffix}", render(table)))
    return written
