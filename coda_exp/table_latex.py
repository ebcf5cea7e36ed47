"""A built table (:mod:`coda_exp.tables`) as LaTeX that goes into a paper as it is (booktabs, graphicx).

Cells hold numbers and markup only, in math mode: the paper's number, ours as ``mean ± std`` (one run: the
value), a dash where there is no number (the paper reports none, or ours is not run / has no run record yet).
When the cells of a table do not all pool the same number of runs at one scale, each of ours carries its ``n``
(and scale) in small print; otherwise the legend under the table says it once. A ``Δ`` row (``compare`` pairs)
holds the two differences (paper, ours) and significance markers on ours (:data:`MARKERS`): ``*``/``**`` Welch's
p < 0.05/0.01 across seeds, ``‡``/``‡‡`` McNemar's exact p < 0.05/0.01 on the matched seeds' test predictions,
``∘`` no Welch test (a cell of one seed, or no spread); the exact p-values are in the Markdown and CSV tables.

Width. A table of more than :data:`MAX_GROUPS` column groups (a group: paper and ours of one column; the
parameter counts are one too) is split into stacked blocks of one ``tabular`` (Table 2's five columns: three,
then two, each block with its own header and every row again), so no font is shrunk to a third. A table of more
than one group per block is a ``table*`` (both columns of a two-column paper). The ``tabular`` is wrapped in
``\\resizebox{\\ifdim\\width>\\linewidth\\linewidth\\else\\width\\fi}{!}{...}``: scaled down to the line width only
when wider, never up. The preamble needs ``\\usepackage{booktabs}`` and ``\\usepackage{graphicx}``.

Text (title, row and column names, scales) is escaped (:func:`latex_escape`: ``& % $ # _ { } ~ ^ \\`` and the
non-ASCII symbols the specs use), so the file is ASCII and pdflatex needs no unicode setup. The spec's notes and
the runs listed apart ("Not pooled") are ``%`` comments at the top: there for the author, not typeset.
"""

from __future__ import annotations

import math
import re
import textwrap

from coda_exp.tables import (
    DASH,
    NO_RUN,
    NOT_RECORDED,
    NOT_RUN,
    Cell,
    Table,
    off_grid_notes,
    smoke_test,
    smoke_test_note,
)

NONE = "--"  # a cell without a number (an en dash)

MAX_GROUPS = 3  # column groups per block

_LATEX_SPECIAL = (
    {ch: "\\" + ch for ch in "&%$#_{}"}
    | {"~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}"}
    | {"±": r"$\pm$", "·": r"$\cdot$", "—": "---", "–": "--", "′": "$'$", "’": "'"}
    | {"†": r"$^\dagger$", "³": r"$^3$", "¹": r"$^1$", "²": r"$^2$", "→": r"$\rightarrow$", "§": r"\S{}"}
    | {"Δ": r"$\Delta$", "−": "$-$", "≥": r"$\geq$", "≤": r"$\leq$", "×": r"$\times$", "≈": r"$\approx$"}
)

#: significance markers of a Δ cell (math mode superscripts) and what each means, in legend order
MARKERS = (
    ("*", r"Welch's $t$-test across seeds, $p<0.05$"),
    ("**", r"$p<0.01$"),
    (r"\ddagger", r"McNemar's exact test on the test predictions of the seeds both models ran, $p<0.05$"),
    (r"\ddagger\ddagger", r"$p<0.01$"),
    (r"\circ", r"no Welch test (a cell of one seed, or no spread)"),
)


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def _comment(text: str) -> list[str]:
    return ["% " + part for line in text.splitlines() if line.strip()
            for part in textwrap.wrap(latex_escape(line), 110, break_long_words=False, break_on_hyphens=False)]


