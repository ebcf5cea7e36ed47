"""Synthetic run records and a demo table spec for the table tests (fixtures are in conftest.py)."""

from __future__ import annotations

import itertools

from coda_exp.fingerprint import FINGERPRINT_RULE, GRID_FINGERPRINT

_counter = itertools.count()

SPEC_YAML = """\
id: t_demo
title: "Demo table_x & 100%"
paper: coda
notes: "Synthetic."
columns:
  - {name: "SNLI", task: snli, metric: test/acc, percent: true}
  - {name: "BLEU", task: iwslt15_envi, metric: test/bleu, match: {model: coda_transformer}}
rows:
  - {name: "D-ATT", match: {model: decompatt}, paper: [84.61, null]}
  - {name: "D-ATT + CoDA", match: {model: decompatt_coda}, paper: [85.71, 29.84]}
  - {name: "centred", match: {model: decompatt_coda, attention.center_e: true}, paper: [85.0, 27.3]}
  - {name: "GA", match: null, paper: [77.7, 26.1]}
  - {name: "dev CoDA", split: val, match: {model: decompatt_coda}, paper: [86.1, 27.8]}
"""


#: a record fingerprinted under today's rule as a run of the plain grid (``rec(**TODAYS_GRID)``)
TODAYS_GRID = {"fingerprint": GRID_FINGERPRINT, "fingerprint_overrides": [], "fingerprint_rule": FINGERPRINT_RULE}


def rec(task="snli", model="decompatt_coda", seed=0, scale="cpu", metrics=None, center_e=False, **extra):
    n = next(_counter)
    record = {
        "schema_version": 1,
        "run_id": f"run-{n:04d}",
        "task": task,
        "model": model,
        "attention": ({"name": "softmax"} if model == "decompatt" else
                      {"name": "coda", "e_fn": "tanh", "n_fn": "sigmoid", "center_e": center_e, "center_n": False,
                       "gate_scale": 2.0, "scale": True}),
        "seed": seed,
        "scale": scale,
        "metrics": metrics if metrics is not None else {"test/acc": 0.85},
        "steps": 10,
        "epochs": 1,
        "wall_time_s": 1.0,
        "device": "cpu",
        "git_commit": None,
        "overrides": [],
        "created": f"2025-01-01T00:{n // 60 % 60:02d}:{n % 60:02d}+00:00",
    }
    record.update(extra)
    return record


def cell(table, row, column):
    i = [r.name for r in table.spec.rows].index(row)
    j = [c.name for c in table.spec.columns].index(column)
    return table.cells[i][j]


def md_row(markdown, name):
    for line in markdown.splitlines():
        parts = [p.strip() for p in line.strip().strip("|").split("|")]
        if parts[0] == name:
            return parts
    raise AssertionError(f"row {name!r} not in markdown")


CODA_SCORING = {"name": "coda", "_target_": "coda_exp.attention.CoDAScoring", "_partial_": True, "scale": True,
                "center_e": False, "center_n": False, "gate_scale": None, "alpha": 1.0, "beta": 1.0, "e_fn": "tanh",
                "n_fn": "sigmoid", "center_over": "row", "kernel": "auto"}


def mlu_rec(model="coda_transformer", seed=1, acc=0.5, curve=(0.0, 0.2, 0.4), steps=(10, 20, 30), scale="cpu",
            options=None, **extra):
    """An MLU run record as the pipeline writes it: the scoring in ``hparams.scoring`` (``options`` change the CoDA
    defaults), the validation curve with its steps (``steps=None``: an older record without them); ``extra``: other
    record keys."""
    from coda_exp.fingerprint import FINGERPRINT_RULE, GRID_FINGERPRINT

    scoring = {"name": "softmax", "_target_": "coda_exp.attention.SoftmaxScoring", "_partial_": True} \
        if model == "transformer" else {**CODA_SCORING, **(options or {})}
    record = rec(task="mlu", model=model, seed=seed, scale=scale, metrics={"test/acc_seq": acc, "val/acc_seq": acc},
                 attention={k: v for k, v in scoring.items() if not k.startswith("_")},
                 hparams={"name": model, "d_model": 128, "scoring": scoring}, fingerprint=GRID_FINGERPRINT,
                 fingerprint_overrides=[], fingerprint_rule=FINGERPRINT_RULE, val_curve=list(curve), val_curve_metric="val/acc_seq")
    if steps is not None:
        record["val_curve_steps"] = list(steps)
    record.update(extra)
    return record


def gates(*layers):
    """gate_stats with one layer per (last mean, last fraction < 0.01), each measured twice."""
    return {f"encoder.layers.{i}.self_attn": {"steps": [50, 100], "mean": [0.9, mean], "frac_lt_0.01": [0.0, frac]}
            for i, (mean, frac) in enumerate(layers)}


def gate_study_records():
    """A small MLU gate study: Transformer and CoDA x 3 seeds (CoDA's gate measured on 2), a centred variant run twice
    for seed 1, a longer run, a run without the test metric."""
    steps = (100, 200, 300, 400)
    softmax = [mlu_rec("transformer", seed=1, acc=0.40, curve=(0.05, 0.12, 0.25, 0.35), steps=steps),
               mlu_rec("transformer", seed=2, acc=0.50, curve=(0.10, 0.20, 0.31, 0.40), steps=steps),
               mlu_rec("transformer", seed=3, acc=0.60, curve=(0.00, 0.05, 0.08, 0.09), steps=steps)]
    coda = [mlu_rec(seed=1, acc=0.10, curve=(0.0, 0.02, 0.05, 0.08), steps=steps, gate_stats=gates((0.4, 0.1),
                                                                                                  (0.6, 0.3))),
            mlu_rec(seed=2, acc=0.15, curve=(0.0, 0.01, 0.02, 0.03), steps=steps, gate_stats=gates((0.3, 0.0),
                                                                                                  (0.5, 0.2))),
            mlu_rec(seed=3, acc=0.20, curve=(0.0, 0.01, 0.02, 0.03), steps=None, gate_stats={})]  # older: no steps
    centred = [mlu_rec(seed=1, acc=0.99, options={"center_n": True}),  # superseded by the later run of seed 1
               mlu_rec(seed=1, acc=0.30, curve=(0.1, 0.3), steps=(500, 1000), options={"center_n": True})]
    longer = [mlu_rec(seed=1, acc=0.7, scale="cpu (task.max_steps=10000)")]
    no_metric = [mlu_rec("transformer", seed=4, metrics={"val/acc_seq": 0.1})]
    return softmax + coda + centred + longer + no_metric


def write_records(folder, records):
    """Each record as ``<folder>/<run_id>.json``; the folder."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    for record in records:
        (folder / f"{record['run_id']}.json").write_text(json.dumps(record), encoding="utf-8")
    return folder
