"""CoDACrossAttention and MultiHeadAttention (softmax / CoDA scoring): interface, masking, references."""

from __future__ import annotations

import functools
import inspect
import math

import pytest
import torch
from torch import nn

from coda_exp.attention import (
    CoDACrossAttention,
    CoDAScoring,
    MultiHeadAttention,
    SoftmaxCrossAttention,
    SoftmaxScoring,
    coda_matrix,
)


def _pair(seed=0, batch=3, la=5, lb=7, dim=6):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(batch, la, dim, dtype=torch.float64, generator=gen)
    b = torch.randn(batch, lb, dim, dtype=torch.float64, generator=gen)
    mask_a = torch.ones(batch, la, dtype=torch.bool)
    mask_b = torch.ones(batch, lb, dtype=torch.bool)
    mask_a[0, 3:] = False
    mask_b[1, 4:] = False
    return a, b, mask_a, mask_b


def _module(**kw):
    torch.manual_seed(0)
    return CoDACrossAttention(6, hidden=8, **kw).double().eval()


def test_signature_matches_softmax_cross_attention_and_hydra_partial():
    fwd, ref = inspect.signature(CoDACrossAttention.forward), inspect.signature(SoftmaxCrossAttention.forward)
    assert list(fwd.parameters) == list(ref.parameters)
    params = list(inspect.signature(CoDACrossAttention.__init__).parameters.values())[1:]
    assert params[0].name == "dim" and params[0].default is inspect.Parameter.empty
    for p in params[1:]:
        assert p.default is not inspect.Parameter.empty and isinstance(p.default, (str, float, bool, int)), p.name
    module = functools.partial(CoDACrossAttention, hidden=8, projection="linear", n_fn="tanh")(dim=6)
    assert isinstance(module, nn.Module)


@pytest.mark.parametrize("projection,share", [("mlp", True), ("mlp", False), ("linear", True), ("linear", False)])
def test_outputs_are_eq7_of_the_projected_coda_matrix(projection, share):
    a, b, mask_a, mask_b = _pair()
    mod = _module(projection=projection, share_projections=share, center_e=True, alpha=0.5)
    a2, b2, mats = mod(a, b, mask_a, mask_b, return_maps=True)
    assert a2.shape == a.shape and b2.shape == b.shape and mats.names() == ["weights", "E", "N", "f_E", "f_N", "gate"]
    torch.testing.assert_close(mats.gate, 2.0 * mats.f_N)  # default gate_scale = 2: the gate is 2 f_N(N)
    pm = mask_a.unsqueeze(-1) & mask_b.unsqueeze(-2)
    t = 8 ** -0.5  # scale=True (default): both temperatures divided by sqrt(hidden)
    m = coda_matrix(mod.proj_e(a), mod.proj_e(b), mod.proj_n(a), mod.proj_n(b), alpha=0.5 * t, beta=t,
                    center_e=True, mask=pm, scale=False, gate_scale=2.0)
    torch.testing.assert_close(mats.weights, m)
    assert torch.equal(mats.mask, pm) and mod.kernel_used == "numba"  # maps need the materialising path
    torch.testing.assert_close(a2, m @ b)
    torch.testing.assert_close(b2, m.transpose(1, 2) @ a)
    assert (mod.proj_n is mod.proj_e) == share
    n_params = sum(p.numel() for p in mod.parameters())
    assert n_params == (1 if share else 2) * (6 * 8 + 8)
    out = mod(a, b, mask_a, mask_b)
    assert len(out) == 2 and torch.equal(out[0], a2) and torch.equal(out[1], b2)


def test_scale_divides_both_temperatures_by_sqrt_hidden_and_keeps_the_gate_alive():
    a, b, mask_a, mask_b = _pair()
    literal = _module(scale=False, alpha=0.5, beta=2.0)
    scaled = _module(scale=True, alpha=0.5, beta=2.0)
    scaled.load_state_dict(literal.state_dict())
    pm = mask_a.unsqueeze(-1) & mask_b.unsqueeze(-2)
    e_a, e_b = literal.proj_e(a), literal.proj_e(b)
    for mod, t in ((literal, 1.0), (scaled, 8 ** -0.5)):
        _, _, mats = mod(a, b, mask_a, mask_b, return_maps=True)
        torch.testing.assert_close(mats.weights, coda_matrix(e_a, e_b, e_a, e_b, alpha=0.5 * t, beta=2.0 * t,
                                                             mask=pm, scale=False))
    with pytest.raises(ValueError, match="scale"):
        _module(scale="yes")
    # DecompAtt's size (hidden 200) at initialisation: the literal gate is dead, the scaled one is not
    torch.manual_seed(0)
    x, y = torch.randn(4, 12, 200), torch.randn(4, 9, 200)
    gates = {}
    for scale in (False, True):
        torch.manual_seed(1)
        mod = CoDACrossAttention(200, 200, dropout=0.0, scale=scale)
        gates[scale] = mod(x, y, return_maps=True)[2].gate.mean().item()
    assert gates[False] < 1e-15 and 1e-5 < gates[True] < 1.0  # ~1e-4 vs far below float32 resolution of 1


