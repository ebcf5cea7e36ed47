"""AttConv Tables 3, 5, 7, 9: the shipped specs filled from synthetic records (CoDA row, Δ rows, Table 7's
parameter column, Table 9's evidence columns), their experiments, and one fast_dev_run of every AttConv model x
task through the pipeline (run record with parameter counts, predictions a table and the figures can read)."""

from __future__ import annotations

import csv
import io
import itertools
import json

import pytest
import yaml

from coda_exp.experiments import grid_fingerprint, run_configuration
from coda_exp.significance import read_predictions
from coda_exp.table_render import render_csv, render_latex, render_markdown
from coda_exp.table_spec import TableSpecError, load_table_spec
from coda_exp.tables import NO_RUN, NOT_RUN, build_table
from tests import ROOT
from tests.results.records import cell, md_row, rec

MODELS = ("attconv_light", "attconv_light_noconv", "attconv_advanced")
TASKS = {"attconv_table_3": "yelp", "attconv_table_5": "scitail", "attconv_table_7": "snli",
         "attconv_table_9": "fever"}
CODA = {"name": "coda", "e_fn": "tanh", "n_fn": "sigmoid", "center_e": False, "center_n": False, "gate_scale": 2.0,
        "scale": True}


def attconv(task, model, seed, acc, coda=False, contexts="conc", evidence=None, attconv_count=None, **metrics):
    """A record as a job of the task's experiment (``attconv_table_N``, ``..._coda``) writes it."""
    experiment = next(t for t, name in TASKS.items() if name == task) + ("_coda" if coda else "")
    overrides = [f"experiment={experiment}", f"model={model}", f"seed={seed}"]
    record = rec(task=task, model=model, seed=seed, metrics={"test/acc": acc, **metrics},
                 attention=dict(CODA) if coda else {"name": "none"},
                 hparams={"name": model, "contexts": contexts}, data={"evidence": evidence} if evidence else {},
                 overrides=overrides, **run_configuration(overrides, None, None))
    if attconv_count is not None:
        record["parameters"] = {"attconv": attconv_count, "total": attconv_count + 1000, "trainable": 1}
    return record


@pytest.mark.parametrize("table_id", ["attconv_table_3", "attconv_table_5", "attconv_table_7"])
def test_single_task_tables_keep_softmax_and_coda_runs_apart(shipped, table_id):
    task = TASKS[table_id]
    records = [attconv(task, "attconv_light", s, a) for s, a in ((1, 0.60), (2, 0.62), (3, 0.64))]
    records += [attconv(task, "attconv_light", s, a, coda=True) for s, a in ((1, 0.70), (2, 0.71), (3, 0.72))]
    records += [attconv(task, "attconv_advanced", 1, 0.5)]
    table = build_table(shipped[table_id], records)
    light, coda = cell(table, "AttConv light", "acc"), cell(table, "AttConv light + CoDA (ours)", "acc")
    assert light.mean == pytest.approx(62.0) and coda.mean == pytest.approx(71.0)
    assert cell(table, "AttConv light w/o convolution", "acc").status == NO_RUN
    assert coda.paper is None and cell(table, "ABCNN", "acc").status == NOT_RUN
    md = render_markdown(table)
    delta = md_row(md, "Δ AttConv light + CoDA (ours) − AttConv light")
    assert delta[-2] == "–" and delta[-1].startswith("Δ = +9.0") and "Welch, n=3/3" in delta[-1]
    # one seed of advanced: a Δ without Welch's test, said so
    assert md_row(md, "Δ AttConv advanced − AttConv light")[-1].endswith("(n=3/1: no Welch test)")
    assert "AttConv light + CoDA (ours)" in render_latex(table)


def test_coda_ablations_stay_out_of_the_coda_row(shipped):
    centred = attconv("snli", "attconv_light", 1, 0.9, coda=True)
    centred["attention"]["center_e"] = True
    table = build_table(shipped["attconv_table_7"], [centred])
    assert cell(table, "AttConv light + CoDA (ours)", "acc").status == NO_RUN


