"""scripts/mlu_breakdown.py: per-operation MLU accuracy recounted from saved test predictions."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.results.records import mlu_rec

N, SEED = 60, 1234


@pytest.fixture
def breakdown(load_script):
    return load_script("mlu_breakdown")


def write_run(folder, record, exact):
    """A results folder's runs/<id>.json and predictions/<id>.jsonl.gz; exact(op) says which answers are right."""
    from coda_exp.data.seq2seq.mlu import MLUStream

    (folder / "runs").mkdir(parents=True, exist_ok=True)
    (folder / "predictions").mkdir(exist_ok=True)
    rows = [{"index": ex["index"], "exact": exact(ex["src"].rsplit(",", 1)[1][1]), "reference": ex["tgt"],
             "hypothesis": ex["tgt"]} for ex in MLUStream("test", num_examples=N, seed=SEED, shard=(0, 1))]
    record = {**record, "data": {"source": "generated", "test_examples": N, "data_seed": SEED}}
    record["metrics"] = {**record["metrics"], "test/acc_seq": sum(r["exact"] for r in rows) / N}
    (folder / "runs" / f"{record['run_id']}.json").write_text(json.dumps(record))
    with gzip.open(folder / "predictions" / f"{record['run_id']}.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return record


def test_accuracy_is_counted_per_operation_and_averaged_over_seeds(breakdown, tmp_path, capsys):
    write_run(tmp_path, mlu_rec("transformer", seed=1), lambda op: op == "+")
    write_run(tmp_path, mlu_rec("transformer", seed=2), lambda op: op != "*")
    write_run(tmp_path, mlu_rec(seed=1, options={"center_n": True}), lambda op: False)
    out = tmp_path / "by_operation.md"
    assert breakdown.main(["--runs", str(tmp_path), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| cpu | transformer | 2 | **100.0** (100.0 / 100.0) | **50.0** (0.0 / 100.0) | **0.0** (0.0 / 0.0) |" in text
    assert "| cpu | coda_transformer[center_n=true] | 1 | 0.0 | 0.0 | 0.0 | 0.0 |" in text
    ops = [breakdown.operation(s) for s in breakdown.test_sources(N, SEED)]
    assert set(ops) == {"+", "-", "*"}  # the fixture's 60 examples hold every operation


def test_a_recount_that_disagrees_with_the_record_stops_the_table(breakdown, tmp_path, capsys):
    record = write_run(tmp_path, mlu_rec("transformer"), lambda op: op == "+")
    record["metrics"]["test/acc_seq"] = 0.99
    (tmp_path / "runs" / f"{record['run_id']}.json").write_text(json.dumps(record))
    assert breakdown.main(["--runs", str(tmp_path), "--out", str(tmp_path / "t.md")]) == 1
    err = capsys.readouterr().err
    assert record["run_id"] in err and "record says 0.990000" in err and not (tmp_path / "t.md").exists()
    record["data"]["source"] = "files"
    (tmp_path / "runs" / f"{record['run_id']}.json").write_text(json.dumps(record))
    assert breakdown.main(["--runs", str(tmp_path), "--out", str(tmp_path / "t.md")]) == 1
    assert "needs generated MLU data" in capsys.readouterr().err
