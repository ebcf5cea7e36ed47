"""The shipped table specs (configs/tables): they load, hold the paper's numbers, select as intended; the CLI."""

from __future__ import annotations

import pytest

from coda_exp.results import write_record
from coda_exp.table_render import render_markdown
from coda_exp.tables import NO_RUN, build_table
from tests.results.records import md_row, mlu_rec, rec

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
    ("attconv_table_7", "AttConv advanced"): [87.8],
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
    "attconv_table_3": 13,  # + "AttConv light + CoDA (ours)"
    "attconv_table_5": 15,
    "attconv_table_7": 19,
    "attconv_table_9": 17,  # + dev and test "AttConv light + CoDA, context-conc (ours)", test light conc (ours)
}


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
    assert t8.columns[0].metric == "val/bleu_t2t"  # t2t-bleu: the paper's metric (coda_exp.metrics.bleu)
    # the row's own f_N(N) gate: 2·sigmoid(N) uncentred (eq. 5), sigmoid(N′) as printed when N is centred
    assert [(r.match["attention.center_e"], r.match["attention.center_n"], r.match["attention.gate_scale"])
            for r in t8.rows] == [(False, False, 2.0), (True, False, 2.0), (True, True, 1.0)]
    assert all(c.metric.startswith("val/") for c in t8.columns)
    t9 = shipped["table_9"]
    assert all(not r.match["attention.center_e"] and not r.match["attention.center_n"] for r in t9.rows)
    assert t9.columns[0].metric == "val/bleu_t2t" and shipped["table_4"].columns[0].metric == "test/bleu_t2t"
    assert {(r.match["attention.e_fn"], r.match["attention.n_fn"]) for r in t9.rows} == {
        (e, n) for e in ("tanh", "sigmoid") for n in ("sigmoid", "tanh", "arctan", "algebraic")
    }
    fever = shipped["attconv_table_9"]
    assert [c.metric for c in fever.columns] == ["test/acc", "test/fever_score", "test/acc"]  # gold: gold runs
    assert [c.match for c in fever.columns] == [{"data.evidence": e} for e in ("retrieved", "retrieved", "gold")]
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
def cli():
    """``coda-exp tables`` (``scripts/make_tables.py`` in a checkout)."""
    from coda_exp.tools import tables

    return tables


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


def test_cli_writes_beside_the_runs_it_reads(tmp_path, monkeypatch, capsys, cli):
    """--out follows --runs: fixture records (outputs/fixture_results) never overwrite the committed
    results/tables; the default --runs (results/runs) still writes results/tables."""
    monkeypatch.setenv("CODA_EXP_ROOT", str(tmp_path / "root"))
    committed = tmp_path / "root" / "results" / "tables" / "table_3.md"
    committed.parent.mkdir(parents=True)
    committed.write_text("the committed table\n")
    fixture = tmp_path / "root" / "outputs" / "fixture_results"
    write_record(rec(seed=1, scale="fixture", metrics={"test/acc": 0.85}, run_id="fx-1"), fixture / "runs")
    assert cli.main(["--runs", str(fixture), "--tables", "table_3"]) == 0
    assert committed.read_text() == "the committed table\n"
    assert (fixture / "tables" / "table_3.md").is_file() and (fixture / "tables" / "table_3.csv").is_file()
    assert cli.main(["--runs", str(fixture / "runs"), "--tables", "table_2"]) == 0  # its runs/ itself: the same
    assert (fixture / "tables" / "table_2.md").is_file()
    write_record(rec(seed=1, metrics={"test/acc": 0.85}, run_id="cpu-1"), tmp_path / "root" / "results" / "runs")
    assert cli.main(["--tables", "table_3"]) == 0  # the defaults: results/runs -> results/tables
    assert "85.00 (n=1, cpu)" in committed.read_text()


def test_cli_reads_a_results_folder_from_its_runs(tmp_path, capsys, cli):
    """--runs results/ (runs/ and predictions/ inside, as plot-curves takes it): its runs/, said so; not 0 records."""
    for s, a in enumerate([0.85, 0.86, 0.87]):
        write_record(rec(seed=s, metrics={"test/acc": a}, run_id=f"res-{s}"), tmp_path / "results" / "runs")
    (tmp_path / "results" / "predictions").mkdir()
    out = tmp_path / "tables"
    assert cli.main(["--runs", str(tmp_path / "results"), "--out", str(out), "--tables", "table_3", "--print"]) == 0
    captured = capsys.readouterr()
    assert "86.00 ± 1.00 (n=3, cpu)" in captured.out
    assert f"a results folder: reading its runs/ ({tmp_path / 'results' / 'runs'})" in captured.err
    assert "and 3 run record(s)" in captured.err
    assert cli.main(["--runs", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert "no such folder of run records" in capsys.readouterr().err
    record = next((tmp_path / "results" / "runs").glob("*.json"))  # a record given for its folder
    assert cli.main(["--runs", str(record), "--out", str(out)]) == 2
    assert f"--runs {record}: a file, not a folder; expected the folder of run records (results/runs, or a results " \
           f"folder with runs/ inside, e.g. {record.parent}; nothing was written)" in capsys.readouterr().err
    for given, what in ((tmp_path / "nowhere", "no such folder"), (record, "a file, not a folder")):  # accepted once
        assert cli.main(["--runs", str(tmp_path / "results"), "--out", str(out), "--predictions", str(given)]) == 2
        assert f"--predictions {given}: {what}; expected the folder of test predictions" in capsys.readouterr().err


def test_cli_all_tables_and_unknown_id(tmp_path, capsys, cli):
    """Every table: those no record fills are named as skipped, not written as all-`no run` files; a table named
    with --tables is written even so."""
    (tmp_path / "none").mkdir()
    assert cli.main(["--runs", str(tmp_path / "none"), "--out", str(tmp_path / "all")]) == 0
    assert not (tmp_path / "all").exists() or not list((tmp_path / "all").iterdir())
    assert f"skipped {len(EXPECTED_IDS)} table(s) without any run" in capsys.readouterr().err
    write_record(rec(seed=1, metrics={"test/acc": 0.85}, run_id="snli-1"), tmp_path / "some")  # Table 3's SNLI
    write_record(mlu_rec(model="transformer", status="diverged", diverged_at_step=5, metrics={}, run_id="mlu-1"),
                 tmp_path / "some")  # a diverged run is listed under Table 6: it is written
    assert cli.main(["--runs", str(tmp_path / "some"), "--out", str(tmp_path / "all")]) == 0
    written = {p.stem for p in (tmp_path / "all").glob("*.md")}
    assert {"table_3", "table_6"} <= written and "table_8" not in written and "attconv_table_5" not in written
    assert "table_8" in capsys.readouterr().err.split("without any run", 1)[1]
    assert cli.main(["--runs", str(tmp_path / "none"), "--out", str(tmp_path / "named"), "--tables", "table_8"]) == 0
    assert (tmp_path / "named" / "table_8.md").is_file()
    assert cli.main(["--out", str(tmp_path / "x"), "--tables", "table_42"]) == 2
    assert "table_42" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
