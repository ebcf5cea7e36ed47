"""CoDA Table 1 (open-domain QA) filled from synthetic span records, and experiment=table_1's grid."""

from __future__ import annotations

import itertools

import pytest
import yaml

from coda_exp.fingerprint import GRID_FINGERPRINT, fingerprint
from coda_exp.table_render import render_markdown
from coda_exp.table_spec import load_table_spec
from coda_exp.tables import NO_RUN, NOT_RUN, build_table
from tests import ROOT
from tests.results.records import TODAYS_GRID, cell, rec


def span(task, model, seed, em, f1):
    attention = ({"name": "none"} if model == "decaprop" else
                 {"name": "coda", "e_fn": "tanh", "n_fn": "sigmoid", "center_e": False, "center_n": False,
                  "gate_scale": 2.0, "scale": True})
    hparams = {"coda_in_bac": False, "coda_in_self_attention": False}
    # records of today's rule: one of an earlier rule ran DecaProp's old defaults (experiments.earlier_defaults)
    return rec(task=task, model=model, seed=seed, scale="paper", **TODAYS_GRID, attention=attention,
               hparams=hparams,
               metrics={"test/em": em, "test/f1": f1, "val/f1": f1 + 0.01,
                        **({"test/em_unigram": em + 0.02, "test/f1_ngram": f1 - 0.02} if task == "searchqa" else {})})


def test_table_1_from_synthetic_records():
    spec = load_table_spec(ROOT / "configs" / "tables" / "table_1.yaml")
    records = [span("quasart", "decaprop", s, em, em + 0.08) for s, em in ((1, 0.38), (2, 0.39), (3, 0.40))]
    records += [span("quasart", "decaprop_coda", s, em, em + 0.08) for s, em in ((1, 0.41), (2, 0.42))]
    records += [span("searchqa", "decaprop", 1, 0.56, 0.63)]
    table = build_table(spec, records)
    assert cell(table, "DecaProp", "Quasar-T EM").mean == pytest.approx(39.0)  # fractions x 100
    assert cell(table, "DecaProp", "Quasar-T F1").mean == pytest.approx(47.0)
    assert cell(table, "DecaProp + CoDA", "Quasar-T EM").mean == pytest.approx(41.5)
    assert cell(table, "DecaProp", "SearchQA F1").mean == pytest.approx(63.0)
    assert cell(table, "DecaProp + CoDA", "SearchQA EM").status == NO_RUN
    assert cell(table, "BiDAF", "Quasar-T EM").status == NOT_RUN and cell(table, "BiDAF", "Quasar-T EM").paper == 25.9
    md = render_markdown(table)
    assert "DecaProp + CoDA" in md and "41.3" in md  # the paper's number beside ours


def test_experiment_table_1_sweeps_both_datasets_models_and_seeds():
    params = yaml.safe_load((ROOT / "configs" / "experiment" / "table_1.yaml").read_text())["hydra"]["sweeper"][
        "params"]
    axes = {k: str(v).split(",") for k, v in params.items()}
    assert axes == {"task": ["quasart", "searchqa"], "model": ["decaprop", "decaprop_coda"], "seed": ["1", "2", "3"]}
    jobs = [[f"{k}={v}" for k, v in zip(axes, combo)] for combo in itertools.product(*axes.values())]
    assert len(jobs) == 12 and all(fingerprint(["experiment=table_1", *job]) == GRID_FINGERPRINT for job in jobs)


@pytest.mark.parametrize("task", ["quasart", "searchqa"])
def test_task_configs_compose_and_read_their_fixture(make_cfg, task):
    """task=quasart|searchqa at scale=fixture: the data module reads the fixture, the task's settings are the
    paper's (Adam 1e-3, batch 100 and 10 epochs at scale=paper, max_span 16 (j - i <= 15), monitor val/f1)."""
    from hydra.utils import get_class, instantiate

    paper = make_cfg(f"task={task}")
    assert (paper.optimizer.lr, paper.data.batch_size, paper.task.epochs) == (0.001, 100, 10)
    assert paper.task.family == "span_extraction" and paper.task.monitor == "val/f1"
    assert paper.task.module.max_span == 16 and get_class(paper.task.module._target_).__name__ == "SpanExtractionTask"
    assert paper.data.max_len_passage_train == (400 if task == "searchqa" else 200)
    cpu = make_cfg(f"task={task}", "scale=cpu")
    assert (cpu.data.max_train_examples, cpu.data.batch_size, cpu.task.epochs) == (5000, 32, 3)  # < 1 h here
    assert (cpu.data.max_len_passage_train, cpu.data.max_len_passage_eval) == (200, 400)
    dm = instantiate(make_cfg(f"task={task}", "scale=fixture").data)
    dm.setup()
    assert dm.stats["train_examples"] == 19 and dm.reader.ngram_metrics == (task == "searchqa")


def test_exact_match_has_per_question_outcomes_for_mcnemar():
    from coda_exp.significance import outcomes, paired_test

    base = [{"index": i, "em": float(i % 2), "f1": 0.5} for i in range(20)]
    coda = [{"index": i, "em": 1.0, "f1": 0.9} for i in range(20)]
    assert outcomes("test/em", base) == {(i,): bool(i % 2) for i in range(20)}
    assert outcomes("test/em", []) == {} and outcomes("test/em", [{"index": 0, "label": 1}]) is None
    test = paired_test("test/em", [(base, coda)])
    assert (test.b, test.c, test.seeds) == (0, 10, 1) and test.p < 0.01
    assert outcomes("test/f1", coda) is None  # F1 is graded: no right/wrong per question
