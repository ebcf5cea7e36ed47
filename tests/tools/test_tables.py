"""coda-exp tables: which tables it writes and what it says of each, a table whose only runs are listed apart under
it (another configuration, an evaluation, a diverged run, a record contradicting itself) included."""

from __future__ import annotations

import pytest

from coda_exp.fingerprint import FINGERPRINT_RULE, fingerprint
from coda_exp.record_checks import InconsistentRecordWarning
from coda_exp.results import write_record
from coda_exp.tables import UnknownFingerprintWarning
from coda_exp.tools import tables
from tests.results.records import TODAYS_GRID, md_row, rec

WIKIQA = {"test/map": 0.6, "test/mrr": 0.7}


def wikiqa(model, *overrides, **kw):
    """A WikiQA record (Table 2's columns) of ``model`` run with ``overrides``, fingerprinted under today's rule."""
    kw.setdefault("metrics", dict(WIKIQA))
    record = rec(task="wikiqa", model=model,
                 overrides=["task=wikiqa", f"model={model}", *overrides], fingerprint_rule=FINGERPRINT_RULE, **kw)
    record["fingerprint"] = fingerprint(record["overrides"])
    return record


def notes(markdown):
    return [line for line in markdown.splitlines() if line.startswith("- Not pooled")]


@pytest.mark.parametrize("model,override,row", [
    ("decompatt", "optimizer.lr=0.01", "D-ATT"),  # the row's match holds: the cell lists it apart
    # the row's match fails (an attention option no row takes): listed under the row of its model; was skipped
    ("decompatt_coda", "model.attention.e_fn=sigmoid", "D-ATT + CoDA"),
])
def test_a_table_of_runs_of_another_configuration_only_is_written_and_said(tmp_path, capsys, model, override, row):
    runs, out = tmp_path / "runs", tmp_path / "tables"
    off = wikiqa(model, override, seed=1, run_id="off-1")
    if model == "decompatt_coda":
        off["attention"]["e_fn"] = "sigmoid"
    write_record(off, runs)
    write_record(rec(seed=1, run_id="snli-1", **TODAYS_GRID), runs)  # Table 3 pools it: no line of its own
    assert tables.main(["--runs", str(runs), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert {p.stem for p in out.glob("*.md")} == {"table_2", "table_3"}
    assert "table_2" not in err.split("without any run", 1)[1].splitlines()[0]  # not among the skipped
    assert ("table_2: no run fits its grid: every cell says `no run`; 1 run(s) listed apart under the table (1 of "
            "another configuration; its notes say why)") in err.splitlines()
    assert "table_3:" not in err
    md = (out / "table_2.md").read_text(encoding="utf-8")
    assert set(md_row(md, row)[2::2]) == {"no run"}  # ours in every column
    assert notes(md) == [f"- Not pooled, another configuration: {row} / WikiQA MAP, WikiQA MRR: seed 1 (cpu) with "
                         + f"{override} (off-1)"]
    assert "off-1" in (out / "table_2.tex").read_text(encoding="utf-8")


@pytest.mark.parametrize("extra,reason,warning", [
    ({"mode": "eval"}, "an evaluation of a checkpoint of an unknown run", None),
    ({"scale": "paper", "fixture_data": True}, "its scale says 'paper' but it read the tiny fixtures",
     InconsistentRecordWarning),
    ({"status": "diverged", "diverged_at_step": 5, "metrics": {}}, "diverged at step 5", None),
])
def test_a_table_of_runs_listed_apart_for_another_reason_is_written_alike(tmp_path, capsys, extra, reason, warning):
    runs, out = tmp_path / "runs", tmp_path / "tables"
    write_record(wikiqa("decompatt", seed=2, run_id="apart-2", **extra), runs)
    if warning:
        with pytest.warns(warning, match="table_2: run apart-2 is not pooled"):
            assert tables.main(["--runs", str(runs), "--out", str(out)]) == 0
    else:
        assert tables.main(["--runs", str(runs), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert [p.stem for p in out.glob("*.md")] == ["table_2"]
    assert ("table_2: no run is pooled: every cell says `no run`; 1 run(s) listed apart under the table (1 not "
            "pooled for another reason; its notes say why)") in err.splitlines()
    md = (out / "table_2.md").read_text(encoding="utf-8")
    assert set(md_row(md, "D-ATT")[2::2]) == {"no run"}
    [note] = notes(md)
    assert note.startswith(f"- Not pooled, {reason}") and note.endswith("(apart-2)")


def test_a_diverged_run_of_a_configuration_no_row_takes_is_listed_under_its_models_row(tmp_path, capsys):
    """A diverged run has no test metrics, and one of an attention option no row matches (e_fn=sigmoid) was dropped
    without a word: neither a cell (no row's match) nor the rows' other-configuration notes (finished runs only)."""
    runs, out = tmp_path / "runs", tmp_path / "tables"
    off = wikiqa("decompatt_coda", "model.attention.e_fn=sigmoid", seed=3, run_id="nan-3", status="diverged",
                 diverged_at_step=7, metrics={})
    off["attention"]["e_fn"] = "sigmoid"
    write_record(off, runs)
    assert tables.main(["--runs", str(runs), "--out", str(out)]) == 0
    assert "table_2: no run is pooled" in capsys.readouterr().err
    md = (out / "table_2.md").read_text(encoding="utf-8")
    assert notes(md) == [("- Not pooled, diverged at step 7: D-ATT + CoDA / WikiQA MAP, WikiQA MRR: seed 3 (cpu) "
                          "with model.attention.e_fn=sigmoid (nan-3)")]


def test_a_named_table_of_no_run_says_so_and_no_run_at_all_is_still_skipped(tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    assert tables.main(["--runs", str(runs), "--out", str(tmp_path / "all")]) == 0
    err = capsys.readouterr().err
    assert not (tmp_path / "all").exists() and "no run of its cells" not in err  # one skipped line, not 13
    assert tables.main(["--runs", str(runs), "--out", str(tmp_path / "named"), "--tables", "table_8"]) == 0
    err = capsys.readouterr().err
    assert err.splitlines()[0] == f"table_8: no run of its cells in {runs}: every cell says `no run`"
    assert (tmp_path / "named" / "table_8.md").is_file()


def test_only_the_tables_written_warn(tmp_path):
    """Every table is built to learn whether it lists a run; a table left out gives no warning: a record without a
    fingerprint is named by Table 2, which pools it, not by the twelve others."""
    runs = tmp_path / "runs"
    write_record(rec(task="wikiqa", model="decompatt", metrics=dict(WIKIQA), run_id="old-1"), runs)
    with pytest.warns(UnknownFingerprintWarning) as caught:
        assert tables.main(["--runs", str(runs), "--out", str(tmp_path / "tables")]) == 0
    messages = [str(w.message) for w in caught if issubclass(w.category, UnknownFingerprintWarning)]
    assert len(messages) == 1 and messages[0].startswith("table_2: 1 run record(s) carry no configuration fingerprint")


def test_a_table_of_runs_listed_apart_is_not_rewritten_for_its_time_alone(tmp_path, monkeypatch, capsys):
    """make tables over unchanged records leaves git clean, a table whose runs are all listed apart too."""
    runs, out = tmp_path / "runs", tmp_path / "tables"
    write_record(wikiqa("decompatt", "optimizer.lr=0.01", seed=1, run_id="off-1"), runs)
    monkeypatch.setattr(tables, "utc_now_iso", lambda: "2025-01-01T00:00:00+00:00")
    assert tables.main(["--runs", str(runs), "--out", str(out)]) == 0
    files = sorted(out.iterdir())
    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes()) for p in files}
    monkeypatch.setattr(tables, "utc_now_iso", lambda: "2026-06-01T12:00:00+00:00")
    assert tables.main(["--runs", str(runs), "--out", str(out)]) == 0
    assert [p.name for p in files] == ["table_2.csv", "table_2.md", "table_2.tex"]
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes()) for p in files} == before
    assert "Generated 2025-01-01T00:00:00+00:00 from 0 run record(s)" in (out / "table_2.md").read_text()
