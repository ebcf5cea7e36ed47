"""scripts/plot_coda.py: Figure 2 panels are f_E(E), the unscaled f_N(N) and M, titled after the model's options."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import pytest
import torch

from coda_exp.attention import CoDACrossAttention, SoftmaxCrossAttention
from coda_exp.models import DecompAtt

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def plot_coda():
    spec = importlib.util.spec_from_file_location("plot_coda", ROOT / "scripts" / "plot_coda.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _batches(n=2):
    gen = torch.Generator().manual_seed(0)
    for _ in range(n):
        a, b = torch.randint(1, 30, (3, 6), generator=gen), torch.randint(1, 30, (3, 4), generator=gen)
        a[0, 4:], b[1, 2:] = 0, 0
        yield {"a_ids": a, "a_mask": a != 0, "b_ids": b, "b_mask": b != 0}


def _model(**options):
    torch.manual_seed(0)
    attention = functools.partial(CoDACrossAttention, hidden=8, dropout=0.0, **options)
    return DecompAtt(vocab_size=30, num_classes=3, attention=attention, hidden_size=8, embedding_dim=8,
                     dropout=0.0).eval()


@pytest.mark.parametrize("options,titles", [
    ({}, ["f_E(E) = tanh(E)", "f_N(N) = sigmoid(N)", "M = tanh(E) · 2·sigmoid(N)"]),
    ({"e_fn": "sigmoid", "n_fn": "arctan", "gate_scale": 1.0, "center_n": True},
     ["f_E(E) = sigmoid(E)", "f_N(N) = arctan(N′)", "M = sigmoid(E) · arctan(N′)"]),
])
def test_panels_follow_the_model_and_f_n_is_unscaled(plot_coda, tmp_path, options, titles):
    net = _model(**options)
    found = plot_coda.coda_options(net)
    assert found is net.attention.options
    values = plot_coda.collect(net, _batches(), batches=2)
    assert set(values) == {"E_act", "f_N", "M"}
    n_pairs = sum(int((bt["a_mask"].sum(1) * bt["b_mask"].sum(1)).sum()) for bt in _batches())
    assert all(len(v) == n_pairs for v in values.values())  # the real pairs of both batches only
    lo, hi = {"sigmoid": (0.0, 1.0), "arctan": (-torch.pi / 2, torch.pi / 2)}[found["n_fn"]]
    assert lo <= values["f_N"].min() and values["f_N"].max() <= hi  # f_N(N) itself, not gate_scale * f_N(N)
    first = plot_coda.collect(net, _batches(1), batches=1)
    mats = net.attention_matrices(**next(_batches(1)))
    gate = mats["N_act"][mats["pair_mask"]].detach().numpy()
    assert abs(first["f_N"] * found["gate_scale"] - gate).max() < 1e-6  # the panel shows f_N = gate / gate_scale
    fig = plot_coda.figure(values, "test", found)
    assert [ax.get_title() for ax in fig.axes] == titles
    out = plot_coda.plot(values, tmp_path / "fig.png", "test", found)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_model_without_coda_is_refused(plot_coda):
    torch.manual_seed(0)
    net = DecompAtt(vocab_size=30, num_classes=3, hidden_size=8, embedding_dim=8,
                    attention=functools.partial(SoftmaxCrossAttention, hidden=8))
    with pytest.raises(ValueError, match="no CoDA attention"):
        plot_coda.coda_options(net)
