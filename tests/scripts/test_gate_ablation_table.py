"""scripts/gate_ablation_table.py: ``coda-exp compare`` titled as the gate study's table (its logic is tested in
tests/tools/test_compare.py); on MLU records the command's defaults are the study's."""

from __future__ import annotations

import pytest

from tests.results.records import gate_study_records, md_row, rec, write_records


@pytest.fixture
def table(load_script):
    return load_script("gate_ablation_table")


def test_the_script_prints_and_writes_the_table(table, tmp_path, capsys):
    write_records(tmp_path / "results" / "runs", gate_study_records())
    out = tmp_path / "ablation.md"
    assert table.main(["--runs", str(tmp_path / "results"), "--out", str(out), "--task", "mlu"]) == 0
    printed = capsys.readouterr()
    assert printed.out == out.read_text(encoding="utf-8") and printed.out.startswith("# Gate ablation: test/acc_seq")
    assert md_row(printed.out, "coda_transformer")[1] == "3" and "| transformer | 3 |" in printed.out
    assert "mlu, scale cpu: test/acc_seq (curves: val/acc_seq), reference 'transformer' (default" in printed.err
    assert printed.err.rstrip().endswith(f"written to {out}")
    assert table.main(["--runs", str(tmp_path / "results"), "--out", str(out), "--task", "snli"]) == 2
    assert capsys.readouterr().err == f"error: no run record of task snli in {tmp_path / 'results'}; their tasks: mlu\n"


def test_on_another_task_the_defaults_are_its_own_and_a_wrong_option_is_an_error(table, tmp_path, capsys):
    """The script's defaults used to be the MLU study's: on another task's sweep the table's column and Δ were empty
    with a warning. Now the records' own metric and plain model are the defaults, and a --metric or --reference no
    record has is one error naming what they have."""
    runs = write_records(tmp_path / "runs", [
        rec("snli", "decompatt", seed, metrics={"test/acc": 0.5 + seed / 10, "val/acc": 0.4}, val_curve=[0.3, 0.4],
            val_curve_metric="val/acc") for seed in (1, 2)])
    assert table.main(["--runs", str(runs)]) == 0
    printed = capsys.readouterr()
    assert md_row(printed.out, "decompatt")[:3] == ["decompatt", "2", "65.00 ± 7.07"]
    assert printed.err == ("snli, scale cpu: test/acc (curves: val/acc), reference 'decompatt' (default; --reference "
                           "to choose another)\n")
    assert table.main(["--runs", str(runs), "--metric", "test/acc_seq"]) == 2
    assert capsys.readouterr().err == ("error: --metric test/acc_seq: no run record has it; their test metrics: "
                                       "test/acc\n")
    assert table.main(["--runs", str(runs), "--reference", "transformer"]) == 2
    assert capsys.readouterr().err == "error: --reference 'transformer': no group is; the groups: 'decompatt'\n"