def test_padded_rows_are_exactly_zero_and_padding_changes_nothing():
    a, b, mask_a, mask_b = _pair(1)
    mod = _module(center_e=True, center_n=True)
    a2, b2 = mod(a, b, mask_a, mask_b)
    assert torch.equal(a2[~mask_a], torch.zeros_like(a2[~mask_a]))
    assert torch.equal(b2[~mask_b], torch.zeros_like(b2[~mask_b]))
    # append 3 / 2 padding tokens with arbitrary content: valid outputs identical
    gen = torch.Generator().manual_seed(2)
    a_pad = torch.cat([a, 100 * torch.randn(3, 3, 6, dtype=torch.float64, generator=gen)], 1)
    b_pad = torch.cat([b, 100 * torch.randn(3, 2, 6, dtype=torch.float64, generator=gen)], 1)
    ma_pad = torch.cat([mask_a, torch.zeros(3, 3, dtype=torch.bool)], 1)
    mb_pad = torch.cat([mask_b, torch.zeros(3, 2, dtype=torch.bool)], 1)
    a3, b3 = mod(a_pad, b_pad, ma_pad, mb_pad)
    torch.testing.assert_close(a3[:, :5][mask_a], a2[mask_a], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(b3[:, :7][mask_b], b2[mask_b], rtol=1e-12, atol=1e-12)
    assert torch.equal(a3[:, 5:], torch.zeros_like(a3[:, 5:]))


def test_gradients_reach_parameters_and_cpu_runs_are_bitwise_equal():
    a, b, mask_a, mask_b = (t.float() if t.is_floating_point() else t for t in _pair(3))
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        mod = CoDACrossAttention(6, hidden=8, share_projections=False, dropout=0.0)
        a2, b2 = mod(a, b, mask_a, mask_b)
        (a2.square().sum() + b2.sum()).backward()
        runs.append([a2, b2] + [p.grad for p in mod.parameters()])
    assert all(g is not None and g.abs().sum() > 0 for g in runs[0][2:])
    for x, y in zip(*runs):
        assert torch.equal(x, y)


def test_bad_module_options():
    with pytest.raises(ValueError, match="projection must be one of"):
        CoDACrossAttention(6, projection="conv")
    with pytest.raises(ValueError, match="n_fn must be one of"):
        CoDACrossAttention(6, n_fn="relu")
    with pytest.raises(ValueError, match="center_n must be True or False"):
        CoDAScoring(center_n="both")
    with pytest.raises(ValueError, match="gate_scale must be"):
        CoDAScoring(gate_scale=0.0)
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(10, 3, SoftmaxScoring())


# ----------------------------------------------------------------------------- multi-head attention


def _mha_inputs(seed=0, batch=2, lq=5, lk=7, d=8):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, lq, d, dtype=torch.float64, generator=gen)
    kv = torch.randn(batch, lk, d, dtype=torch.float64, generator=gen)
    kpm = torch.ones(batch, lk, dtype=torch.bool)
    kpm[0, 4:] = False
    return q, kv, kpm


def test_softmax_scoring_matches_torch_multihead_attention():
    q, kv, kpm = _mha_inputs()
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(8, 2, batch_first=True).double().eval()
    mha = MultiHeadAttention(8, 2, SoftmaxScoring()).double().eval()
    w = ref.in_proj_weight.detach().chunk(3)
    bias = ref.in_proj_bias.detach().chunk(3)
    with torch.no_grad():
        for lin, wi, bi in zip((mha.q_proj, mha.k_proj, mha.v_proj), w, bias):
            lin.weight.copy_(wi)
            lin.bias.copy_(bi)
        mha.out_proj.weight.copy_(ref.out_proj.weight)
        mha.out_proj.bias.copy_(ref.out_proj.bias)
    want, want_w = ref(q, kv, kv, key_padding_mask=~kpm, average_attn_weights=False)
    torch.testing.assert_close(mha(q, kv, kv, key_padding_mask=kpm), want)
    got, got_maps = mha(q, kv, kv, key_padding_mask=kpm, return_maps=True)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_maps.weights, want_w)


