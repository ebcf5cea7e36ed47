"""coda-exp plot-attconv (coda_exp/tools/plot_attconv.py): AttConv Figures 5 (Yelp accuracy by text length) and 8
(FEVER accuracy by gold evidence sentences) from synthetic run records and prediction files."""

from __future__ import annotations

import json

import pytest

from coda_exp.run_record import write_predictions
from tests.results.records import rec


@pytest.fixture
def plot():
    from coda_exp.tools import plot_attconv

    return plot_attconv


def saved_run(tmp_path, task, model, seed, rows, coda=False, **extra):
    record = rec(task=task, model=model, seed=seed, attention={"name": "coda" if coda else "none"}, **extra)
    record["predictions"] = str(write_predictions(rows, tmp_path / f"{record['run_id']}.jsonl.gz"))
    path = tmp_path / f"{record['run_id']}.json"
    path.write_text(json.dumps(record))
    return record, path


def yelp_rows(right_if_longer_than: int, n: int = 20):
    """Texts of length 1..n (shuffled order of index); correct exactly when longer than the threshold."""
    return [{"index": i, "label": 1, "prediction": int(length > right_if_longer_than), "length": length}
            for i, length in enumerate(reversed(range(1, n + 1)))]


def test_length_groups_sort_by_length_and_split_evenly(plot):
    groups = plot.length_groups(yelp_rows(10), groups=4)
    assert [g[0] for g in groups] == ["1-5", "6-10", "11-15", "16-20"]
    assert [g[1] for g in groups] == [0.0, 0.0, 1.0, 1.0] and [g[2] for g in groups] == [5, 5, 5, 5]
    uneven = plot.length_groups(yelp_rows(0, n=7), groups=3)
    assert [g[2] for g in uneven] == [3, 2, 2]
    with pytest.raises(ValueError, match="without 'length'"):
        plot.length_groups([{"index": 0, "label": 0, "prediction": 0}], groups=1)
    with pytest.raises(ValueError, match="cannot form 4 groups"):
        plot.length_groups(yelp_rows(0, n=3), groups=4)


def test_evidence_groups_leave_out_nei_and_pool_large_sets(plot):
    rows = [{"index": i, "label": "SUPPORTS", "prediction": p, "num_gold_evidence": k}
            for i, (k, p) in enumerate([(1, "SUPPORTS"), (1, "REFUTES"), (2, "SUPPORTS"), (3, "REFUTES"),
                                        (7, "SUPPORTS"), (None, "REFUTES")])]
    assert plot.evidence_groups(rows, max_sentences=3) == [("1", 0.5, 2), ("2", 1.0, 1), ("3+", 0.5, 2)]
    with pytest.raises(ValueError, match="no claim with gold evidence"):
        plot.evidence_groups(rows[-1:], max_sentences=3)


def test_figure_5_averages_the_seeds_of_each_system(plot, tmp_path):
    paths = [saved_run(tmp_path, "yelp", "attconv_light", 1, yelp_rows(10))[1],
             saved_run(tmp_path, "yelp", "attconv_light", 2, yelp_rows(5))[1],
             saved_run(tmp_path, "yelp", "attconv_light", 1, yelp_rows(20), coda=True)[1]]
    out = plot.main(["--figure", "5", "--records", *map(str, paths), "--groups", "4", "--out",
                     str(tmp_path / "f5.png")])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from coda_exp.results import read_record

    lines = plot.series([read_record(p) for p in paths], 5, None, groups=4)
    assert lines["attconv_light"] == (["1-5", "6-10", "11-15", "16-20"], [0.0, 0.5, 1.0, 1.0], 2)
    assert lines["attconv_light + CoDA"][1] == [0.0] * 4
    fig = plot.figure(lines, 5)
    fig.canvas.draw()
    (legend,) = fig.legends  # below the axes, one entry per system, in distinct colours
    assert not legend.get_window_extent().overlaps(fig.axes[0].get_window_extent())
    assert [t.get_text() for t in legend.get_texts()] == ["attconv_light (n=2)", "attconv_light + CoDA (n=1)"]
    assert len({line.get_color() for line in legend.get_lines()}) == 2
    assert fig.axes[0].get_ylabel() == "test accuracy (%)"
    assert 0 <= fig.axes[0].get_ylim()[0] and fig.axes[0].get_ylim()[1] <= 100  # 100 % runs: no 104 % tick


def test_figure_8_from_fever_runs_and_refusals(plot, tmp_path, capsys):
    rows = [{"index": i, "label": "SUPPORTS", "prediction": "SUPPORTS", "num_gold_evidence": 1 + i % 3}
            for i in range(6)]
    fever = saved_run(tmp_path, "fever", "attconv_advanced", 1, rows, hparams={"contexts": "wise"},
                      data={"evidence": "gold"})
    out = plot.main(["--figure", "8", "--records", str(fever[1]), "--out", str(tmp_path / "f8.png")])
    assert out.exists() and plot.system_name(fever[0]) == "attconv_advanced, wise, gold evidence"
    with pytest.raises(SystemExit):  # a Yelp run is not a FEVER run
        plot.main(["--figure", "8", "--records", str(saved_run(tmp_path, "yelp", "attconv_light", 1,
                                                                    yelp_rows(3))[1])])
    assert "Figure 8 plots fever runs" in capsys.readouterr().err
    record, path = saved_run(tmp_path, "yelp", "attconv_light", 3, yelp_rows(3))
    (tmp_path / f"{record['run_id']}.jsonl.gz").unlink()
    with pytest.raises(SystemExit, match="no saved test predictions"):
        plot.main(["--figure", "5", "--records", str(path)])
    capsys.readouterr()
    (tmp_path / "notrec.json").write_text("notjson\n")  # a RecordError traceback before
    with pytest.raises(SystemExit) as exit_:
        plot.main(["--figure", "8", "--records", str(tmp_path / "notrec.json")])
    assert exit_.value.code == 2 and f"{tmp_path / 'notrec.json'}: cannot read run record" in capsys.readouterr().err


