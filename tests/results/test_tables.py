"""Tables from run records: selection, statistics, formatting, spec validation, the shipped specs, the CLI."""

from __future__ import annotations

import csv
import io
import itertools
from pathlib import Path

import pytest

from coda_exp.results import write_record
from coda_exp.table_render import render_csv, render_latex, render_markdown, write_tables
from coda_exp.tables import NO_RUN, NOT_RUN, build_table, choose_scale, find_specs, load_table_spec

ROOT = Path(__file__).resolve().parents[2]
SPEC_DIR = ROOT / "configs" / "tables"
_counter = itertools.count()

SPEC_YAML = """\
id: t_demo
title: "Demo table_x & 100%"
paper: coda
notes: "Synthetic."
columns:
  - {name: "SNLI", task: snli, metric: test/acc, percent: true}
  - {name: "BLEU", task: iwslt15_envi, metric: test/bleu, match: {model: coda_transformer}}
rows:
  - {name: "D-ATT", match: {model: decompatt}, paper: [84.61, null]}
  - {name: "D-ATT + CoDA", match: {model: decompatt_coda}, paper: [85.71, 29.84]}
  - {name: "centred", match: {model: decompatt_coda, attention.center_e: true}, paper: [85.0, 27.3]}
  - {name: "GA", match: null, paper: [77.7, 26.1]}
  - {name: "dev CoDA", split: val, match: {model: decompatt_coda}, paper: [86.1, 27.8]}
"""


def rec(task="snli", model="decompatt_coda", seed=0, scale="cpu", metrics=None, center_e=False, **extra):
    n = next(_counter)
    record = {
        "schema_version": 1,
        "run_id": f"run-{n:04d}",
        "task": task,
        "model": model,
        "attention": ({"name": "softmax"} if model == "decompatt" else
                      {"name": "coda", "e_fn": "tanh", "n_fn": "sigmoid", "center_e": center_e, "center_n": False,
                       "gate_scale": 2.0, "scale": True}),
        "seed": seed,
        "scale": scale,
        "metrics": metrics if metrics is not None else {"test/acc": 0.85},
        "steps": 10,
        "epochs": 1,
        "wall_time_s": 1.0,
        "device": "cpu",
        "git_commit": None,
        "overrides": [],
        "created": f"2025-01-01T00:{n // 60 % 60:02d}:{n % 60:02d}+00:00",
    }
    record.update(extra)
    return record


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "t_demo.yaml"
    path.write_text(SPEC_YAML, encoding="utf-8")
    return load_table_spec(path)


def cell(table, row, column):
    i = [r.name for r in table.spec.rows].index(row)
    j = [c.name for c in table.spec.columns].index(column)
    return table.cells[i][j]


def md_row(markdown, name):
    for line in markdown.splitlines():
        parts = [p.strip() for p in line.strip().strip("|").split("|")]
        if parts[0] == name:
            return parts
    raise AssertionError(f"row {name!r} not in markdown")


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
        rec(task="iwslt15_envi", model="coda_transformer", seed=s, metrics={"test/bleu": b, "val/bleu": 27.0})
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
    assert float(first["mean"]) == pytest.approx(86.0)
    assert float(first["std"]) == pytest.approx(1.41421356)
    assert (first["n"], first["scale"], first["paper"], first["metric"]) == ("2", "cpu", "85.71", "test/acc")
    assert first["run_ids"].count(";") == 1


