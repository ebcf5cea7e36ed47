"""scripts/gate_ablation_table.py: the ablation table built from synthetic run records (seeds, Welch p, steps to a
validation threshold, final gate), and the script writing it."""

from __future__ import annotations

import json

import pytest
from scipy import stats

from tests.results.records import md_row, mlu_rec

STEPS = (100, 200, 300, 400)


@pytest.fixture
def table(load_script):
    return load_script("gate_ablation_table")


def gates(*layers):
    """gate_stats with one layer per (last mean, last fraction < 0.01), each measured twice."""
    return {f"encoder.layers.{i}.self_attn": {"steps": [50, 100], "mean": [0.9, mean], "frac_lt_0.01": [0.0, frac]}
            for i, (mean, frac) in enumerate(layers)}


def records():
    softmax = [mlu_rec("transformer", seed=1, acc=0.40, curve=(0.05, 0.12, 0.25, 0.35), steps=STEPS),
               mlu_rec("transformer", seed=2, acc=0.50, curve=(0.10, 0.20, 0.31, 0.40), steps=STEPS),
               mlu_rec("transformer", seed=3, acc=0.60, curve=(0.00, 0.05, 0.08, 0.09), steps=STEPS)]
    coda = [mlu_rec(seed=1, acc=0.10, curve=(0.0, 0.02, 0.05, 0.08), steps=STEPS, gate_stats=gates((0.4, 0.1),
                                                                                                  (0.6, 0.3))),
            mlu_rec(seed=2, acc=0.15, curve=(0.0, 0.01, 0.02, 0.03), steps=STEPS, gate_stats=gates((0.3, 0.0),
                                                                                                  (0.5, 0.2))),
            mlu_rec(seed=3, acc=0.20, curve=(0.0, 0.01, 0.02, 0.03), steps=None, gate_stats={})]  # older: no steps
    centred = [mlu_rec(seed=1, acc=0.99, options={"center_n": True}),  # superseded by the later run of seed 1
               mlu_rec(seed=1, acc=0.30, curve=(0.1, 0.3), steps=(500, 1000), options={"center_n": True})]
    longer = [mlu_rec(seed=1, acc=0.7, scale="cpu (task.max_steps=10000)")]
    no_metric = [mlu_rec("transformer", seed=4, metrics={"val/acc_seq": 0.1})]
    return softmax + coda + centred + longer + no_metric


def test_groups_seeds_p_values_thresholds_and_gates(table):
    sections = table.ablation_sections(records())
    assert [(s.task, s.scale) for s in sections] == [("mlu", "cpu"), ("mlu", "cpu (task.max_steps=10000)")]
    cpu = sections[0]
    assert [r.label for r in cpu.rows] == ["transformer", "coda_transformer", "coda_transformer[center_n=true]"]
    softmax, coda, centred = cpu.rows
    assert softmax.seeds == [1, 2, 3] and softmax.values == [0.4, 0.5, 0.6] and softmax.welch is None
    expected = stats.ttest_ind([0.10, 0.15, 0.20], [0.40, 0.50, 0.60], equal_var=False)
    assert coda.welch.p == pytest.approx(expected.pvalue, rel=1e-6)
    assert coda.welch.delta == pytest.approx(-0.35)
    assert centred.welch.p is None and centred.values == [0.30]  # one seed: no test; the later run of seed 1 counts
    # seeds 1 and 2 reach 10 % at steps 200 and 100, 30 % at 400 and 300; seed 3 never does
    assert softmax.reach[0.1].steps == [200, 100] and softmax.reach[0.1].text() == "150 (2/3 reached)"
    assert softmax.reach[0.3].text() == "350 (2/3 reached)"
    assert coda.reach[0.1].text() == "— (0/2 reached, 1 without steps)"
    assert coda.gate_mean == [pytest.approx(0.5), pytest.approx(0.4)] and coda.gate_closed == [
        pytest.approx(0.2), pytest.approx(0.1)]
    assert softmax.gate_mean == []
    assert any("superseded" in note for note in cpu.notes)
    assert any("without test/acc_seq" in note for note in cpu.notes)
    assert sections[1].rows[0].welch is None and "no reference group 'transformer'" in sections[1].notes[0]