def _centred(x, full, center_over):
    """x minus the mean of its valid entries, per (..., Lq, Lk) slice or per query row, by explicit loops."""
    if center_over == "slice":
        means = torch.stack([xs[ms].mean() for xs, ms in zip(x.reshape(-1, *x.shape[-2:]),
                                                              full.reshape(-1, *x.shape[-2:]))])
        return x - means.reshape(*x.shape[:-2], 1, 1)
    means = torch.stack([xs[ms].mean() if ms.any() else xs.new_zeros(())
                         for xs, ms in zip(x.reshape(-1, x.shape[-1]), full.reshape(-1, x.shape[-1]))])
    return x - means.reshape(*x.shape[:-1], 1)


def coda_eq10(q, k, v, mask, scale, center_e=False, center_n=False, center_over="slice"):
    """Eq. 10 per head, written out with the (Lq, Lk, dk) broadcast; centring by explicit loops."""
    s = math.sqrt(q.shape[-1]) if scale else 1.0
    e = q @ k.transpose(-1, -2) / s
    g = -(q.unsqueeze(-2) - k.unsqueeze(-3)).abs().sum(-1) / s
    full = mask.expand(g.shape)
    e = torch.tanh(_centred(e, full, center_over) if center_e else e)
    gated = torch.sigmoid(_centred(g, full, center_over)) if center_n else 2 * torch.sigmoid(g)
    return (e * gated * full) @ v


@pytest.mark.parametrize("scale", [True, False])
@pytest.mark.parametrize("center_e,center_n,center_over", [(False, False, "row"), (False, True, "row"),
                                                           (False, True, "slice"), (True, False, "row"),
                                                           (True, True, "row"), (True, True, "slice")])
@pytest.mark.parametrize("causal", [False, True])
def test_coda_scoring_is_eq10(scale, center_e, center_n, center_over, causal):
    gen = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 3, 6, 4, dtype=torch.float64, generator=gen, requires_grad=True) for _ in range(3))
    kpm = torch.ones(2, 6, dtype=torch.bool)
    kpm[1, 4:] = False
    mask = kpm[:, None, None, :] & (torch.ones(6, 6, dtype=torch.bool).tril() if causal else True)
    scoring = CoDAScoring(scale=scale, center_e=center_e, center_n=center_n, center_over=center_over)
    out, maps = scoring(q, k, v, mask=mask, return_maps=True)
    weights = maps.weights
    want = coda_eq10(q, k, v, mask, scale, center_e, center_n, center_over)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-12)
    grad = torch.randn(want.shape, dtype=torch.float64, generator=gen)
    for g, w in zip(torch.autograd.grad(out, (q, k, v), grad), torch.autograd.grad(want, (q, k, v), grad)):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-10)
    assert torch.equal(weights[~mask.expand(weights.shape)], torch.zeros(int((~mask.expand(weights.shape)).sum()),
                                                                         dtype=torch.float64))


def test_coda_scoring_gate_scale_defaults_to_eq5_without_centring_and_1_with_it():
    assert CoDAScoring().options.gate == 2.0
    assert CoDAScoring(center_n=True).options.gate == 1.0
    assert CoDAScoring(center_n=True, gate_scale=2.0).options.gate == 2.0


def test_coda_masked_keys_contribute_exactly_zero_without_renormalisation():
    q, kv, kpm = _mha_inputs(5)
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, CoDAScoring()).double().eval()
    out = mha(q, kv, kv, key_padding_mask=kpm)
    with_maps, maps = mha(q, kv, kv, key_padding_mask=kpm, return_maps=True)  # the materialising path
    torch.testing.assert_close(with_maps, out, rtol=1e-12, atol=1e-14)
    weights = maps.weights
    kv2 = kv.clone()
    kv2[0, 4:] = 1e3 * torch.randn(3, 8, dtype=torch.float64)  # change only the padded keys/values
    assert torch.equal(mha(q, kv2, kv2, key_padding_mask=kpm), out)
    row_sums = weights.sum(-1)
    assert (row_sums - 1).abs().max() > 1e-3  # quasi-attention: rows are not normalised