def caption(title: str) -> str:
    """The spec's title as a caption under the paper's own number: "Table 7 — SNLI ... (AttConv paper)" ->
    "SNLI ... (AttConv paper, Table 7)" (a caption is numbered by LaTeX already)."""
    m = re.fullmatch(r"(Table \w+)\s+—\s+(.+?)", title.strip())
    if not m:
        return latex_escape(title)
    number, rest = m.groups()
    rest = rest[:1].upper() + rest[1:]
    rest = rest[:-1] + f", {number})" if rest.endswith(")") else f"{rest} ({number})"
    return latex_escape(rest)


def row_name(name: str, comparison: tuple[str, str] | None = None) -> str:
    """A row's name; a Δ row's on two lines (treatment, then − baseline) so it does not widen the table."""
    if comparison is None:
        return latex_escape(name)
    baseline, treatment = comparison
    return (r"\begin{tabular}[t]{@{}l@{}}$\Delta$ " + latex_escape(treatment) + r" \\ \quad $-$ "
            + latex_escape(baseline) + r"\end{tabular}")


def math_number(x: float, decimals: int, signed: bool = False) -> str:
    """``x`` with ``decimals`` digits, in math mode (a real minus sign): ``$-41.0$``, signed ``$+8.2$``."""
    return "$" + format(x, f"{'+' if signed else ''}.{decimals}f") + "$"


def _uniform(table: Table) -> tuple[int, str] | None:
    """(n, scale) when every cell with runs pooled the same number of runs at one scale, else None."""
    found = {(c.n, c.scale) for row in table.cells for c in row if c.status == "ok"}
    return found.pop() if len(found) == 1 else None


def ours_cell(cell: Cell, uniform: tuple[int, str] | None) -> str:
    if cell.status in (NO_RUN, NOT_RUN):
        return NONE
    d = cell.decimals
    body = f"{cell.mean:.{d}f}" + ("" if cell.std is None else rf" \pm {cell.std:.{d}f}")
    text = "$" + body + "$"
    if uniform is None:
        text += r" {\scriptsize $n{=}" + str(cell.n) + "$, " + latex_escape(cell.scale or "") + "}"
    return text


def paper_cell(value: float | None, decimals: int, signed: bool = False) -> str:
    return NONE if value is None else math_number(value, decimals, signed)


def markers(comp) -> str:
    """The superscript markers of a comparison (``**\\ddagger``), '' when none applies."""
    out = ""
    w = comp.welch
    if w is not None:
        if w.p is None or math.isnan(w.p):
            out += r"\circ"
        elif w.p < 0.01:
            out += "**"
        elif w.p < 0.05:
            out += "*"
    pr = comp.paired
    if pr is not None and pr.p is not None:
        out += r"\ddagger\ddagger" if pr.p < 0.01 else r"\ddagger" if pr.p < 0.05 else ""
    return out


def delta_cell(comp) -> str:
    if comp.welch is None:  # no comparison ("no run", "scales differ"): the Markdown and CSV say why
        return NONE
    mark = markers(comp)
    number = format(comp.welch.delta, f"+.{comp.decimals}f")
    return "$" + number + (f"^{{{mark}}}" if mark else "") + "$"


def _groups(table: Table) -> list[tuple[str, list[list[str]]]]:
    """(group name, [the group's (paper, ours) texts per body row]) per column group, body rows being the spec's
    rows then one per ``compare`` pair."""
    uniform = _uniform(table)
    spec = table.spec
    pairs = list(dict.fromkeys(comp.row_name for comp in table.comparisons))
    groups = []
    if table.parameters:
        texts = [[NONE if p == DASH else latex_escape(p),
                  NONE if o in (NO_RUN, NOT_RUN, NOT_RECORDED) else latex_escape(o)] for p, o in table.parameters]
        groups.append(("parameters", texts + [["", ""] for _ in pairs]))
    for j, col in enumerate(spec.columns):
        texts = [[paper_cell(row[j].paper, row[j].decimals), ours_cell(row[j], uniform)] for row in table.cells]
        by_pair = {c.row_name: c for c in table.comparisons if c.column == col.name}
        texts += [[paper_cell(by_pair[p].paper_delta, by_pair[p].decimals, signed=True), delta_cell(by_pair[p])]
                  for p in pairs]
        groups.append((col.name, texts))
    return groups


