"""coda-exp plot-curves (coda_exp/tools/plot_curves.py): validation curves against steps from synthetic run records,
selection by task, metric and table, group means."""

from __future__ import annotations

import json

import pytest

from coda_exp.curves import Curve
from tests.results.records import mlu_rec, rec

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def plot():
    from coda_exp.tools import plot_curves

    return plot_curves


def saved(folder, *records):
    folder.mkdir(parents=True, exist_ok=True)
    for record in records:
        (folder / f"{record['run_id']}.json").write_text(json.dumps(record))
    return folder


def test_curves_of_several_folders_and_groups(plot, tmp_path, capsys):
    a = saved(tmp_path / "a" / "runs", mlu_rec("transformer", seed=1), mlu_rec("transformer", seed=2,
                                                                               curve=(0.1, 0.3, 0.5)))
    b = saved(tmp_path / "b", mlu_rec(seed=1), mlu_rec(seed=2, options={"center_n": True}),
              mlu_rec(seed=3, steps=None))  # an older record: its curve at validations 1, 2, 3
    out = tmp_path / "figures" / "curves.png"
    assert plot.main(["--runs", str(a.parent), "--runs", str(b), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG and out.stat().st_size > 1000
    printed = capsys.readouterr().out
    assert "transformer: 2 run(s), seeds [1, 2]" in printed
    assert "coda_transformer[center_n=true]: 1 run(s)" in printed and "coda_transformer: 2 run(s)" in printed
    assert not [p.name for p in out.parent.iterdir() if p.name.startswith(".")]  # no temporary file left
    assert plot.main(["--runs", str(b), "--out", str(out), "--group", "model"]) == 0
    assert "coda_transformer: 3 run(s)" in capsys.readouterr().out


def test_selection_by_task_metric_and_curve(plot):
    records = [mlu_rec(), mlu_rec(val_curve_metric="val/acc_tok"), mlu_rec(val_curve=[]),
               {**mlu_rec(), "task": "algolisp"}]
    kept, skipped = plot.select(records, "val/acc_seq", task="mlu")
    assert kept == records[:1]
    assert [s.split(": ", 1)[1] for s in skipped] == ["its curve is val/acc_tok", "no val_curve", "task algolisp"]
    older = mlu_rec()
    del older["val_curve_metric"]  # written before the metric was recorded: taken to be the one asked for
    assert plot.select([older], "val/acc_seq")[0] == [older]


def test_runs_of_different_budgets_are_never_one_group(plot):
    short, long_ = mlu_rec(seed=1), mlu_rec(seed=2, scale="cpu (task.max_steps=5000)", steps=(10, 20, 50))
    groups = plot.group_curves([short, long_], "attention-variant")
    assert sorted(groups) == ["coda_transformer @ cpu", "coda_transformer @ cpu (task.max_steps=5000)"]
    assert list(plot.group_curves([short, mlu_rec(seed=2)], "attention-variant")) == ["coda_transformer"]


def test_the_mean_is_taken_where_every_run_has_a_value(plot):
    curves = [Curve([0.0, 0.2, 0.4], [10, 20, 30], "steps"), Curve([0.2, 0.4], [10, 20], "steps")]
    assert plot.mean_curve(curves) == ([10, 20], [pytest.approx(0.1), pytest.approx(0.3)])


def test_table_6_keeps_only_the_runs_its_cells_pool(plot, tmp_path, capsys):
    grid = [mlu_rec("transformer", seed=1), mlu_rec(seed=1)]
    others = [mlu_rec(seed=2, options={"center_n": True}),  # an ablation: not Table 6's CoDA row
              mlu_rec("transformer", seed=3, fingerprint="0123456789ab", fingerprint_overrides=["optimizer.lr=1"])]
    folder = saved(tmp_path / "runs", *grid, *others)
    assert plot.table_run_ids("table_6", [*grid, *others]) == {r["run_id"] for r in grid}
    out = tmp_path / "t6.png"
    assert plot.main(["--runs", str(folder), "--table", "table_6", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG
    assert "left out 2 record(s)" in capsys.readouterr().err


def test_bad_input_is_one_line_naming_it(plot, tmp_path, capsys):
    out = tmp_path / "x.png"
    assert plot.main(["--runs", str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert "no such folder of run records" in capsys.readouterr().err
    folder = saved(tmp_path / "runs", mlu_rec(val_curve=[]))
    assert plot.main(["--runs", str(folder), "--out", str(out)]) == 2
    assert "no run to plot among 1 record(s)" in capsys.readouterr().err and not out.exists()
    assert plot.main(["--runs", str(folder), "--table", "table_99", "--out", str(out)]) == 2
    assert "--table table_99: no table spec" in capsys.readouterr().err
    broken = mlu_rec(val_curve_steps=[1])
    saved(tmp_path / "runs2", broken)
    assert plot.main(["--runs", str(tmp_path / "runs2"), "--out", str(out)]) == 2
    assert f"run record {broken['run_id']}.json: key 'val_curve_steps'" in capsys.readouterr().err


def test_an_out_that_is_no_file_is_one_line_naming_it(plot, tmp_path, capsys):
    """--out <a folder> used to be an IsADirectoryError's traceback, after the records were read."""
    folder = saved(tmp_path / "runs", mlu_rec("transformer", seed=1))
    assert plot.main(["--runs", str(folder), "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"error: --out {tmp_path}: a folder; expected the file to write the figure (PNG) "
                                       f"to (e.g. --out {tmp_path / 'learning_curves.png'})\n")
    (tmp_path / "file").write_text("a file, not a folder")
    assert plot.main(["--runs", str(folder), "--out", str(tmp_path / "file" / "curves.png")]) == 2
    assert f"{tmp_path / 'file'} is a file, not a folder" in capsys.readouterr().err
    assert plot.main(["--runs", str(folder), "--out", str(tmp_path / "curves.txt")]) == 2  # a PNG named .txt was written
    assert "the figure is a PNG; expected a file name ending in .png" in capsys.readouterr().err
    assert not (tmp_path / "curves.txt").exists()


def test_make_run_plots_table_6s_curves(plot, tmp_path):
    """The `run` target's plot command, its folders moved under tmp_path: Table 6's two runs, nothing else."""
    import shlex

    from tests import ROOT

    recipe = ROOT.joinpath("Makefile").read_text(encoding="utf-8").split("\nrun:", 1)[1].split("\n\n", 1)[0]
    (line,) = [x for x in recipe.splitlines() if "plot_learning_curves.py" in x]
    args = shlex.split(line.replace("$(ROOT_DIR)", ""))[2:]  # (ROOT_DIR: the root folder, empty in the checkout)
    assert args[args.index("--out") + 1] == "results/figures/mlu_learning_curves.png"
    assert args[args.index("--runs") + 1] == "results/runs" and args[args.index("--table") + 1] == "table_6"
    runs = saved(tmp_path / "results" / "runs", mlu_rec("transformer"), mlu_rec(),
                 {**mlu_rec("transformer", seed=2), "task": "algolisp"})
    args[args.index("--runs") + 1] = str(runs)
    args[args.index("--out") + 1] = str(tmp_path / "mlu_learning_curves.png")
    assert plot.main(args) == 0 and (tmp_path / "mlu_learning_curves.png").read_bytes()[:8] == PNG


def test_many_groups_get_distinct_styles_rounded_labels_and_a_legend_below_the_axes(plot):
    """19 groups (the CoDA recipe probes): no two alike, the legend outside the axes, beta=0.177 not its 16
    digits, the y axis named in words and in percent."""
    records = [mlu_rec(seed=1, options={"beta": 0.1767766952966369})]
    records += [mlu_rec(seed=s, options={"alpha": 0.1 * k}) for k in range(1, 18) for s in (1, 2)]
    records += [mlu_rec("transformer", seed=1)]
    groups = plot.group_curves(records, "attention-variant")
    assert len(groups) == 19
    fig = plot.figure(groups, "val/acc_seq", "mlu: test")
    ax = fig.axes[0]
    fig.canvas.draw()
    legend = fig.legends[0]
    texts = [t.get_text() for t in legend.get_texts()]
    assert len(texts) == 19 and "coda_transformer[beta=0.177] (seed 1)" in texts  # one entry per group
    assert "coda_transformer[alpha=0.30000000000000004]: mean of 2 seeds" not in texts
    assert "coda_transformer[alpha=0.3]: mean of 2 seeds" in texts
    assert not legend.get_window_extent().overlaps(ax.get_window_extent())
    assert ax.get_ylabel() == "validation sequence accuracy (%)" and max(ax.get_ylim()) > 1  # percent
    styles = {(line.get_color(), line.get_linestyle()) for line in legend.get_lines()}
    assert len(styles) == 19
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_a_mean_of_one_seed_run_twice_says_runs_and_runs_with_no_common_step_keep_their_legend_entry(plot):
    """Two runs of seed 1 (a DDP run beside a one-process one) are two runs, not two seeds; runs that validated at
    no common step have no mean, and their group stays in the legend, with every seed."""
    twice = [mlu_rec("transformer", seed=1), mlu_rec("transformer", seed=1, run_id="again")]
    apart = [mlu_rec(seed=1, steps=(10, 20, 30)), mlu_rec(seed=2, steps=(15, 25, 35))]
    fig = plot.figure(plot.group_curves(twice + apart, "attention-variant"), "val/acc_seq", "mlu")
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert sorted(texts) == ["coda_transformer (seeds 1, 2)", "transformer: mean of 2 runs (seeds [1, 1])"]
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_a_seed_run_twice_counts_once_as_in_the_tables(plot, tmp_path, capsys):
    """Seeds [1, 1, 2]: the figure's mean is over the latest run per seed (the table's cell), not 3 runs."""
    first, again, two = mlu_rec(seed=1, curve=(0.9, 0.9, 0.9)), mlu_rec(seed=1), mlu_rec(seed=2)
    folder = saved(tmp_path / "runs", first, again, two)
    assert plot.main(["--runs", str(folder), "--out", str(tmp_path / "c.png")]) == 0
    captured = capsys.readouterr()
    assert "coda_transformer: 2 run(s), seeds [1, 2]" in captured.out
    assert f"{first['run_id']} (superseded by {again['run_id']}, seed 1)" in captured.err
    kept, _ = plot.drop_superseded([first, again, two, mlu_rec("transformer", seed=1)])
    assert [r["seed"] for r in kept] == [1, 2, 1] and first not in kept


def test_the_default_metric_is_the_runs_own(plot, tmp_path, capsys):
    """WikiQA's curves are val/map: plotted without --metric; a mix of metrics is one message naming them."""
    def wikiqa(seed, metric="val/map"):
        return rec(task="wikiqa", model="decompatt", seed=seed, val_curve=[0.5, 0.6], val_curve_steps=[5, 10],
                   val_curve_metric=metric)

    folder = saved(tmp_path / "runs", wikiqa(1), wikiqa(2))
    assert plot.main(["--runs", str(folder), "--out", str(tmp_path / "w.png")]) == 0
    assert "decompatt: 2 run(s), seeds [1, 2]" in capsys.readouterr().out
    saved(folder, mlu_rec(seed=3))
    assert plot.main(["--runs", str(folder), "--out", str(tmp_path / "m.png")]) == 2
    assert capsys.readouterr().err == ("error: --metric: the runs' curves are of 2 metrics, val/acc_seq (1 run(s)), "
                                       "val/map (2 run(s)); plot one with --metric <one of them> (or keep one "
                                       "task's runs with --task)\n")
    assert plot.main(["--runs", str(folder), "--task", "wikiqa", "--out", str(tmp_path / "m.png")]) == 0
    assert plot.main(["--runs", str(folder), "--metric", "val/map", "--out", str(tmp_path / "m.png")]) == 0
    assert "left out 1 record(s)" in capsys.readouterr().err
    assert plot.curve_metric([wikiqa(1)], None) == "val/map"


def test_a_figure_of_fixture_runs_says_it_is_a_smoke_test(plot, tmp_path, monkeypatch):
    titles = []
    monkeypatch.setattr(plot, "plot", lambda groups, metric, out, title: titles.append(title) or out)
    folder = saved(tmp_path / "runs", mlu_rec(seed=1, scale="fixture"), mlu_rec(seed=2, scale="fixture"))
    assert plot.main(["--runs", str(folder), "--out", str(tmp_path / "c.png")]) == 0
    cpu = saved(tmp_path / "cpu", mlu_rec(seed=1))
    assert plot.main(["--runs", str(cpu), "--out", str(tmp_path / "c.png")]) == 0
    assert "smoke test: fixture runs" in titles[0] and "smoke test" not in titles[1]
    # experiment=quickstart labels its fixture runs "quickstart": the runs' fixture_data decides, as in the tables
    quick = saved(tmp_path / "quick", mlu_rec(seed=1, scale="quickstart", fixture_data=True))
    assert plot.main(["--runs", str(quick), "--out", str(tmp_path / "c.png")]) == 0
    assert "smoke test: quickstart runs" in titles[2]
