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
