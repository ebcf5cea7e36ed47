"""coda-exp compare (coda_exp/tools/compare.py, coda_exp/comparison.py): a sweep's groups over seeds against a
reference (Welch p), steps to a validation threshold and the final gate; its defaults read off the records (the
monitored metric's test counterpart, the plain non-CoDA configuration), one table per task, and its errors."""

from __future__ import annotations

import pytest
from scipy import stats

from coda_exp import commands
from coda_exp.comparison import build_markdown, comparison_sections
from tests.results.records import gate_study_records, md_row, mlu_rec, rec, write_records

GENERATED = "2026-01-01T00:00:00+00:00"


def snli(model="decompatt", seed=1, acc=0.8, overrides=(), **extra):
    """An SNLI record of a run that monitored val/acc (``overrides``: its configuration beyond the plain one)."""
    extra.setdefault("val_curve_metric", "val/acc")
    extra.setdefault("attention", {"name": "coda" if "coda" in model else "softmax"})  # CoDA: its default options
    return rec("snli", model, seed, metrics={"test/acc": acc, "val/acc": acc - 0.05}, val_curve=[acc - 0.1, acc],
               val_curve_steps=[10, 20], overrides=list(overrides), **extra)


def compare(tmp_path, records, *args):
    """``coda-exp compare`` on ``records`` written to a folder: its exit status."""
    runs = write_records(tmp_path / "runs", records)
    return commands.run_command("compare", ["--runs", str(runs), *args])


def test_groups_seeds_p_values_thresholds_and_gates():
    sections = comparison_sections(gate_study_records(), "test/acc_seq", "val/acc_seq", "transformer")
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
    assert softmax.gate_mean == [] and cpu.gates and not sections[1].gates
    assert any("superseded" in note for note in cpu.notes)
    assert any("without test/acc_seq" in note for note in cpu.notes)
    assert sections[1].rows[0].welch is None and "no reference group 'transformer'" in sections[1].notes[0]
    # without a reference: the plain model without CoDA, and in a table of CoDA runs only, the plain CoDA model
    default = comparison_sections(gate_study_records(), "test/acc_seq", "val/acc_seq")
    assert [(s.reference, s.chosen) for s in default] == [("transformer", True), ("coda_transformer", True)]


def test_the_markdown_rows_and_gate_columns_only_where_measured():
    md = build_markdown(gate_study_records(), "test/acc_seq", "val/acc_seq", generated=GENERATED)
    assert md.startswith("# Comparison: test/acc_seq") and "## mlu, scale cpu\n" in md
    assert md_row(md, "transformer")[:8] == ["transformer", "3", "50.00 ± 10.00", "s1: 40.00, s2: 50.00, s3: 60.00",
                                             "—", "—", "150 (2/3 reached)", "350 (2/3 reached)"]
    coda = md_row(md, "coda_transformer")
    assert coda[2] == "15.00 ± 5.00" and coda[4] == "-35.00" and coda[5] not in ("—", "")
    assert coda[-2:] == ["0.450 (2/3 seeds)", "15.0 %"]
    centred = md_row(md, "coda_transformer[center_n=true]")
    assert centred[1:3] == ["1", "30.00"] and centred[5] == "—" and centred[6:8] == ["500 (1/1 reached)",
                                                                                    "1000 (1/1 reached)"]
    longer = md.split("## mlu, scale cpu (task.max_steps=10000)")[1]
    assert "final gate" not in longer.split("\n\n")[1] and "Final gate:" in md  # that table measured none
    plain = build_markdown([snli(seed=1), snli(seed=2)], "test/acc", "val/acc", thresholds=[], generated=GENERATED)
    assert md_row(plain, "group") == ["group", "n", "test/acc (%)", "per seed", "Δ vs decompatt (points)", "Welch p"]
    assert "gate" not in plain.lower() and "Steps:" not in plain


def test_a_malformed_gate_series_names_the_record():
    bad = mlu_rec(gate_stats={"encoder.layers.0.self_attn": {"mean": 0.3}})
    with pytest.raises(ValueError, match=f"run record {bad['run_id']}.json: key 'gate_stats'"):
        comparison_sections([bad], "test/acc_seq", "val/acc_seq")


def test_numbers_in_group_names_are_rounded_unless_two_would_read_alike():
    """A variant's float option shows to 3 digits (the grouping keeps every digit, so runs never merge)."""
    beta = [mlu_rec(seed=1, acc=0.2, options={"beta": 0.1767766952966369})]
    md = build_markdown(gate_study_records() + beta, "test/acc_seq", "val/acc_seq", generated=GENERATED)
    assert md_row(md, "coda_transformer[beta=0.177]")[1] == "1" and "0.1767766952966369" not in md
    alike = [mlu_rec(seed=1, acc=0.2, options={"beta": 0.17677}), mlu_rec(seed=1, acc=0.3, options={"beta": 0.17678})]
    md = build_markdown(gate_study_records() + alike, "test/acc_seq", "val/acc_seq", generated=GENERATED)
    assert "beta=0.17677]" in md and "beta=0.17678]" in md