def test_table_7_prints_each_models_parameter_count_beside_the_papers(shipped):
    records = [attconv("snli", "attconv_light", s, 0.86, attconv_count=360_300) for s in (1, 2)]
    records += [attconv("snli", "attconv_advanced", 1, 0.87, attconv_count=1_352_100),
                attconv("snli", "attconv_light_noconv", 1, 0.85)]  # a record from before the field existed
    table = build_table(shipped["attconv_table_7"], records)
    md = render_markdown(table)
    assert md_line(md, "| system").startswith("| system | parameters (paper) | parameters (ours) | acc (paper) |")
    assert md_row(md, "AttConv light")[1:5] == ["360K", "360,300", "86.3", "86.0 ± 0.0 (n=2, cpu)"]
    assert md_row(md, "AttConv advanced")[1:3] == ["900K", "1,352,100"]
    assert md_row(md, "AttConv light w/o convolution")[1:3] == ["360K", "not recorded"]
    assert md_row(md, "AttConv light + CoDA (ours)")[1:3] == ["–", NO_RUN]
    assert md_row(md, "Tree-CNN")[1:3] == ["3.5M", NOT_RUN]
    assert md_row(md, "Δ AttConv advanced − AttConv light")[1:3] == ["", ""]
    assert "parameters & \\multicolumn" not in render_latex(table)
    assert "\\multicolumn{2}{c}{parameters}" in render_latex(table)
    counts = {r["row"]: r for r in csv.DictReader(io.StringIO(render_csv(table))) if r["status"] == "parameters"}
    assert len(counts) == len(table.spec.rows) and counts["AttConv light"]["metric"] == "parameters.attconv"
    # numbers as numbers: the paper's "360K" as 360000, ours the mean (std, n) over the row's pooled runs
    assert [counts["AttConv light"][k] for k in ("paper", "mean", "std", "n")] == ["360000", "360300", "0.0", "2"]
    assert [counts["Tree-CNN"][k] for k in ("paper", "mean", "n")] == ["3500000", "", "0"]
    assert [counts["AttConv light w/o convolution"][k] for k in ("paper", "mean", "n")] == ["360000", "", "0"]
    assert counts["Majority class"]["paper"] == "0"  # the paper prints "majority class 0 34.3"


def md_line(markdown, start):
    return next(line for line in markdown.splitlines() if line.startswith(start))


def test_two_counts_of_one_row_are_both_shown_and_counts_need_a_record_key(shipped, tmp_path):
    records = [attconv("snli", "attconv_light", 1, 0.86, attconv_count=360_300),
               attconv("snli", "attconv_light", 2, 0.86, attconv_count=450_600)]
    table = build_table(shipped["attconv_table_7"], records)
    assert md_row(render_markdown(table), "AttConv light")[2] == "360,300 / 450,600"
    text = (ROOT / "configs" / "tables" / "attconv_table_7.yaml").read_text().replace(
        "parameters: parameters.attconv\n", "")
    (tmp_path / "attconv_table_7.yaml").write_text(text)
    with pytest.raises(TableSpecError, match="paper_parameters"):
        load_table_spec(tmp_path / "attconv_table_7.yaml")