def test_the_markdown_rows(table):
    md = table.build_markdown(records(), generated="2026-01-01T00:00:00+00:00")
    assert md.startswith("# Gate ablation: test/acc_seq") and "## mlu, scale cpu\n" in md
    assert md_row(md, "transformer")[:8] == ["transformer", "3", "50.00 ± 10.00", "s1: 40.00, s2: 50.00, s3: 60.00",
                                             "—", "—", "150 (2/3 reached)", "350 (2/3 reached)"]
    coda = md_row(md, "coda_transformer")
    assert coda[2] == "15.00 ± 5.00" and coda[4] == "-35.00" and coda[5] not in ("—", "")
    assert coda[-2:] == ["0.450 (2/3 seeds)", "15.0 %"]
    centred = md_row(md, "coda_transformer[center_n=true]")
    assert centred[1:3] == ["1", "30.00"] and centred[5] == "—" and centred[6:8] == ["500 (1/1 reached)",
                                                                                    "1000 (1/1 reached)"]


def test_a_malformed_gate_series_names_the_record(table):
    bad = mlu_rec(gate_stats={"encoder.layers.0.self_attn": {"mean": 0.3}})
    with pytest.raises(ValueError, match=f"run record {bad['run_id']}.json: key 'gate_stats'"):
        table.ablation_sections([bad])


def test_the_script_writes_the_table(table, tmp_path, capsys):
    runs = tmp_path / "results" / "runs"
    runs.mkdir(parents=True)
    for record in records():
        (runs / f"{record['run_id']}.json").write_text(json.dumps(record))
    out = tmp_path / "ablation.md"
    assert table.main(["--runs", str(tmp_path / "results"), "--out", str(out), "--task", "mlu"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert "| coda_transformer | 3 |" in out.read_text(encoding="utf-8")
    assert table.main(["--runs", str(tmp_path / "results"), "--out", str(out), "--task", "snli"]) == 1
    assert "no run record of task snli" in capsys.readouterr().err


def test_numbers_in_group_names_are_rounded_unless_two_would_read_alike(table):
    """A variant's float option shows to 3 digits (the grouping keeps every digit, so runs never merge)."""
    beta = [mlu_rec(seed=1, acc=0.2, options={"beta": 0.1767766952966369})]
    md = table.build_markdown(records() + beta, generated="2026-01-01T00:00:00+00:00")
    assert md_row(md, "coda_transformer[beta=0.177]")[1] == "1" and "0.1767766952966369" not in md
    alike = [mlu_rec(seed=1, acc=0.2, options={"beta": 0.17677}), mlu_rec(seed=1, acc=0.3, options={"beta": 0.17678})]
    md = table.build_markdown(records() + alike, generated="2026-01-01T00:00:00+00:00")
    assert "beta=0.17677]" in md and "beta=0.17678]" in md


def test_defaults_that_do_not_fit_the_records_are_said_with_what_would(table, tmp_path, capsys):
    """The defaults are the MLU study's: on another task's sweep (test/acc, groups of its own) the table's column and
    Δ were empty with only the file's notes saying why; the console names the metrics and groups the records have."""
    runs = tmp_path / "runs"
    runs.mkdir()
    for seed, lr in ((1, "0.001"), (2, "0.003")):
        rec = mlu_rec("decompatt", seed=seed, metrics={"test/acc": 0.5, "val/acc": 0.4})
        rec["task"] = "snli"
        (runs / f"{rec['run_id']}.json").write_text(json.dumps(rec))
    out = tmp_path / "cmp.md"
    assert table.main(["--runs", str(runs), "--out", str(out)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == ["warning: no record has test/acc_seq: its column is empty (--metric; their test metrics: test/acc)"]
    assert table.main(["--runs", str(runs), "--out", str(out), "--metric", "test/acc"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "warning: no group is 'transformer': no Δ, no p (--reference; the groups: 'decompatt')"]
    assert table.main(["--runs", str(runs), "--out", str(out), "--metric", "test/acc", "--reference", "decompatt"]) == 0
    assert capsys.readouterr().err == ""