@pytest.mark.parametrize("scoring", [SoftmaxScoring(), CoDAScoring(), CoDAScoring(center_n=True),
                                     CoDAScoring(center_e=True, center_n=True)])
def test_causal_output_ignores_the_future_and_padding_queries_stay_finite(scoring):
    q, _, _ = _mha_inputs(6, lq=6, lk=6)
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, scoring).double().eval()
    out = mha(q, q, q, causal=True)
    q2 = q.clone()
    q2[:, 4:] = torch.randn(2, 2, 8, dtype=torch.float64)
    torch.testing.assert_close(mha(q2, q2, q2, causal=True)[:, :4], out[:, :4], rtol=1e-12, atol=1e-12)
    kpm = torch.ones(2, 6, dtype=torch.bool)
    kpm[1] = False  # a sequence that is all padding: every query row has no valid key
    kpm[0, 0] = False  # with causal, query 0 of sequence 0 has no valid key either
    for causal in (False, True):
        res = mha(q, q, q, key_padding_mask=kpm, causal=causal, return_maps=True)
        assert torch.isfinite(res[0]).all() and torch.isfinite(res[1].weights).all()
        assert torch.isfinite(mha(q, q, q, key_padding_mask=kpm, causal=causal)).all()


def test_slice_centring_leaks_the_future_row_centring_does_not():
    """Why CoDAScoring centres per query row by default: the slice mean mixes in later positions."""
    gen = torch.Generator().manual_seed(8)
    q = torch.randn(1, 1, 6, 4, dtype=torch.float64, generator=gen)
    q2 = q.clone()
    q2[..., 5, :] += 3.0  # change the last position only
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    outs = {over: [CoDAScoring(center_n=True, center_over=over)(x, x, x, mask=mask)[0][..., :5, :] for x in (q, q2)]
            for over in ("row", "slice")}
    torch.testing.assert_close(outs["row"][0], outs["row"][1], rtol=1e-12, atol=1e-12)
    assert (outs["slice"][0] - outs["slice"][1]).abs().max() > 1e-4


def test_multihead_trains_with_dropout_and_grads_flow():
    q, kv, kpm = (t.float() if t.is_floating_point() else t for t in _mha_inputs(7))
    mha = MultiHeadAttention(8, 2, CoDAScoring(scale=False), dropout=0.1).train()
    out = mha(q, kv, kv, key_padding_mask=kpm)
    out.square().sum().backward()
    assert out.shape == q.shape
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in mha.parameters())


def _append_padding(x, mask, extra, gen):
    """Append ``extra`` padded positions with large arbitrary content: (B, L + extra, d), (B, L + extra)."""
    junk = 50 * torch.randn(x.shape[0], extra, x.shape[2], dtype=x.dtype, generator=gen)
    return torch.cat([x, junk], 1), torch.cat([mask, torch.zeros(x.shape[0], extra, dtype=torch.bool)], 1)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("self_attention", [True, False])