def test_table_9_reads_retrieved_and_gold_runs_per_contexts(shipped):
    light = [attconv("fever", "attconv_light", s, 0.5, contexts="conc", evidence="retrieved",
                     **{"val/acc": 0.59 + s / 100, "val/fever_score": 0.37, "test/fever_score": 0.3})
             for s in (1, 2)]
    light += [attconv("fever", "attconv_light", s, 0.8, contexts="conc", evidence="gold", **{"val/acc": 0.84})
              for s in (1, 2)]
    wise = [attconv("fever", "attconv_light", 1, 0.4, contexts="wise", evidence="retrieved",
                    **{"val/acc": 0.57, "val/fever_score": 0.34})]
    coda = [attconv("fever", "attconv_light", 1, 0.6, coda=True, evidence="gold", **{"val/acc": 0.9})]
    table = build_table(shipped["attconv_table_9"], light + wise + coda)
    conc = "dev: AttConv light, context-conc"
    assert cell(table, conc, "All").mean == pytest.approx(60.5)
    assert cell(table, conc, "Sub").mean == pytest.approx(37.0)
    assert cell(table, conc, "gold").mean == pytest.approx(84.0)
    assert cell(table, "dev: AttConv light, context-wise", "All").mean == pytest.approx(57.0)
    assert cell(table, "dev: AttConv light, context-wise", "gold").status == NO_RUN
    ours = "dev: AttConv light + CoDA, context-conc (ours)"
    assert cell(table, ours, "gold").mean == pytest.approx(90.0) and cell(table, ours, "All").status == NO_RUN
    test_row = "test: AttConv light, context-conc (ours)"
    assert (cell(table, test_row, "All").mean, cell(table, test_row, "Sub").mean) == (pytest.approx(50.0),
                                                                                      pytest.approx(30.0))
    assert "Δ dev: AttConv light, context-conc − dev: AttConv light, context-wise" in render_markdown(table)


@pytest.mark.parametrize("name", [f"{t}{s}" for t in TASKS for s in ("", "_coda")])
def test_experiments_sweep_the_tables_grid(name):
    """Every job of the sweep has its table's grid fingerprint and lands in a row of its table."""
    params = yaml.safe_load((ROOT / "configs" / "experiment" / f"{name}.yaml").read_text())["hydra"]["sweeper"][
        "params"]
    axes = {k: str(v).split(",") for k, v in params.items()}
    assert axes["task"] == [TASKS[name.removesuffix("_coda")]] and axes["seed"] == ["1", "2", "3"]
    jobs = [[f"{k}={v}" for k, v in zip(axes, combo)] for combo in _product(list(axes.values()))]
    grid = grid_fingerprint(name.removesuffix("_coda"))
    assert all(run_configuration([f"experiment={name}", *job], None, None)["fingerprint"] == grid for job in jobs)
    if name.endswith("_coda"):
        assert axes["model"] == ["attconv_light"] and axes["model/attention"] == ["coda"]
    else:
        assert axes["model"] == list(MODELS) and "model/attention" not in axes
    if name.startswith("attconv_table_9"):
        assert axes["data.evidence"] == ["retrieved", "gold"]


def _product(lists):
    return list(itertools.product(*lists))


# ---- one fast_dev_run of every AttConv model x task -------------------------------------------------


@pytest.mark.parametrize("task", ["yelp", "scitail", "snli", "fever"])
@pytest.mark.parametrize("model", MODELS)
def test_fast_dev_run_records_parameter_counts(make_cfg, one_thread, tmp_path, task, model):
    from coda_exp.pipeline import run

    overrides = [f"task={task}", f"model={model}", "scale=fixture", "debug=fdr", "logger=none",
                 "save_record=true", "save_predictions=true"]
    run(make_cfg(*overrides))
    (path,) = (tmp_path / "results" / "runs").glob("*.json")
    record = json.loads(path.read_text())
    counts = record["parameters"]
    assert counts["total"] == counts["trainable"] == counts["attconv"] + counts["embeddings"] + counts["head"]
    assert counts["attconv"] == {"attconv_light": 360_300, "attconv_light_noconv": 361_200,
                                 "attconv_advanced": 1_352_100}[model]
    assert record["attention"] == {"name": "none"} and record["hparams"]["contexts"] == "conc"
    (predictions,) = (tmp_path / "results" / "predictions").glob("*.jsonl.gz")
    rows = read_predictions(predictions)
    if task == "yelp":  # Figure 5 groups by it: the text's tokens before truncation
        assert all(isinstance(r["length"], int) and r["length"] >= 4 for r in rows)
    if task == "fever":
        assert record["data"]["evidence"] == "retrieved" and all("num_gold_evidence" in r for r in rows)
