"""Tables from run records: selection, statistics, formatting, spec validation, significance rows."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from coda_exp.table_render import render_csv, render_latex, render_markdown, write_tables
from coda_exp.tables import NO_RUN, NOT_RUN, SupersededRunWarning, build_table, choose_scale, load_table_spec
from tests.results.records import SPEC_YAML, TODAYS_GRID, cell, md_row, rec


def test_mean_std_over_three_seeds(spec):
    records = [rec(seed=s, metrics={"test/acc": a}) for s, a in enumerate([0.85, 0.86, 0.87])]
    table = build_table(spec, records)
    c = cell(table, "D-ATT + CoDA", "SNLI")
    assert c.ours_text() == "86.00 ± 1.00 (n=3, cpu)"
    assert c.paper_text() == "85.71"
    assert md_row(render_markdown(table), "D-ATT + CoDA")[1:3] == ["85.71", "86.00 ± 1.00 (n=3, cpu)"]
    assert table.records_used == 3


def test_single_run_has_no_spread(spec):
    table = build_table(spec, [rec(metrics={"test/acc": 0.8512})])
    assert cell(table, "D-ATT + CoDA", "SNLI").ours_text() == "85.12 (n=1, cpu)"


def test_missing_cell_says_no_run_never_the_paper_number(spec):
    table = build_table(spec, [rec()])
    markdown = render_markdown(table)
    row = md_row(markdown, "D-ATT")
    assert row[1:3] == ["84.61", NO_RUN]
    assert row[3:5] == ["–", NO_RUN]
    assert "84.61" not in row[2]
    assert md_row(markdown, "GA")[1:] == ["77.70", NOT_RUN, "26.10", NOT_RUN]  # column decimals
    csv_rows = list(csv.DictReader(io.StringIO(render_csv(table))))
    datt = next(r for r in csv_rows if r["row"] == "D-ATT" and r["column"] == "SNLI")
    assert (datt["mean"], datt["n"], datt["status"], datt["paper"]) == ("", "0", NO_RUN, "84.61")


def test_scale_selection():
    assert choose_scale({"fixture": 5, "paper": 1}) == "paper"
    assert choose_scale({"fixture": 1, "cpu": 3}) == "cpu"
    assert choose_scale({"fixture": 2, "cpu": 2}) == "cpu"


def test_scale_selection_in_cells(spec):
    records = [rec(scale="fixture", seed=s, metrics={"test/acc": 0.1}) for s in range(3)]
    records += [rec(scale="cpu", seed=s, metrics={"test/acc": 0.8}) for s in range(2)]
    c = cell(build_table(spec, records), "D-ATT + CoDA", "SNLI")
    assert (c.scale, c.n, c.other_scales) == ("fixture", 3, {"cpu": 2})
    records.append(rec(scale="paper", seed=0, metrics={"test/acc": 0.857}))
    c = cell(build_table(spec, records), "D-ATT + CoDA", "SNLI")
    assert c.ours_text() == "85.70 (n=1, paper)"
    assert c.other_scales == {"cpu": 2, "fixture": 3}


def test_runs_of_another_scale_and_superseded_runs_are_named_under_the_table(spec):
    """The Markdown and LaTeX once showed neither: other scales only in the CSV, a rerun only in a warning."""
    cpu = [rec(scale="cpu", seed=s, metrics={"test/acc": 0.8}) for s in (1, 2)]
    fixture = rec(scale="fixture", seed=1, metrics={"test/acc": 0.1})
    rerun = rec(scale="cpu", seed=2, metrics={"test/acc": 0.9})
    with pytest.warns(SupersededRunWarning):
        table = build_table(spec, [*cpu, fixture, rerun])
    c = cell(table, "D-ATT + CoDA", "SNLI")
    assert c.run_ids == [cpu[0]["run_id"], rerun["run_id"]] and c.other_scales == {"fixture": 1}
    markdown, latex = render_markdown(table), render_latex(table)
    superseded = (f"Not pooled, superseded by the later {rerun['run_id']}: D-ATT + CoDA / SNLI: seed 2 (cpu) "
                  f"({cpu[1]['run_id']})")
    scale = (f"Not pooled, another scale than the cell's (cpu): D-ATT + CoDA / SNLI: seed 1 (fixture) "
             f"({fixture['run_id']})")
    assert f"- {superseded}" in markdown.splitlines() and f"- {scale}" in markdown.splitlines()
    assert cpu[1]["run_id"] in latex and fixture["run_id"] in latex


def test_a_left_out_run_is_one_note_per_row_with_its_columns_and_a_budget_override_is_called_one():
    """Each left-out WikiQA run was listed once for MAP and again for MRR (and warned of per column), and a run with
    task.epochs=2 was "another scale than the cell's (fixture)" beside the fixture runs of its scale."""
    from tests import ROOT

    spec = load_table_spec(ROOT / "configs" / "tables" / "table_2.yaml")
    wikiqa = {"task": "wikiqa", "model": "decompatt", "metrics": {"test/map": 0.6, "test/mrr": 0.62}, **TODAYS_GRID}
    old, new = rec(seed=1, scale="fixture", **wikiqa), rec(seed=1, scale="fixture", **wikiqa)
    budget = rec(seed=2, scale="fixture (task.epochs=2)", **{**wikiqa, "overrides": ["task.epochs=2"]})
    with pytest.warns(SupersededRunWarning) as caught:
        table = build_table(spec, [old, new, budget])
    assert len([w for w in caught if w.category is SupersededRunWarning]) == 1
    superseded = (f"- Not pooled, superseded by the later {new['run_id']}: D-ATT / WikiQA MAP, WikiQA MRR: seed 1 "
                  f"(fixture) ({old['run_id']})")
    budgeted = ("- Not pooled, another budget than the cell's (fixture): D-ATT / WikiQA MAP, WikiQA MRR: seed 2 "
                f"(fixture (task.epochs=2)) ({budget['run_id']})")
    notes = [line for line in render_markdown(table).splitlines() if line.startswith("- Not pooled")]
    assert notes == [superseded, budgeted]


def test_a_run_of_a_rows_model_in_another_configuration_that_no_row_takes_is_listed():
    """model=coda_transformer model/scoring=softmax matches no row of Table 6 (its attention is softmax) and was left
    out without a word; a centring run of Table 8 (the grid's configuration) belongs to another table."""
    from tests import ROOT
    from tests.results.records import mlu_rec

    spec = load_table_spec(ROOT / "configs" / "tables" / "table_6.yaml")
    pooled, centred = mlu_rec(seed=1), mlu_rec(seed=1, options={"center_e": True})
    softmax = mlu_rec(seed=1, attention={"name": "softmax"}, overrides=["model/scoring=softmax"],
                      fingerprint="0123456789ab", fingerprint_overrides=["model/scoring=softmax"])
    table = build_table(spec, [pooled, centred, softmax])
    assert cell(table, "CoDA Transformer", "accuracy").run_ids == [pooled["run_id"]]
    notes = [line for line in render_markdown(table).splitlines() if line.startswith("- Not pooled")]
    listed = (f"- Not pooled, another configuration: CoDA Transformer / accuracy: seed 1 (cpu) with "
              f"model/scoring=softmax ({softmax['run_id']})")
    assert notes == [listed]


def test_a_table_of_fixture_runs_says_it_is_a_smoke_test(spec):
    """make quickstart, reproduce-* SCALE=fixture: the tables say their numbers mean nothing (issue 23)."""
    real = build_table(spec, [rec(scale="cpu", seed=s, metrics={"test/acc": 0.8}) for s in range(2)])
    assert "Smoke test" not in render_markdown(real) and "Smoke test" not in render_latex(real)
    for scale in ("fixture", "fixture (task.epochs=2)"):
        smoke = build_table(spec, [rec(scale=scale, seed=s, metrics={"test/acc": 0.5}) for s in range(2)])
        markdown = render_markdown(smoke)
        assert markdown.splitlines()[2].startswith(f"> **Smoke test: the cells at scale `{scale}` pool runs on the "
                                                   "tiny fixtures")
        latex = render_latex(smoke)
        banner = next(line for line in latex.splitlines() if "\\textbf{Smoke test" in line)
        # LaTeX: no Markdown backticks (two opening quotes there), no "cells marked" (its cells carry no marker)
        assert "`" not in latex and "marked" not in latex
        assert "Smoke test: this table's numbers at scale fixture" in banner.replace("\\_", "_")


def test_the_smoke_test_is_told_by_the_data_not_the_scales_name(spec):
    """make quickstart's runs (experiment=quickstart: scale_name quickstart on the fixtures) had no banner."""
    quick = [rec(scale="quickstart", seed=1, fixture_data=True),  # a record that says what it read
             rec(scale="quickstart", seed=2, overrides=["experiment=quickstart", "model=decompatt_coda", "seed=2"])]
    for runs in (quick[:1], quick[1:]):  # an older one: experiment=quickstart chose scale=fixture
        markdown = render_markdown(build_table(spec, runs))
        assert markdown.splitlines()[2].startswith("> **Smoke test: the cells at scale `quickstart` pool runs")
    # the fixture scale on real data (data.dir=...) is no smoke test; a scale of our own on the fixtures is one (a
    # real-data scale's name on them, cpu or paper, contradicts itself: listed apart, test_record_checks.py)
    assert "Smoke test" not in render_markdown(build_table(spec, [rec(scale="fixture", fixture_data=False)]))
    assert "Smoke test" in render_markdown(build_table(spec, [rec(scale="mine", fixture_data=True)]))


def test_latest_run_per_seed_counts(spec):
    records = [rec(seed=0, metrics={"test/acc": 0.5}), rec(seed=0, metrics={"test/acc": 0.9})]
    assert cell(build_table(spec, records), "D-ATT + CoDA", "SNLI").ours_text() == "90.00 (n=1, cpu)"


def test_dotted_match_keys_and_strict_bools(spec):
    records = [
        rec(seed=0, center_e=True, metrics={"test/acc": 0.8}),
        rec(seed=1, center_e=1, metrics={"test/acc": 0.2}),  # 1 is not true
        rec(seed=2, center_e=False, metrics={"test/acc": 0.6}),
    ]
    table = build_table(spec, records)
    assert cell(table, "centred", "SNLI").ours_text() == "80.00 (n=1, cpu)"
    assert cell(table, "D-ATT + CoDA", "SNLI").n == 3  # no attention key in the row's match
    no_attention = rec(metrics={"test/acc": 0.8})
    del no_attention["attention"]["center_e"]
    assert cell(build_table(spec, [no_attention]), "centred", "SNLI").status == NO_RUN


def test_percent_and_column_match_and_split(spec):
    records = [
        rec(task="iwslt15_envi", model="coda_transformer", seed=s, metrics={"test/bleu": b, "val/bleu": 27.0},
            **TODAYS_GRID)  # a record of an earlier rule of IWSLT ran other defaults (experiments.earlier_defaults)
        for s, b in enumerate([29.0, 30.0])
    ]
    records.append(rec(seed=0, metrics={"test/acc": 0.85, "val/acc": 0.8612}))
    table = build_table(spec, records)
    # The BLEU column's own `match` (model coda_transformer) wins over the row's model; not a percent column.
    assert cell(table, "D-ATT + CoDA", "BLEU").ours_text() == "29.50 ± 0.71 (n=2, cpu)"
    assert cell(table, "D-ATT", "BLEU").ours_text() == "29.50 ± 0.71 (n=2, cpu)"
    dev = cell(table, "dev CoDA", "SNLI")
    assert (dev.metric, dev.ours_text()) == ("val/acc", "86.12 (n=1, cpu)")
    assert cell(table, "dev CoDA", "BLEU").ours_text() == "27.00 ± 0.00 (n=2, cpu)"


def test_percent_column_warns_on_values_above_one(spec):
    with pytest.warns(UserWarning, match="fractions"):
        build_table(spec, [rec(metrics={"test/acc": 85.0})])


def test_latex_has_booktabs_and_escapes(spec):
    table = build_table(spec, [rec(seed=s, metrics={"test/acc": 0.8 + s / 100}) for s in range(2)])
    tex = render_latex(table)
    for rule in (r"\toprule", r"\midrule", r"\bottomrule", r"\begin{tabular}", r"\end{tabular}"):
        assert tex.count(rule) == 1
    assert r"\label{tab:t_demo}" in tex
    assert r"\caption{Demo table\_x \& 100\%}" in tex
    assert r"$\pm$" in tex and "±" not in tex
    assert tex.count(r"\\") == 2 + len(spec.rows)


def test_csv_parses(spec):
    table = build_table(spec, [rec(seed=s, metrics={"test/acc": a}) for s, a in enumerate([0.85, 0.87])])
    rows = list(csv.DictReader(io.StringIO(render_csv(table))))
    assert len(rows) == len(spec.rows) * len(spec.columns)
    first = next(r for r in rows if r["row"] == "D-ATT + CoDA" and r["column"] == "SNLI")
    # numbers rounded to the column's 2 display digits + 2: no float noise (0.87 * 100 = 87.00000000000001)
    assert (first["mean"], first["std"], first["paper"]) == ("86.0", "1.4142", "85.71")
    assert (first["n"], first["scale"], first["metric"]) == ("2", "cpu", "test/acc")
    assert first["run_ids"].count(";") == 1


NUMERIC = {"paper", "mean", "std", "p_welch", "df_welch", "p_paired"}
INTEGER = {"n", "n_baseline", "n_treatment", "paired_b", "paired_c", "paired_seeds"}


def assert_numeric_csv(text: str) -> list[dict]:
    """Every numeric column of every line is empty or a number, every count an integer; no float32 noise (at most
    6 significant digits in a mean)."""
    rows = list(csv.DictReader(io.StringIO(text)))
    for row in rows:
        for key in NUMERIC | INTEGER:
            value = row[key]
            if value:
                float(value) if key in NUMERIC else int(value)
        digits = row["mean"].lstrip("-").replace(".", "").lstrip("0")
        assert "e" in row["mean"] or len(digits) <= 6, row
    return rows


def test_csv_numbers_are_numbers_of_display_precision(tmp_path):
    """float32 metrics (0.4165000021) give 41.65 in the CSV; n is an integer in every line: a Δ line gives the two
    cells' runs in n_baseline and n_treatment, the discordant pairs in paired_b and paired_c."""
    path = tmp_path / "t_demo.yaml"
    path.write_text(COMPARE_YAML, encoding="utf-8")
    spec = load_table_spec(path)
    records, _ = _compare_records(tmp_path)
    records = [dict(r, metrics={"test/acc": float(np.float32(r["metrics"]["test/acc"]))}) for r in records]
    records.append(rec(model="decompatt", seed=9, metrics={"test/acc": float(np.float32(0.4165))}, scale="fixture"))
    rows = assert_numeric_csv(render_csv(build_table(spec, records)))
    datt = next(r for r in rows if (r["row"], r["column"]) == ("D-ATT", "SNLI"))
    assert (datt["mean"], datt["std"], datt["n"], datt["other_scales"]) == ("80.0", "1.0", "3", "fixture:1")
    delta = next(r for r in rows if r["status"] == "delta")
    assert (delta["mean"], delta["paper"], delta["n"], delta["n_baseline"], delta["n_treatment"]) == (
        "5.0", "1.1", "", "3", "3")
    assert (delta["paired_b"], delta["paired_c"], delta["paired_seeds"], delta["p_paired"]) == ("3", "18", "3", "0.00149")
    assert float(delta["p_welch"]) == pytest.approx(0.0036, rel=0.01) and len(delta["p_welch"]) == len("0.003602")
    assert float(delta["df_welch"]) == pytest.approx(4.0, rel=1e-3)
    no_run = next(r for r in rows if r["row"].startswith("Δ") and r["column"] == "BLEU")
    assert (no_run["status"], no_run["mean"], no_run["n_baseline"]) == ("no run", "", "")
    fixture = build_table(spec, [rec(model="decompatt", seed=0, metrics={"test/acc": float(np.float32(0.4165))})])
    assert cell(fixture, "D-ATT", "SNLI").values != [41.65]  # the noise is there before rounding
    assert next(r for r in assert_numeric_csv(render_csv(fixture)) if r["row"] == "D-ATT")["mean"] == "41.65"


def test_write_tables_writes_md_tex_csv(spec, tmp_path):
    paths = write_tables([spec.path], [rec()], tmp_path / "out", generated="2025-01-01T00:00:00+00:00")
    assert sorted(p.name for p in paths) == ["t_demo.csv", "t_demo.md", "t_demo.tex"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(p.name for p in paths)
    md = (tmp_path / "out" / "t_demo.md").read_text(encoding="utf-8")
    assert md.startswith("# Demo table") and "Synthetic." in md
    assert "Generated 2025-01-01T00:00:00+00:00 from 1 run record(s) (1 loaded) by `coda-exp tables`." in md
    assert "make_tables" not in md  # the script is a thin wrapper of coda-exp tables
    tex = (tmp_path / "out" / "t_demo.tex").read_text(encoding="utf-8")
    assert "run record(s) by coda-exp tables" in tex and "make_tables" not in tex


def test_tables_regenerated_from_the_same_records_are_left_as_they_are(spec, tmp_path):
    """make tables on a clean clone rewrote every table with only its Generated time changed: git dirty for nothing."""
    out = tmp_path / "out"
    record = rec()
    first = write_tables([spec.path], [record], out, generated="2025-01-01T00:00:00+00:00")
    before = {p: p.read_bytes() for p in first}
    again = write_tables([spec.path], [record], out, generated="2026-06-01T12:00:00+00:00")
    assert again == first and {p: p.read_bytes() for p in again} == before  # same content: not rewritten
    changed = write_tables([spec.path], [rec(metrics={"test/acc": 0.5})], out, generated="2026-06-01T12:00:00+00:00")
    md = changed[[p.suffix for p in changed].index(".md")].read_text(encoding="utf-8")
    assert "Generated 2026-06-01T12:00:00+00:00 from" in md and "50.00" in md  # new content: a new time


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("task: snli, ", "", r"columns\[0\]: missing key 'task'"),
        ("metric: test/acc, ", "", r"columns\[0\]: missing key 'metric'"),
        ("paper: [84.61, null]", "paper: [84.61]", r"rows\[0\]: key 'paper' has 1 values, expected 2"),
        ("paper: [84.61, null]", "paper: [84.61, x]", r"rows\[0\]: key 'paper'"),
        ('{name: "GA", match: null, ', '{name: "GA", ', r"rows\[3\]: missing key 'match'"),
        ("match: {model: decompatt}", "match: {}", r"rows\[0\]: key 'match'"),
        ("paper: coda", "paper: bert", r"key 'paper' must be one of"),
        ("percent: true}", "percent: yes_please}", r"key 'percent'"),
        ("notes:", "nots:", r"unknown key"),
        ("id: t_demo", "id: other", r"key 'id'"),
        ("split: val", "split: val/x", r"key 'split'"),
        ('name: "centred"', 'name: "GA"', r"duplicate row name"),
    ],
)
def test_spec_validation_names_file_and_key(tmp_path, old, new, message):
    assert old in SPEC_YAML
    path = tmp_path / "t_demo.yaml"
    path.write_text(SPEC_YAML.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(ValueError, match=message) as err:
        load_table_spec(path)
    assert str(path) in str(err.value)


# ---- significance rows (compare) -----------------------------------------------------------------------

COMPARE_YAML = SPEC_YAML + 'compare:\n  - ["D-ATT", "D-ATT + CoDA"]\n'


def _write_predictions(path, correct):
    import gzip
    import json

    with gzip.open(path, "wt", encoding="utf-8") as f:
        for i, ok in enumerate(correct):
            f.write(json.dumps({"index": i, "label": 2, "prediction": 2 if ok else 0}) + "\n")
    return str(path)


def _compare_records(tmp_path, where="record"):
    """Three seeds of D-ATT and D-ATT + CoDA, each with 100 test predictions that give its recorded accuracy
    (coda_exp.record_checks): per seed the baseline's first ``a`` right, the treatment's the same but index 0 wrong
    and the next ``b - a + 1`` right: b = 1, c = 5, 6, 7 discordant pairs."""
    pred_dir = tmp_path / "predictions"
    pred_dir.mkdir(exist_ok=True)
    records = []
    for seed, (a, b) in enumerate([(80, 84), (81, 86), (79, 85)]):
        base = [i < a for i in range(100)]
        treat = [0 < i < b + 1 for i in range(100)]
        for model, acc, correct in (("decompatt", a / 100, base), ("decompatt_coda", b / 100, treat)):
            r = rec(model=model, seed=seed, metrics={"test/acc": acc})
            path = _write_predictions(pred_dir / f"{r['run_id']}.jsonl.gz", correct)
            r["predictions"] = path if where == "record" else str(tmp_path / "moved" / "x.jsonl.gz")
            records.append(r)
    return records, pred_dir


@pytest.mark.parametrize("where", ["record", "predictions_dir"])
def test_comparison_row_with_welch_and_paired_p(tmp_path, where):
    path = tmp_path / "t_demo.yaml"
    path.write_text(COMPARE_YAML, encoding="utf-8")
    spec = load_table_spec(path)
    assert spec.compare == [("D-ATT", "D-ATT + CoDA")]
    records, pred_dir = _compare_records(tmp_path, where)
    table = build_table(spec, records, predictions_dir=pred_dir if where == "predictions_dir" else None)
    # Welch on [80, 81, 79] vs [84, 86, 85]: t = 5 / sqrt(2/3) = 6.12, df = 4, p = 0.0036;
    # McNemar pooled over 3 seeds: b = 3, c = 18, p = 2 * P(Bin(21, 1/2) <= 3) = 3124/2^21 = 0.0015
    row = md_row(render_markdown(table), "Δ D-ATT + CoDA − D-ATT")
    assert row[1:3] == ["+1.10", "Δ = +5.00, p = 0.004 (Welch, n=3/3); paired p = 0.001 (McNemar, 3 seeds)"]
    assert row[3:5] == ["–", "no run"]
    csv_rows = [r for r in csv.DictReader(io.StringIO(render_csv(table))) if r["status"] == "delta"]
    assert len(csv_rows) == 1
    assert float(csv_rows[0]["mean"]) == pytest.approx(5.0) and float(csv_rows[0]["paper"]) == pytest.approx(1.1)
    assert float(csv_rows[0]["p_paired"]) == pytest.approx(3124 / 2 ** 21, rel=1e-3)  # 4 significant digits
    assert (csv_rows[0]["paired_b"], csv_rows[0]["paired_c"]) == ("3", "18")
    assert float(csv_rows[0]["p_welch"]) == pytest.approx(0.0036, 0.01)
    tex = render_latex(table)
    rows = [line for line in tex.splitlines() if line.endswith(r" \\")]
    assert tex.count(r"\midrule") == 2 and len(rows) == 2 + len(spec.rows) + 1
    assert rows[-1].endswith(r"& $+5.00^{**\ddagger\ddagger}$ & -- & -- \\")  # Welch p = 0.004: **; McNemar 0.0015


def test_comparison_without_predictions_or_spread(tmp_path):
    path = tmp_path / "t_demo.yaml"
    path.write_text(COMPARE_YAML, encoding="utf-8")
    spec = load_table_spec(path)
    records = [rec(model="decompatt", seed=0, metrics={"test/acc": 0.8}),
               rec(model="decompatt_coda", seed=0, metrics={"test/acc": 0.83})]
    row = md_row(render_markdown(build_table(spec, records)), "Δ D-ATT + CoDA − D-ATT")
    assert row[2] == "Δ = +3.00 (n=1/1: no Welch test)"
    records.append(rec(model="decompatt_coda", seed=1, scale="paper", metrics={"test/acc": 0.83}))
    row = md_row(render_markdown(build_table(spec, records)), "Δ D-ATT + CoDA − D-ATT")
    assert row[2] == "scales differ (cpu vs paper)"


@pytest.mark.parametrize("pair, message", [
    ('["D-ATT", "nope"]', r"compare\[0\]: \['nope'\]"),
    ('["D-ATT", "GA"]', r"compare\[0\]: \['GA'\]"),
    ('["D-ATT", "D-ATT"]', r"two different rows"),
    ('"D-ATT"', r"compare\[0\]: expected"),
])
def test_compare_validation(tmp_path, pair, message):
    path = tmp_path / "t_demo.yaml"
    path.write_text(SPEC_YAML + f"compare:\n  - {pair}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load_table_spec(path)


def test_shipped_compare_pairs(shipped):
    assert shipped["table_2"].compare == [("D-ATT", "D-ATT + CoDA")]
    assert shipped["table_3"].compare == [("D-ATT", "D-ATT + CoDA")]
    assert [b for _, b in shipped["table_8"].compare] == ["tanh(E′) · sigmoid(N)", "tanh(E′) · sigmoid(N′)"]