def test_the_defaults_are_the_records_own(tmp_path, capsys):
    """No flag: the monitored metric's test counterpart (an older record without val_curve_metric: its task config's
    task.monitor), its val/ curve, and the plain configuration without CoDA as the reference."""
    records = [snli("decompatt_coda", s, 0.85) for s in (1, 2)] + [
        snli("decompatt", s, 0.80, val_curve_metric=None) for s in (1, 2)] + [
        snli("decompatt", s, 0.82, ["optimizer.lr=0.003"]) for s in (1, 2)]
    assert compare(tmp_path, records) == 0
    printed = capsys.readouterr()
    assert printed.err == ("snli, scale cpu: test/acc (curves: val/acc), reference 'decompatt' (default; --reference "
                           "to choose another)\n")
    assert md_row(printed.out, "decompatt")[:5] == ["decompatt", "2", "80.00 ± 0.00", "s1: 80.00, s2: 80.00", "—"]
    assert md_row(printed.out, "decompatt {optimizer.lr=0.003}")[4] == "+2.00"
    assert md_row(printed.out, "decompatt_coda")[4] == "+5.00" and "steps to val/acc ≥ 10 %" in printed.out
    assert compare(tmp_path / "old", [snli(val_curve_metric=None)]) == 0  # configs/task/snli.yaml: val/acc
    assert capsys.readouterr().out.startswith("# Comparison: test/acc\n")
    # every group off the plain configuration: the one without CoDA, then by label
    swept = [snli("decompatt_coda", 1, 0.85, ["optimizer.lr=0.001"]), snli("decompatt", 1, 0.8, ["optimizer.lr=0.3"]),
             snli("decompatt", 1, 0.8, ["optimizer.lr=0.1"])]
    assert compare(tmp_path / "swept", swept, "--curve-metric", "val/loss", "--title", "LR sweep") == 0
    printed = capsys.readouterr()
    assert "reference 'decompatt {optimizer.lr=0.1}' (default" in printed.err and "(curves: val/loss)" in printed.err
    assert printed.out.startswith("# LR sweep: test/acc") and "n/a (1 without steps)" in printed.out


def test_several_tasks_are_one_table_each_with_its_own_metric(tmp_path, capsys):
    records = [*gate_study_records(), snli(seed=1), snli(seed=2)]
    out = tmp_path / "out" / "cmp.md"
    assert compare(tmp_path, records, "--out", str(out)) == 0
    printed = capsys.readouterr()
    assert printed.out == out.read_text(encoding="utf-8") and printed.out.startswith("# Comparison\n")
    assert [line for line in printed.out.splitlines() if line.startswith("## ")] == [
        "## mlu, scale cpu", "## mlu, scale cpu (task.max_steps=10000)", "## snli, scale cpu"]
    assert md_row(printed.out, "decompatt")[2] == "80.00 ± 0.00" and "| test/acc_seq (%) |" in printed.out
    assert printed.err.splitlines()[0].startswith("mlu, scale cpu: test/acc_seq (curves: val/acc_seq), reference "
                                                  "'transformer'")
    assert printed.err.splitlines()[-1] == f"written to {out}"
    assert compare(tmp_path / "one", records, "--task", "snli") == 0
    assert "## mlu" not in capsys.readouterr().out


@pytest.mark.parametrize("args,error", [
    (["--metric", "test/bleu"], "--metric test/bleu: no run record has it; their test metrics: test/acc"),
    (["--reference", "transformer"], ("--reference 'transformer': no group is; the groups: 'decompatt', "
                                      "'decompatt_coda'")),
    (["--task", "mlu"], "no run record of task mlu in {runs}; their tasks: snli"),
    # the headers say percent: --thresholds 10 made a column "≥ 1000 %" that no run could reach
    (["--thresholds", "0.3", "10"], ("--thresholds 10: val/acc is a fraction in [0, 1] (tables show it in percent): "
                                     "give 0.1 for 10 %")),
])
def test_an_option_no_record_fits_is_one_error_naming_what_they_have(tmp_path, capsys, args, error):
    assert compare(tmp_path, [snli(), snli("decompatt_coda")], *args) == 2
    assert capsys.readouterr() == ("", f"error: {error.format(runs=tmp_path / 'runs')}\n")