def _blocks(n_groups: int) -> list[range]:
    """Balanced blocks of at most MAX_GROUPS consecutive groups (5 -> 3 + 2, 4 -> 2 + 2)."""
    blocks = math.ceil(n_groups / MAX_GROUPS)
    per = math.ceil(n_groups / blocks)
    return [range(start, min(start + per, n_groups)) for start in range(0, n_groups, per)]


def legend(table: Table) -> str:
    uniform = _uniform(table)
    runs = (rf"over $n={uniform[0]}$ run{'s' if uniform[0] != 1 else ''} (seeds) at scale "
            + latex_escape(uniform[1]) if uniform else r"over $n$ runs (seeds) at the scale named beside it")
    parts = [f"Paper: the paper's number; ours: mean $\\pm$ sample standard deviation {runs}.",
             r"--: no number (not in the paper; ours not run, or no run record yet)."]
    if table.comparisons:
        marks = "; ".join(f"$^{{{m}}}$ {text}" for m, text in MARKERS)
        parts.append(r"$\Delta$ rows: treatment $-$ baseline of the means; " + marks
                     + ". Exact $p$-values: the table's Markdown and CSV.")
    return " ".join(parts)


def render_latex(table: Table) -> str:
    spec = table.spec
    groups = _groups(table)
    blocks = _blocks(len(groups))
    slots = max(len(b) for b in blocks)
    env = "table*" if slots > 1 else "table"
    names = [row_name(row.name) for row in spec.rows]
    names += [row_name(p, (c.baseline, c.treatment)) for p, c in
              {comp.row_name: comp for comp in table.comparisons}.items()]
    lines = [f"% {spec.id}: generated {table.generated} from {table.records_used} run record(s) by coda-exp tables",
             r"% preamble: \usepackage{booktabs} \usepackage{graphicx}",
             *([f"% {smoke_test_note(table, latex=True)}"] if smoke_test(table) else [])]
    lines += _comment(f"configuration: {' '.join(table.grid)} (configs/experiment/{spec.id}*.yaml)" if table.grid else "")
    lines += _comment(spec.notes) + _comment("\n".join(off_grid_notes(table)))
    lines += [rf"\begin{{{env}}}[t]", r"\centering", r"\caption{" + caption(spec.title) + "}",
              r"\label{tab:" + spec.id + "}",  # ids are filename-safe: fine in a label as they are
              r"\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{%",
              r"\begin{tabular}{l" + " rr" * slots + "}", r"\toprule"]
    n_rows = len(spec.rows)
    for k, block in enumerate(blocks):
        if k:
            lines.append(r"\midrule")
        pad = ["", ""] * (slots - len(block))
        lines.append(" & ".join([""] + [r"\multicolumn{2}{c}{" + latex_escape(groups[g][0]) + "}" for g in block]
                                + pad) + r" \\")
        lines.append(" ".join(rf"\cmidrule(lr){{{2 + 2 * j}-{3 + 2 * j}}}" for j in range(len(block))))
        lines.append(" & ".join([latex_escape(spec.row_header)] + ["paper", "ours"] * len(block) + pad) + r" \\")
        lines.append(r"\midrule")
        for i, name in enumerate(names):
            if i == n_rows:
                lines.append(r"\midrule")
            lines.append(" & ".join([name] + [t for g in block for t in groups[g][1][i]] + pad) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}}", r"\par\smallskip", r"{\footnotesize\raggedright " + legend(table) + r"\par}"]
    if smoke_test(table):
        lines.append(r"{\footnotesize\textbf{" + latex_escape(smoke_test_note(table, latex=True)) + r"}\par}")
    lines.append(rf"\end{{{env}}}")
    return "\n".join(lines) + "\n"
