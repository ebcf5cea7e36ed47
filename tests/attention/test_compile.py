"""torch.compile(fullgraph=True) traces CoDA models through every CPU kernel (issue 22 item 4): the numba kernels
(fused, the L1 distance) and the Flash-CoDA backends are torch.library custom ops with fake implementations and
registered autograd formulas. Forward and backward match eager. Flash-CoDA with dropout draws its seed as a tensor
on the inputs' device (no ``int()``): it traces with fullgraph too."""

from __future__ import annotations

import pytest
import torch

from coda_exp.attention import CoDACrossAttention, CoDAScoring, MultiHeadAttention


def _same_as_eager(module, *inputs):
    torch.manual_seed(0)
    compiled = torch.compile(module, fullgraph=True)
    leaves = [x.detach().clone().requires_grad_() for x in inputs]
    eager_leaves = [x.detach().clone().requires_grad_() for x in inputs]
    torch.manual_seed(1)  # the same RNG state for each call (dropout draws from it)
    got = compiled(*leaves)
    torch.manual_seed(1)
    want = module(*eager_leaves)
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    sum(g.sum() for g in got).backward()
    sum(w.sum() for w in want).backward()
    for a, b in zip(leaves, eager_leaves):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("scoring,kernel", [
    ({}, "fused"),  # auto on a small M
    pytest.param({"kernel": "flash"}, "flash", marks=pytest.mark.slow),
    pytest.param({"center_n": True}, "numba", marks=pytest.mark.slow),  # centred: the numba L1 distance
])
def test_compiled_multihead_coda_matches_eager(scoring, kernel):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2, CoDAScoring(**scoring)).eval()
    x = torch.randn(2, 9, 16)
    _same_as_eager(mha, x, x, x)
    assert mha.scoring.kernel_used == kernel


@pytest.mark.slow
def test_compiled_cross_attention_matches_eager():
    torch.manual_seed(0)
    cross = CoDACrossAttention(16, hidden=8, dropout=0.0)
    _same_as_eager(cross, torch.randn(2, 5, 16), torch.randn(2, 7, 16))
    assert cross.kernel_used == "fused"


@pytest.mark.slow
def test_compiled_flash_with_dropout_has_no_graph_break():
    """The dropout seed is a device tensor the op reads: no host sync, no graph break. With inductor's
    ``fallback_random`` the compiled draw is eager's, so the dropped pairs and the results agree. (Set through the
    config's own ``patch``: monkeypatch's undo deletes the option, and every later compile in the process fails.)"""
    import torch._inductor.config as inductor_config

    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2, CoDAScoring(kernel="flash"), dropout=0.3).train()
    x = torch.randn(2, 9, 16)
    with inductor_config.patch(fallback_random=True):
        _same_as_eager(mha, x, x, x)
    assert mha.scoring.kernel_used == "flash"


@pytest.mark.parametrize("backend,kernel,dropout", [
    ("eager", "auto", 0.0),  # dynamo alone (where SymBool was refused): seconds
    ("eager", "flash", 0.3),  # the flash seed is drawn as in eager: same dropped pairs
    pytest.param("inductor", "auto", 0.0, marks=pytest.mark.slow),
])
def test_dynamic_shapes_in_train_mode_match_eager(backend, kernel, dropout):
    """dynamic=True makes the module's dropout a symbolic float: ``F.dropout(..., training=p > 0)`` got a SymBool
    and dynamo refused the graph (train mode, even at p = 0). Two sizes run through one compiled module."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2, CoDAScoring(kernel=kernel), dropout=dropout).train()
    compiled = torch.compile(mha, fullgraph=True, dynamic=True, backend=backend)
    for batch, length in ((2, 9), (3, 6)):
        x = torch.randn(batch, length, 16)
        leaves, eager_leaves = x.clone().requires_grad_(), x.clone().requires_grad_()
        torch.manual_seed(1)
        got = compiled(leaves, leaves, leaves)
        torch.manual_seed(1)
        want = mha(eager_leaves, eager_leaves, eager_leaves)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        got.square().sum().backward()
        want.square().sum().backward()
        torch.testing.assert_close(leaves.grad, eager_leaves.grad, rtol=1e-5, atol=1e-6)


def _model(name):
    import functools

    from coda_exp.attention import CoDACrossAttention
    from coda_exp.models import DecompAtt, TransformerClassifier, TransformerSeq2Seq

    torch.manual_seed(0)
    if name == "coda_transformer":
        return TransformerSeq2Seq(13, 13, CoDAScoring, d_model=16, num_layers=1, num_heads=2, d_ff=32)
    if name == "coda_transformer_classifier":
        return TransformerClassifier(13, 4, CoDAScoring, d_model=16, num_heads=2, d_ff=32)
    attention = functools.partial(CoDACrossAttention, hidden=16, dropout=0.0)
    return DecompAtt(vocab_size=13, num_classes=3, attention=attention, hidden_size=16, embedding_dim=8,
                     intra_attention=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["coda_transformer", "coda_transformer_classifier", "decompatt_coda"])
def test_compiled_coda_models_match_eager(name):
    """Whole CoDA models (padding masks, causal decoder, cross-attention) trace with fullgraph and match eager
    forward and parameter gradients (DecaProp + CoDA: ``tests/models/test_decaprop.py``)."""
    eager = _model(name).double().eval()  # float64: float32 sums in another order differ by ~1e-6
    compiled_model = _model(name).double().eval()
    gen = torch.Generator().manual_seed(1)
    ids, other = torch.randint(3, 13, (3, 7), generator=gen), torch.randint(3, 13, (3, 6), generator=gen)
    mask, other_mask = torch.ones(3, 7, dtype=torch.bool), torch.ones(3, 6, dtype=torch.bool)
    mask[1, 5:] = other_mask[2, 4:] = False
    # two different sentences: one sentence against itself makes exact L1 ties, whose subgradient can flip with
    # the order of a projection's float64 sums
    inputs = (ids, mask) if name == "coda_transformer_classifier" else (ids, mask, other, other_mask)
    got = torch.compile(compiled_model, fullgraph=True)(*inputs)
    want = eager(*inputs)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    got.sum().backward()
    want.sum().backward()
    for (name_, a), b in zip(compiled_model.named_parameters(), eager.parameters()):
        assert (a.grad is None) == (b.grad is None), name_
        if a.grad is not None:
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-10, atol=1e-12, msg=name_)