def test_the_figure_goes_beside_the_records_not_into_the_committed_figures(plot, tmp_path, monkeypatch):
    """Without --out: figures/ of the records' results folder; fixture records in the tracked results/ go to
    outputs/fixture_results/figures."""
    root = tmp_path / "root"
    monkeypatch.setenv("CODA_EXP_ROOT", str(root))
    fixture = root / "outputs" / "fixture_results" / "runs"
    fixture.mkdir(parents=True)
    _, path = saved_run(fixture, "yelp", "attconv_light", 1, yelp_rows(3), scale="fixture")
    out = plot.main(["--figure", "5", "--records", str(path), "--groups", "2"])
    assert out == root / "outputs" / "fixture_results" / "figures" / "attconv_figure_5.png" and out.is_file()
    tracked = root / "results" / "runs"
    tracked.mkdir(parents=True)
    _, path = saved_run(tracked, "yelp", "attconv_light", 1, yelp_rows(3), scale="fixture")
    assert plot.main(["--figure", "5", "--records", str(path), "--groups", "2"]) == out
    _, path = saved_run(tracked, "yelp", "attconv_light", 2, yelp_rows(3), scale="paper")
    assert plot.main(["--figure", "5", "--records", str(path), "--groups", "2"]) == (
        root / "results" / "figures" / "attconv_figure_5.png")


def test_the_runs_are_those_a_table_would_pool(plot, tmp_path, capsys):
    """A re-evaluation (coda-exp eval) of a run, a superseded rerun of its seed, a run of another configuration and
    one of another scale are left out and named: one trained model is one run (n=1), as the tables count it; a
    figure of fixture runs says it is a smoke test."""
    from coda_exp.fingerprint import FINGERPRINT_RULE, GRID_FINGERPRINT

    runs = tmp_path / "results" / "runs"
    runs.mkdir(parents=True)
    grid = {"scale": "fixture", "fingerprint": GRID_FINGERPRINT, "fingerprint_overrides": []}
    old, a = saved_run(runs, "yelp", "attconv_light", 1, yelp_rows(20), created="2025-01-01T00:00:00+00:00", **grid)
    new, b = saved_run(runs, "yelp", "attconv_light", 1, yelp_rows(10), created="2025-01-02T00:00:00+00:00", **grid)
    again, c = saved_run(runs, "yelp", "attconv_light", 1, yelp_rows(10), mode="eval", trained_run_id=new["run_id"],
                         created="2025-01-03T00:00:00+00:00", **grid)
    other, d = saved_run(runs, "yelp", "attconv_light", 2, yelp_rows(0), fingerprint="x",
                         fingerprint_overrides=["optimizer.lr=0.1"], fingerprint_rule=FINGERPRINT_RULE,
                         scale="fixture")
    cpu, e = saved_run(runs, "yelp", "attconv_light", 3, yelp_rows(0), scale="cpu (task.epochs=1)")
    out = plot.main(["--figure", "5", "--records", *map(str, (a, b, c, d, e)), "--groups", "4"])
    assert out == tmp_path / "results" / "figures" / "attconv_figure_5.png" and out.is_file()
    printed = capsys.readouterr()
    assert "attconv_light: 1 run(s), scale fixture" in printed.out
    reevaluation = f"a re-evaluation (coda-exp eval) of {new['run_id']}"
    for record, why in ((old, f"superseded by {new['run_id']}"), (again, reevaluation),
                        (other, "another configuration (optimizer.lr=0.1)"), (cpu, "scale cpu (task.epochs=1)")):
        assert why in printed.err and record["run_id"] in printed.err, why
    chosen, _, scale = plot.select([old, new, again, other, cpu])
    assert [r["run_id"] for r in chosen] == [new["run_id"]] and scale == "fixture"
    lines = plot.series(chosen, 5, None, groups=4)
    assert lines["attconv_light"] == (["1-5", "6-10", "11-15", "16-20"], [0.0, 0.0, 1.0, 1.0], 1)
    assert "smoke test: fixture runs" in plot.figure(lines, 5, scale).axes[0].get_title()
    assert "smoke test" not in plot.figure(lines, 5, "paper").axes[0].get_title()
    assert [r["run_id"] for r in plot.select([old, new, again, other, cpu], "cpu (task.epochs=1)")[0]] == [
        cpu["run_id"]]
    assert plot.main(["--figure", "5", "--runs", str(tmp_path / "results"), "--groups", "4"]) == out  # the folder
    assert "attconv_light: 1 run(s), scale fixture" in capsys.readouterr().out


def test_a_folder_without_the_figures_runs_names_what_it_holds(plot, tmp_path, capsys):
    """--runs on a folder of other tasks' records said "no yelp run to plot among 0 record(s)": the count was taken
    after keeping the figure's task. It counts the folder's records and names their tasks."""
    runs = tmp_path / "results" / "runs"
    runs.mkdir(parents=True)
    for seed in (1, 2):
        saved_run(runs, "mlu", "transformer", seed, yelp_rows(3))
    saved_run(runs, "snli", "attconv_light", 1, yelp_rows(3))
    with pytest.raises(SystemExit) as exit_:
        plot.main(["--figure", "5", "--runs", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert "no yelp AttConv run among the 3 training record(s)" in err and "(their tasks: mlu ×2, snli ×1)" in err
