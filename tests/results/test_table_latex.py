"""LaTeX tables (coda_exp/table_latex.py): every shipped table, every cell filled, is well-formed LaTeX whose cells
hold numbers and markup only, wide tables split into blocks, significance as markers; and (where pdflatex is
installed) the tables compile into a one-column and a two-column document with no overfull box."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from coda_exp.fingerprint import GRID_FINGERPRINT
from coda_exp.significance import Comparison, Paired, Welch
from coda_exp.table_latex import MARKERS, caption, delta_cell, render_latex
from coda_exp.tables import build_table
from tests.results.records import rec

GENERATED = "2025-01-01T00:00:00+00:00"


def _put(record: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        record = record.setdefault(part, {})
    record[last] = value


def filled_records(spec, seeds=(1, 2, 3)) -> list[dict]:
    """A grid run per (row with a match, column, seed), values differing by row and seed: every cell of ours
    filled, every compare pair tested."""
    out = []
    for i, row in enumerate(spec.rows):
        if row.match is None:
            continue
        for j, col in enumerate(spec.columns):
            for seed in seeds:
                value = 0.5 + 0.01 * i + 0.003 * seed * (j + 1)
                record = rec(task=col.task, seed=seed, fingerprint=GRID_FINGERPRINT,
                             metrics={col.metric_for(row.split): value if col.percent else 30 * value},
                             parameters={"attconv": 360_300 + 900 * i})
                for key, want in {**row.match, **col.match}.items():
                    _put(record, key, want)
                out.append(record)
    return out


def _tex(spec, seeds=(1, 2, 3)) -> str:
    return render_latex(build_table(spec, filled_records(spec, seeds), generated=GENERATED))


def _cells(line: str) -> list[str]:
    """The cells of a tabular line (``&`` at brace depth 0, ``\\&`` is text)."""
    cells, depth, start = [], 0, 0
    for k, ch in enumerate(line):
        escaped = k > 0 and line[k - 1] == "\\"
        if ch == "{" and not escaped:
            depth += 1
        elif ch == "}" and not escaped:
            depth -= 1
        elif ch == "&" and not escaped and depth == 0:
            cells.append(line[start:k].strip())
            start = k + 1
    return cells + [line[start:].removesuffix(r"\\").strip()]


NUMBER = r"[+-]?\d+\.\d+"
CELL = re.compile(rf"""(
    |--|paper|ours|\\multicolumn\{{2\}}\{{c\}}\{{[^{{}}]*\}}         # header cells, an empty slot, a dash
    |\${NUMBER}(\ \\pm\ \d+\.\d+)?(\^\{{[^{{}}]+\}})?\$              # $85.71$, $86.00 \pm 1.00$, $+5.00^{{**}}$
    (\ \{{\\scriptsize\ \$n\{{=\}}\d+\$,\ [^{{}}]*\}})?              # n and scale where the cells differ
    |\d[\d,.]*[KM]?(\ /\ \d[\d,]*)*                                  # parameter counts: 360K, 360,300
)""", re.VERBOSE)
PROSE = re.compile(r"Welch|McNemar|no run|not run|not recorded|p = |\(n=|seed")


def _check_structure(tex: str) -> None:
    assert tex.isascii(), [ch for ch in tex if not ch.isascii()]
    body = "\n".join(line for line in tex.splitlines() if not line.startswith("%"))
    unescaped = re.sub(r"\\[{}&%$#_]", "", body)
    assert unescaped.count("{") == unescaped.count("}")
    assert unescaped.count("$") % 2 == 0
    text = re.sub(r"\\label\{[\w.:-]+\}|%$", "", unescaped, flags=re.MULTILINE)  # a label may hold "_"
    assert not re.search(r"[%#_&]", text.replace(" & ", " ")), text  # specials in text are escaped
    stack = []
    for kind, env in re.findall(r"\\(begin|end)\{(\w+\*?)\}", body):
        if kind == "begin":
            stack.append(env)
        else:
            assert stack.pop() == env
    assert stack == []
    spec = re.search(r"\\begin\{tabular\}\{(l(?: rr)+)\}", body).group(1)
    width = 1 + spec.count("rr") * 2
    inside = body.split(r"\begin{tabular}{" + spec + "}", 1)[1].rsplit(r"\end{tabular}}", 1)[0]
    lines = [line for line in inside.splitlines() if line.endswith(r"\\")]
    assert lines
    for line in lines:
        cells = _cells(line)
        assert sum(2 if c.startswith(r"\multicolumn{2}") else 1 for c in cells) == width, line
        for text in cells[1:]:
            assert CELL.fullmatch(text), (text, line)
        assert not PROSE.search(" ".join(cells[1:])), line


def test_every_shipped_table_is_well_formed_latex_with_numbers_only(shipped):
    for table_id, spec in shipped.items():
        tex = _tex(spec)
        _check_structure(tex)
        assert (r"\begin{table*}" in tex) == (len(spec.columns) + bool(spec.parameters) > 1), table_id
        assert r"\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{%" in tex
        if spec.compare:
            assert r"$\Delta$ rows" in tex and "$^{**}$" in tex  # the markers' legend
    one_seed = _tex(shipped["table_2"], seeds=(1,))  # no spread, no std, no Welch test
    _check_structure(one_seed)
    assert r"^{\circ}$ &" in one_seed and r"\pm" not in one_seed.split(r"\toprule")[1].split(r"\bottomrule")[0]


def test_no_row_or_column_name_of_a_spec_uses_a_significance_marker(shipped):
    symbols = ("*", "‡", "∘")
    names = [n for spec in shipped.values() for n in [r.name for r in spec.rows] + [c.name for c in spec.columns]]
    assert [n for n in names if any(s in n for s in symbols)] == []
    assert [m for m, _ in MARKERS] == ["*", "**", r"\ddagger", r"\ddagger\ddagger", r"\circ"]


def test_wide_tables_are_stacked_blocks_of_at_most_three_columns(shipped):
    tex = _tex(shipped["table_2"])  # five columns: three, then two
    assert r"\begin{tabular}{l rr rr rr}" in tex
    headers = [line for line in tex.splitlines() if line.startswith(r" & \multicolumn")]
    assert [line.count(r"\multicolumn") for line in headers] == [3, 2]
    assert headers[1].endswith(r"{UDC top-1} &  &  \\")
    assert sum(line.startswith("D-ATT + CoDA &") for line in tex.splitlines()) == 2  # every row in every block
    assert r"\begin{tabular}{l rr rr}" in _tex(shipped["table_1"])  # four: two and two
    small = _tex(shipped["table_6"])
    assert r"\begin{table}[t]" in small and r"\begin{tabular}{l rr}" in small


def test_cells_pooling_different_runs_name_their_n_and_scale(shipped):
    spec = shipped["table_5"]
    records = filled_records(spec)
    records = [r for r in records if not (r["task"] == "sst" and r["seed"] == 3)]
    tex = render_latex(build_table(spec, records, generated=GENERATED))
    _check_structure(tex)
    assert r"{\scriptsize $n{=}2$, cpu}" in tex and r"{\scriptsize $n{=}3$, cpu}" in tex
    assert "at the scale named beside it" in tex
    assert "over $n=3$ runs (seeds) at scale cpu" in _tex(spec)


@pytest.mark.parametrize("p_welch, p_paired, expected", [
    (0.004, None, "$+5.00^{**}$"),
    (0.03, 0.04, r"$+5.00^{*\ddagger}$"),
    (0.2, 0.001, r"$+5.00^{\ddagger\ddagger}$"),
    (None, 0.5, r"$+5.00^{\circ}$"),
    (0.05, 0.05, "$+5.00$"),
])
def test_delta_cells_carry_markers_not_prose(p_welch, p_paired, expected):
    comp = Comparison("a", "b", "SNLI", "test/acc", 1.1, 2, welch=Welch(5.0, None, None, p_welch, 3, 3),
                      paired=None if p_paired is None else Paired(p_paired, 3, 6, 3))
    assert delta_cell(comp) == expected
    assert delta_cell(Comparison("a", "b", "SNLI", "test/acc", None, 2, note="scales differ (cpu vs paper)")) == "--"


def test_caption_is_the_title_under_the_papers_number():
    assert caption("Table 7 — SNLI natural language inference (AttConv paper)") == (
        "SNLI natural language inference (AttConv paper, Table 7)")
    assert caption("Table 4 — machine translation, IWSLT'15 English→Vietnamese (CoDA paper)") == (
        r"Machine translation, IWSLT'15 English$\rightarrow$Vietnamese (CoDA paper, Table 4)")
    assert caption("Demo table_x & 100%") == r"Demo table\_x \& 100\%"


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="no pdflatex (apt-get install texlive-latex-recommended)")
@pytest.mark.parametrize("layout", ["onecolumn", "twocolumn"])
def test_every_shipped_table_compiles_and_fits_the_page(shipped, tmp_path, layout):
    inputs = []
    for table_id, spec in sorted(shipped.items()):
        (tmp_path / f"{table_id}.tex").write_text(_tex(spec), encoding="ascii")
        one_seed = render_latex(build_table(spec, filled_records(spec, (1,)), generated=GENERATED))
        (tmp_path / f"{table_id}_1.tex").write_text(one_seed, encoding="ascii")
        inputs += [rf"\input{{{table_id}.tex}}", rf"\input{{{table_id}_1.tex}}", r"\clearpage"]
    (tmp_path / "paper.tex").write_text(
        rf"\documentclass[{layout}]{{article}}" "\n" r"\usepackage{booktabs}" "\n" r"\usepackage{graphicx}" "\n"
        r"\begin{document}" "\n" + "\n".join(inputs) + "\n" r"\end{document}" "\n", encoding="ascii")
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "paper.tex"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    log = (tmp_path / "paper.log").read_text(encoding="latin-1")
    assert done.returncode == 0, log[-3000:]
    assert "Overfull" not in log and "Float too large" not in log, [ln for ln in log.splitlines() if "Overfull" in ln]
    assert (tmp_path / "paper.pdf").stat().st_size > 0