def test_write_tables_writes_md_tex_csv(spec, tmp_path):
    paths = write_tables([spec.path], [rec()], tmp_path / "out", generated="2025-01-01T00:00:00+00:00")
    assert sorted(p.name for p in paths) == ["t_demo.csv", "t_demo.md", "t_demo.tex"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(p.name for p in paths)
    md = (tmp_path / "out" / "t_demo.md").read_text(encoding="utf-8")
    assert md.startswith("# Demo table") and "Synthetic." in md
    assert "Generated 2025-01-01T00:00:00+00:00 from 1 run record(s)" in md


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


# ---- the shipped specs ---------------------------------------------------------------------------

EXPECTED_IDS = {f"table_{i}" for i in range(1, 10)} | {f"attconv_table_{i}" for i in (3, 5, 7, 9)}

# (table id, row name) -> the paper's numbers for that row, copied from SPEC.md.
PAPER_ROWS = {
    ("table_1", "GA"): [26.4, 26.4, None, None],
    ("table_1", "DecaProp + CoDA"): [41.3, 49.7, 57.2, 63.9],
    ("table_2", "D-ATT"): [80.6, 83.9, 66.4, 68.0, 51.8],
    ("table_2", "D-ATT + CoDA"): [80.0, 84.5, 70.5, 72.4, 52.5],
    ("table_3", "D-ATT"): [84.61, 71.34, 71.97, 82.0, 88.2],
    ("table_3", "D-ATT + CoDA"): [85.71, 72.19, 72.45, 83.6, 88.8],
    ("table_4", "Luong & Manning (2015)"): [23.30],
    ("table_4", "CoDA Transformer"): [29.84],
    ("table_5", "CoDA Transformer"): [83.3, 80.6],
    ("table_6", "CoDA Transformer"): [84.3],
    ("table_7", "Transformer"): [96.8, None],  # execution accuracy: ours only
    ("table_8", "tanh(E′) · sigmoid(N)"): [26.9, 68.1, 68.3, 84.5, 86.8],
    ("table_9", "sigmoid · arctan"): [25.1],
    ("table_9", "tanh · algebraic"): [26.1],
    ("attconv_table_3", "AttConv advanced"): [67.36],
    ("attconv_table_5", "AttConv light w/o convolution"): [75.1],
    ("attconv_table_7", "AttConv advanced (900K)"): [87.8],
    ("attconv_table_9", "dev: AttConv advanced, context-conc"): [62.26, 39.44, 86.02],
    ("attconv_table_9", "test: Thorne et al. (2018)"): [50.91, 31.87, None],
}
ROW_COUNTS = {
    "table_1": 7,
    "table_2": 2,
    "table_3": 2,
    "table_4": 6,
    "table_5": 2,
    "table_6": 3,
    "table_7": 4,
    "table_8": 3,
    "table_9": 8,
    "attconv_table_3": 12,
    "attconv_table_5": 14,
    "attconv_table_7": 18,
    "attconv_table_9": 14,
}


@pytest.fixture(scope="module")
def shipped():
    return {p.stem: load_table_spec(p) for p in find_specs(SPEC_DIR)}


def test_every_shipped_spec_loads(shipped):
    assert set(shipped) == EXPECTED_IDS
    for spec_id, spec in shipped.items():
        assert len(spec.rows) == ROW_COUNTS[spec_id], spec_id
        assert any(row.match is not None for row in spec.rows), spec_id
        assert spec.paper == ("attconv" if spec_id.startswith("attconv") else "coda")


@pytest.mark.parametrize("key", sorted(PAPER_ROWS, key=str))
def test_shipped_paper_numbers_match_spec_md(shipped, key):
    spec_id, row_name = key
    row = next(r for r in shipped[spec_id].rows if r.name == row_name)
    assert row.paper == PAPER_ROWS[key]


def test_shipped_selection_details(shipped):
    t8 = shipped["table_8"]
    assert t8.columns[0].match == {"model": "coda_transformer", "attention.gate_scale": None}
    assert t8.columns[0].metric == "val/bleu_tok"
    # the row's own f_N(N) gate: 2·sigmoid(N) uncentred (eq. 5), sigmoid(N′) as printed when N is centred
    assert [(r.match["attention.center_e"], r.match["attention.center_n"], r.match["attention.gate_scale"])
            for r in t8.rows] == [(False, False, 2.0), (True, False, 2.0), (True, True, 1.0)]
    assert all(c.metric.startswith("val/") for c in t8.columns)
    t9 = shipped["table_9"]
    assert all(not r.match["attention.center_e"] and not r.match["attention.center_n"] for r in t9.rows)
    assert t9.columns[0].metric == "val/bleu_tok" and shipped["table_4"].columns[0].metric == "test/bleu_tok"
    assert {(r.match["attention.e_fn"], r.match["attention.n_fn"]) for r in t9.rows} == {
        (e, n) for e in ("tanh", "sigmoid") for n in ("sigmoid", "tanh", "arctan", "algebraic")
    }
    fever = shipped["attconv_table_9"]
    assert [c.metric for c in fever.columns] == ["test/acc", "test/fever_score", "test/acc_gold"]
    assert all((r.split == "val") == r.name.startswith("dev:") for r in fever.rows)
    assert not shipped["table_4"].columns[0].percent and shipped["table_3"].columns[0].percent
    assert shipped["table_4"].decimals(0) == 2 and shipped["table_2"].decimals(0) == 1


def test_shipped_table_3_from_records(shipped):
    records = [rec(seed=s, metrics={"test/acc": a}) for s, a in enumerate([0.855, 0.857, 0.859])]
    table = build_table(shipped["table_3"], records)
    row = md_row(render_markdown(table), "D-ATT + CoDA")
    assert row[1:3] == ["85.71", "85.70 ± 0.20 (n=3, cpu)"]
    assert row[3:5] == ["72.19", NO_RUN]


# ---- the CLI -------------------------------------------------------------------------------------


@pytest.fixture
def cli(load_script):
    return load_script("make_tables")


def test_cli_writes_tables(tmp_path, capsys, cli):
    runs = tmp_path / "runs"
    for s, a in enumerate([0.85, 0.86, 0.87]):
        write_record(rec(seed=s, metrics={"test/acc": a}, run_id=f"cli-{s}"), runs)
    out = tmp_path / "tables"
    code = cli.main(["--runs", str(runs), "--out", str(out), "--tables", "table_3", "table_9", "--print"])
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{t}.{ext}" for t in ("table_3", "table_9") for ext in ("md", "tex", "csv")
    )
    printed = capsys.readouterr().out
    assert str(out / "table_3.md") in printed
    assert "86.00 ± 1.00 (n=3, cpu)" in printed and "# Table 9" in printed


