"""Which records land in which cell of the shipped tables: each experiment's runs in its own rows, ablation
runs never in the main cells, SST-5 apart from SST-2; and LaTeX that pdflatex accepts."""

from __future__ import annotations

import pytest

from coda_exp.table_render import render_latex
from coda_exp.tables import build_table
from tests.results.records import rec


@pytest.mark.parametrize("experiment,task", [("table_8", "wikiqa"), ("table_8", "scitail"), ("table_8", "dnli"),
                                             ("table_8_nmt", "iwslt15_envi")])
def test_table_8_experiments_fill_exactly_their_row_and_column(tmp_path, compose, shipped, experiment, task):
    """Each centring of both Table 8 experiments lands in its own row of its own columns, and nowhere else."""
    from coda_exp import pipeline
    from coda_exp.tables import record_matches

    t8 = shipped["table_8"]
    for k, centering in enumerate(("none", "e", "e_n")):
        extra = [f"task={task}"] if experiment == "table_8" else []
        cfg = compose([f"experiment={experiment}", f"centering={centering}", "scale=fixture", *extra], tmp_path)
        record = {"task": cfg.task.name, "model": cfg.model.name, "attention": pipeline.attention_options(cfg),
                  "metrics": {c.metric: 1.0 for c in t8.columns}}
        hits = {(r.name, c.name) for r in t8.rows for c in t8.columns
                if record_matches(record, c.task, c.metric, {**r.match, **c.match})}
        assert hits and {row for row, _ in hits} == {t8.rows[k].name}, (centering, hits)
        assert all(next(c for c in t8.columns if c.name == col).task == task for _, col in hits)


# (experiment, sweep overrides of one job, the table whose main rows must *not* take its record)
_ABLATIONS = [
    ("table_8", ["task=wikiqa", "centering=e"], "table_2"),
    ("table_8", ["task=scitail", "centering=e_n"], "table_3"),
    ("table_8_nmt", ["centering=e"], "table_4"),
    ("table_9", ["task=iwslt15_envi", "model=coda_transformer", "model.scoring.e_fn=sigmoid",
                 "model.scoring.n_fn=tanh"], "table_4"),
    ("table_2", ["task=wikiqa", "model=decompatt", "model/attention=coda"], "table_2"),  # D-ATT with CoDA swapped in
    ("table_6", ["model=coda_transformer", "model.scoring.center_e=true"], "table_6"),
]


@pytest.mark.parametrize("experiment,overrides,table", _ABLATIONS)
def test_ablation_runs_never_land_in_the_main_rows(tmp_path, compose, shipped, experiment, overrides, table):
    """A run with a non-default attention (an ablation) must not be pooled into a table's D-ATT / +CoDA cells,
    while the default configuration of the same experiment does land there."""
    from coda_exp import pipeline
    from coda_exp.tables import record_matches

    spec = shipped[table]

    def hits(cfg):
        record = {"task": cfg.task.name, "model": cfg.model.name, "attention": pipeline.attention_options(cfg),
                  "metrics": {c.metric: 1.0 for c in spec.columns}}
        return {r.name for r in spec.rows if r.match is not None for c in spec.columns
                if record_matches(record, c.task, c.metric, {**r.match, **c.match})}

    assert not hits(compose([f"experiment={experiment}", "scale=fixture", *overrides], tmp_path))
    main = {"table_2": ["experiment=table_2", "task=wikiqa"], "table_3": ["experiment=table_3", "task=scitail"],
            "table_4": ["experiment=table_4", "task=iwslt15_envi"], "table_6": ["experiment=table_6"]}[table]
    for model in {"table_2": ("decompatt", "decompatt_coda"), "table_3": ("decompatt", "decompatt_coda")}.get(
            table, ("transformer", "coda_transformer")):
        assert len(hits(compose([*main, f"model={model}", "scale=fixture"], tmp_path))) == 1, model


def test_sst5_runs_stay_out_of_table_5(shipped):
    from coda_exp.tables import record_matches

    col = next(c for c in shipped["table_5"].columns if c.task == "sst")
    row = shipped["table_5"].rows[0]
    run = {"task": "sst", "model": "transformer_classifier", "attention": {"name": "softmax"},
           "metrics": {"test/acc": 0.8}, "data": {"dataset": "sst2"}}
    assert record_matches(run, col.task, col.metric, {**row.match, **col.match})
    run["data"]["dataset"] = "sst5"
    assert not record_matches(run, col.task, col.metric, {**row.match, **col.match})


def test_latex_output_is_ascii_for_pdflatex(shipped):
    """Δ rows and minus signs must reach LaTeX as commands: pdflatex without unicode setup rejects them."""
    from coda_exp.table_render import latex_escape

    assert latex_escape("Δ = −2.0 ± 0.1, n ≥ 3") == r"$\Delta$ = $-$2.0 $\pm$ 0.1, n $\geq$ 3"
    records = [rec(task="mlu", model=m, seed=s, metrics={"test/acc_seq": a},
                   attention={"name": "softmax"} if m == "transformer" else
                   {"name": "coda", "e_fn": "tanh", "n_fn": "sigmoid", "center_e": False, "center_n": False,
                    "gate_scale": None})
               for s in (1, 2, 3) for m, a in (("transformer", 0.5 + s / 50), ("coda_transformer", 0.4 + s / 40))]
    tex = render_latex(build_table(shipped["table_6"], records))
    assert "Delta" in tex and tex.isascii(), [ch for ch in tex if not ch.isascii()]
