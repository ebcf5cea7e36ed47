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
from tests.results.records import cell, rec


def span(task, model, seed, em, f1):
    return rec(task=task, model=model, seed=seed, scale="paper", fingerprint=GRID_FINGERPRINT,
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