def test_no_records_and_no_test_metric_are_one_error(tmp_path, capsys):
    assert commands.run_command("compare", ["--runs", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err == f"error: --runs: no such folder of run records: {tmp_path / 'missing'}\n"
    assert compare(tmp_path, []) == 2
    assert capsys.readouterr().err == (f"error: no training run record in {tmp_path / 'runs'} (a training run writes "
                                       "its record to <paths.results_dir>/runs)\n")
    assert compare(tmp_path / "evals", [rec("snli", "decompatt", mode="eval")]) == 2
    assert capsys.readouterr().err.endswith("; its 1 record(s) are evaluations (coda-exp eval), which compare leaves "
                                            "out\n")
    odd = rec("odd_task", "decompatt", metrics={"test/f1": 0.5}, val_curve_metric="val/acc")
    assert compare(tmp_path / "odd", [odd]) == 2
    assert capsys.readouterr().err == ("error: task odd_task: no test metric matches the monitored one (val/acc); "
                                       "their test metrics: test/f1: choose one with --metric (and --task odd_task)\n")


def test_compare_is_a_command():
    assert commands.find("compare").module == "coda_exp.tools.compare"
    assert "compare" in commands.COMMANDS and commands.is_command_word("compare")


def test_no_runs_reads_the_results_folders_training_writes_to(tmp_path, capsys, monkeypatch):
    """Without --runs: results/ and outputs/fixture_results/ (scale=fixture's paths.results_root) of the project root,
    those that exist; a project whose runs were all scale=fixture used to be told results/ does not exist."""
    monkeypatch.setenv("CODA_EXP_ROOT", str(tmp_path))
    fixture = tmp_path / "outputs" / "fixture_results"
    assert commands.run_command("compare", []) == 2
    assert capsys.readouterr().err == (f"error: no folder of run records: neither {tmp_path / 'results'} nor {fixture} "
                                       "exists (a training run writes its record to <paths.results_dir>/runs; --runs "
                                       "FOLDER reads another)\n")
    write_records(fixture / "runs", [snli(seed=1, scale="fixture"), snli(seed=2, scale="fixture")])
    assert commands.run_command("compare", []) == 0
    printed = capsys.readouterr()
    assert printed.err.startswith(f"run records of {fixture} (default; --runs to choose)\n")
    assert "## snli, scale fixture" in printed.out and f"from 2 run record(s) in {fixture}." in printed.out
    write_records(tmp_path / "results" / "runs", [snli(seed=1), snli(seed=2)])
    assert commands.run_command("compare", []) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("## ")] == ["## snli, scale cpu",
                                                                            "## snli, scale fixture"]


def test_overrides_every_group_shares_do_not_make_a_group_less_plain(tmp_path, capsys):
    """A sweep run with data.dataset=toynli and optimizer.lr=0.001 on every job, one group swapping the model class
    too: the reference is the group without the swap (it was the one with it: no group was plain, and its label came
    first); of groups equally far from the plain one, a model without CoDA first."""
    shared = ["data.dataset=toynli", "optimizer.lr=0.001"]
    swapped = [*shared, "model._target_=toy_models.DecompAttResidual"]
    records = [snli("decompatt", s, 0.80, swapped) for s in (1, 2)] + [
        snli("decompatt", s, 0.70, shared) for s in (1, 2)] + [
        snli("decompatt_coda", s, 0.85, shared) for s in (1, 2)]
    plain = "decompatt {data.dataset=toynli, optimizer.lr=0.001}"
    (section,) = comparison_sections(records, "test/acc", "val/acc")
    assert section.reference == plain and section.chosen and section.rows[0].label == plain
    assert compare(tmp_path, records) == 0
    assert f"reference '{plain}' (default" in capsys.readouterr().err
    # the shared settings alone are no departure: a CoDA option changed is (the softmax group, plainer, is kept)
    centred = [snli("decompatt_coda", s, 0.85, shared, attention={"name": "coda", "center_n": True}) for s in (1, 2)]
    (section,) = comparison_sections(records[2:] + centred, "test/acc", "val/acc")
    assert section.reference == plain
    only_coda = [r for r in records if r["model"] == "decompatt_coda"] + centred
    (section,) = comparison_sections(only_coda, "test/acc", "val/acc")
    assert section.reference == "decompatt_coda {data.dataset=toynli, optimizer.lr=0.001}"


def test_overrides_every_group_shares_are_said_once_not_in_every_label(tmp_path, capsys):
    """Every label of a sweep's table repeated its shared ``{data.dataset=toynli, optimizer.lr=0.001}``: they are
    said once above the table; ``--reference`` still takes the whole label."""
    shared = ["data.dataset=toynli", "optimizer.lr=0.001"]
    records = [snli("decompatt", s, 0.70, shared) for s in (1, 2)] + [
        snli("decompatt", s, 0.80, [*shared, "model.hidden_size=50"]) for s in (1, 2)]
    assert compare(tmp_path, records) == 0
    out = capsys.readouterr().out
    assert "Every group: {data.dataset=toynli, optimizer.lr=0.001}." in out
    rows = [line.split(" | ")[0] for line in out.splitlines() if line.startswith("| decompatt")]
    assert rows == ["| decompatt", "| decompatt {model.hidden_size=50}"]
    assert "Δ vs decompatt (points)" in out
    whole = "decompatt {data.dataset=toynli, model.hidden_size=50, optimizer.lr=0.001}"
    assert compare(tmp_path, records, "--reference", whole) == 0
    assert "Δ vs decompatt {model.hidden_size=50} (points)" in capsys.readouterr().out
    assert compare(tmp_path, records, "--reference", "decompatt {model.hidden_size=50}") == 0  # as shown
    assert "Δ vs decompatt {model.hidden_size=50} (points)" in capsys.readouterr().out
    assert compare(tmp_path, records, "--reference", "decompatt {optimizer.lr=0.001}") == 2  # no group reads so
    (section,) = comparison_sections(records[:2], "test/acc", "val/acc")  # one group: its label says it all
    assert section.shared == shared