@pytest.mark.parametrize("center_e,center_n", [(True, True), (False, True), (True, False), (False, False)])
def test_slice_centring_ignores_padded_queries(self_attention, causal, center_e, center_n):
    """center_over="slice": padded query rows (and keys) must stay out of the means of E and N."""
    gen = torch.Generator().manual_seed(9)
    lq, lk = (6, 6) if self_attention else (5, 7)
    q = torch.randn(2, lq, 8, dtype=torch.float64, generator=gen)
    kv = q if self_attention else torch.randn(2, lk, 8, dtype=torch.float64, generator=gen)
    qpm = torch.ones(2, lq, dtype=torch.bool)
    qpm[1, 4:] = False
    kpm = qpm if self_attention else torch.ones(2, lk, dtype=torch.bool)
    if not self_attention:
        kpm[0, 5:] = False
    torch.manual_seed(0)
    scoring = CoDAScoring(center_e=center_e, center_n=center_n, center_over="slice")
    mha = MultiHeadAttention(8, 2, scoring).double().eval()
    q2, qpm2 = _append_padding(q, qpm, 3, gen)
    if self_attention:  # the query mask is taken from the key mask
        out = mha(q, q, q, key_padding_mask=qpm, causal=causal)
        out2 = mha(q2, q2, q2, key_padding_mask=qpm2, causal=causal)
    else:  # causal cross-attention aligns the last query with the last key: append as many keys as queries
        kv2, kpm2 = _append_padding(kv, kpm, 3 if causal else 2, gen)
        out = mha(q, kv, kv, key_padding_mask=kpm, causal=causal, query_padding_mask=qpm)
        out2 = mha(q2, kv2, kv2, key_padding_mask=kpm2, causal=causal, query_padding_mask=qpm2)
    torch.testing.assert_close(out2[:, :lq][qpm], out[qpm], rtol=1e-12, atol=1e-12)
    # padded query rows attend to nothing: their output is out_proj(0) = its bias
    torch.testing.assert_close(out2[~qpm2], mha.out_proj.bias.expand(int((~qpm2).sum()), 8), rtol=0, atol=0)
    # per head: the query mask is the reference's pair mask restricted to real queries
    gen = torch.Generator().manual_seed(10)
    qh, kh, vh = (torch.randn(2, 2, 5, 4, dtype=torch.float64, generator=gen) for _ in range(3))
    qm = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)[:, None, :, None]  # (B, 1, Lq, 1)
    km = qm.transpose(-1, -2) & (torch.ones(5, 5, dtype=torch.bool).tril() if causal else True)  # (B, 1, Lq|1, Lk)
    got, _ = scoring(qh, kh, vh, mask=km, query_mask=qm)
    want = coda_eq10(qh, kh, vh, km & qm, True, center_e, center_n, "slice")
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_softmax_path_is_unchanged_by_a_query_mask(causal):
    q, kv, kpm = _mha_inputs(11, lq=7, lk=7)
    qpm = kpm.clone()
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, SoftmaxScoring()).double().eval()
    for kw in ({}, {"return_maps": True}):
        want = mha(q, kv, kv, key_padding_mask=kpm, causal=causal, **kw)
        got = mha(q, kv, kv, key_padding_mask=kpm, causal=causal, query_padding_mask=qpm, **kw)
        for g, w in zip((got[0], got[1].weights) if kw else [got], (want[0], want[1].weights) if kw else [want]):
            assert torch.equal(g, w)


@pytest.mark.parametrize("kernel", ["auto", "torch", "chunked", "numba"])
@pytest.mark.parametrize("center", [{"center_e": True}, {"center_n": True, "center_over": "row"}])
def test_centring_with_a_mask_of_more_batch_dimensions_than_q_and_k(kernel, center):
    """Queries and keys shared by a batch (batch dimension 1) and a (3, 1, 1, Lk) key mask: uncentred it ran, centred
    ``torch.broadcast_to`` raised (the mean's mask was broadcast to E's shape); the answer is that of q, k, v
    expanded to the mask's batch."""
    from coda_exp.attention import coda_attention, coda_matrix

    gen = torch.Generator().manual_seed(3)
    q, k = (torch.randn(1, 2, n, 4, dtype=torch.float64, generator=gen) for n in (5, 6))
    v = torch.randn(1, 2, 6, 3, dtype=torch.float64, generator=gen)
    mask = torch.ones(3, 1, 1, 6, dtype=torch.bool)
    mask[1, ..., 4:] = False
    got = coda_attention(q, k, v, mask=mask, kernel=kernel, **center)
    want = coda_attention(*(x.expand(3, -1, -1, -1) for x in (q, k, v)), mask=mask, kernel="torch", **center)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    a, b = q[0, :1], k[0, :1]  # (1, 5, 4), (1, 6, 4)
    pairs = torch.ones(3, 5, 6, dtype=torch.bool)
    pairs[2, :, 3:] = False
    got = coda_matrix(a, b, a, b, mask=pairs, **center)
    want = coda_matrix(*(x.expand(3, -1, -1) for x in (a, b, a, b)), mask=pairs, **center)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("side", ["a", "b"])
def test_cross_attention_names_an_input_of_another_feature_size(side):
    """b of 7 features for a module of dim 8 was the projection's "mat1 and mat2 shapes cannot be multiplied"."""
    inputs = {"a": torch.randn(2, 5, 8), "b": torch.randn(2, 3, 8)}
    inputs[side] = torch.randn(2, 4, 7)
    with pytest.raises(ValueError, match=rf"CoDACrossAttention: {side} must be a floating tensor \(B, L, dim=8\)"):
        CoDACrossAttention(8, hidden=4)(inputs["a"], inputs["b"])
