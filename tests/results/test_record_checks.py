"""A record that contradicts itself or its test predictions is listed under the table, never pooled
(coda_exp.record_checks); the committed records pass."""

from __future__ import annotations

import gzip
import json

import pytest

from coda_exp.record_checks import InconsistentRecordWarning, predictions_file, record_problem
from coda_exp.results import load_records
from coda_exp.table_render import render_markdown
from coda_exp.tables import build_table
from tests import ROOT
from tests.results.records import TODAYS_GRID, cell, rec


def predictions(folder, record, right, wrong):
    folder.mkdir(exist_ok=True)
    rows = [{"index": i, "label": 1, "prediction": 1 if i < right else 0} for i in range(right + wrong)]
    with gzip.open(folder / f"{record['run_id']}.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def test_fixture_data_under_a_real_data_scale_is_listed_apart(spec):
    edited = rec(scale="paper", fixture_data=True, metrics={"test/acc": 0.99}, **TODAYS_GRID)
    honest = [rec(scale="fixture", fixture_data=True, seed=1, **TODAYS_GRID),
              rec(scale="quickstart", fixture_data=True, seed=2, **TODAYS_GRID)]
    with pytest.warns(InconsistentRecordWarning, match="its scale says 'paper' but it read the tiny fixtures"):
        table = build_table(spec, [edited, *honest])
    c = cell(table, "D-ATT + CoDA", "SNLI")
    assert edited["run_id"] not in c.run_ids and c.scale == "fixture"  # quickstart: another scale, listed apart
    assert "Not pooled, its scale says 'paper' but it read the tiny fixtures" in render_markdown(table)
    assert record_problem(rec(scale="cpu (task.epochs=2)", fixture_data=True)) is not None
    assert record_problem(rec(scale="paper", fixture_data=False)) is None
    assert record_problem(rec(scale="paper")) is None  # an older record without fixture_data


def test_a_metric_its_predictions_contradict_is_listed_apart(spec, tmp_path):
    folder = tmp_path / "predictions"
    edited = rec(seed=1, metrics={"test/acc": 0.99}, **TODAYS_GRID)
    honest = rec(seed=2, metrics={"test/acc": 0.8260869383811951}, **TODAYS_GRID)  # float32, as torchmetrics gives
    predictions(folder, edited, 19, 4)
    predictions(folder, honest, 19, 4)
    with pytest.warns(InconsistentRecordWarning, match=r"its test/acc 0.9900 is not what its test predictions give "
                                                       r"\(0.8261 over 23 in "):
        table = build_table(spec, [edited, honest], predictions_dir=folder)
    c = cell(table, "D-ATT + CoDA", "SNLI")
    assert c.run_ids == [honest["run_id"]] and c.ours_text() == "82.61 (n=1, cpu)"
    assert [run["run_id"] for run in c.off_grid] == [edited["run_id"]]
    assert predictions_file(rec(), folder) is None  # no predictions: nothing to check
    assert build_table(spec, [edited]).cells[1][0].run_ids == [edited["run_id"]]  # without its predictions folder


def test_a_record_whose_checksum_held_is_not_read_again_from_its_predictions(tmp_path, monkeypatch):
    """Its metrics came from these predictions when the run wrote it (any edit since breaks the checksum, and the
    record is skipped when read): a paper-scale predictions file read at every make tables would check nothing."""
    from coda_exp import record_checks
    from coda_exp.results import CHECKSUM_KEY, record_checksum

    record = rec(metrics={"test/acc": 0.5}, **TODAYS_GRID)
    predictions(tmp_path, record, 19, 4)
    assert "is not what its test predictions give" in record_problem(record, tmp_path)  # no checksum: read
    record[CHECKSUM_KEY] = record_checksum(record)
    monkeypatch.setattr(record_checks, "metric_problem", lambda *a: pytest.fail("its predictions were read"))
    assert record_problem(record, tmp_path) is None


def test_every_committed_record_passes_the_checks():
    checked = 0
    for runs in sorted(ROOT.glob("results/**/runs")):
        for record in load_records(runs, strict=True):
            assert record_problem(record, runs.parent / "predictions") is None, record["run_id"]
            checked += predictions_file(record, runs.parent / "predictions") is not None
    assert checked >= 70  # their predictions are committed beside them and were read