def test_cli_all_tables_and_unknown_id(tmp_path, capsys, cli):
    assert cli.main(["--runs", str(tmp_path / "none"), "--out", str(tmp_path / "all")]) == 0
    assert len(list((tmp_path / "all").glob("*.md"))) == len(EXPECTED_IDS)
    assert cli.main(["--out", str(tmp_path / "x"), "--tables", "table_42"]) == 2
    assert "table_42" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


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
    pred_dir = tmp_path / "predictions"
    pred_dir.mkdir(exist_ok=True)
    base = [True] * 8 + [False] * 2
    treat = [True] * 7 + [False] + [True] * 2  # per seed: b = 1 (index 7), c = 2 (indices 8, 9)
    records = []
    for seed, (a, b) in enumerate([(0.80, 0.84), (0.81, 0.86), (0.79, 0.85)]):
        for model, acc, correct in (("decompatt", a, base), ("decompatt_coda", b, treat)):
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
    # McNemar pooled over 3 seeds: b = 3, c = 6, p = 2 * P(Bin(9, 1/2) <= 3) = 260/512 = 0.51
    row = md_row(render_markdown(table), "Δ D-ATT + CoDA − D-ATT")
    assert row[1:3] == ["+1.10", "Δ = +5.00, p = 0.004 (Welch, n=3/3); paired p = 0.51 (McNemar, 3 seeds)"]
    assert row[3:5] == ["–", "no run"]
    csv_rows = [r for r in csv.DictReader(io.StringIO(render_csv(table))) if r["status"] == "delta"]
    assert len(csv_rows) == 1
    assert float(csv_rows[0]["mean"]) == pytest.approx(5.0) and float(csv_rows[0]["paper"]) == pytest.approx(1.1)
    assert float(csv_rows[0]["p_paired"]) == pytest.approx(260 / 512)
    assert csv_rows[0]["paired_discordant"] == "3/6" and float(csv_rows[0]["p_welch"]) == pytest.approx(0.0036, 0.01)
    tex = render_latex(table)
    assert tex.count(r"\midrule") == 2 and tex.count(r"\\") == 2 + len(spec.rows) + 1


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
