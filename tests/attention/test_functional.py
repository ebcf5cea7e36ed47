"""coda_matrix / coda_components / compositional_pool against a slow, explicit reference (CoDA eqs. 1-7).

The reference takes the temperatures as given: calls compared to it pass scale=False."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from coda_exp.attention import coda_components, coda_matrix, compositional_pool
from tests.attention.reference import RANGE, REF_FN, make_inputs, reference

E_FNS = ["tanh", "sigmoid"]
N_FNS = ["sigmoid", "tanh", "arctan", "algebraic"]
COMBOS = list(itertools.product(E_FNS, N_FNS, [False, True], [False, True], [1.0, 2.0]))
@pytest.mark.parametrize("kernel", ["numba", "torch"])
@pytest.mark.parametrize("e_fn,n_fn,center_e,center_n,gate_scale", COMBOS)
def test_forward_and_gradients_match_reference(e_fn, n_fn, center_e, center_n, gate_scale, kernel):
    tensors, mask = make_inputs(COMBOS.index((e_fn, n_fn, center_e, center_n, gate_scale)), requires_grad=True)
    opts = {"alpha": 0.7, "beta": 0.4, "e_fn": e_fn, "n_fn": n_fn, "center_e": center_e, "center_n": center_n,
            "gate_scale": gate_scale}
    got = coda_matrix(*tensors, mask=mask, kernel=kernel, scale=False, **opts)
    want = reference(*tensors, mask=mask, **opts)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    grad = torch.randn(want.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    for g, w in zip(torch.autograd.grad(got, tensors, grad), torch.autograd.grad(want, tensors, grad)):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("e_fn,n_fn,center_e,center_n,gate_scale", COMBOS[::3] + [COMBOS[-1]])
def test_gradcheck_numba(e_fn, n_fn, center_e, center_n, gate_scale):
    tensors, mask = make_inputs(7, batch=(2,), la=3, lb=4, de=2, dn=2, requires_grad=True)
    opts = {"e_fn": e_fn, "n_fn": n_fn, "center_e": center_e, "center_n": center_n, "gate_scale": gate_scale,
            "kernel": "numba", "mask": mask}
    assert torch.autograd.gradcheck(lambda *t: coda_matrix(*t, **opts), tensors)


@pytest.mark.parametrize("center_over", ["slice", "row"])
def test_head_broadcast_mask_and_centring_axes(center_over):
    """A (B, 1, 1, lb) key mask broadcast over heads and rows: means count every row it covers."""
    (e_a, e_b, n_a, n_b), _ = make_inputs(11, batch=(2, 3), la=4, lb=6)
    mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    mask[1, ..., 3:] = False
    comps = coda_components(e_a, e_b, n_a, n_b, center_e=True, center_n=True, mask=mask, center_over=center_over,
                            gate_scale=2.0, scale=False)
    full = mask.expand(comps.N.shape)
    for key in ("E", "N"):
        value = getattr(comps, key)
        sums = value.sum(-1) if center_over == "row" else value.sum((-1, -2))
        assert sums.abs().max() < 1e-10
        assert torch.equal(value[~full], torch.zeros(int((~full).sum()), dtype=torch.float64))
    if center_over == "slice":
        want = reference(e_a, e_b, n_a, n_b, 1.0, 1.0, "tanh", "sigmoid", True, True, 2.0, mask)
        torch.testing.assert_close(comps.weights, want, rtol=1e-10, atol=1e-12)


def test_unmasked_defaults_are_the_printed_equations_tanh_times_two_sigmoid():
    """coda_matrix computes eqs. 1-2 as printed (alpha = beta = 1, no 1/sqrt(d)); scale=True is eq. 10's scaling."""
    (e_a, e_b, n_a, n_b), _ = make_inputs(1)  # de = 4
    dist = (n_a.unsqueeze(-2) - n_b.unsqueeze(-3)).abs().sum(-1)
    energy = e_a @ e_b.transpose(-1, -2)
    torch.testing.assert_close(coda_matrix(e_a, e_b, n_a, n_b), torch.tanh(energy) * 2 * torch.sigmoid(-dist))
    torch.testing.assert_close(coda_matrix(e_a, e_b, n_a, n_b, scale=True),  # both affinities divided by sqrt(4)
                               torch.tanh(energy / 2) * 2 * torch.sigmoid(-dist / 2))


def test_components_are_consistent_and_invalid_pairs_exactly_zero():
    tensors, mask = make_inputs(2)
    comps = coda_components(*tensors, mask=mask, center_e=True, center_n=True, gate_scale=2.0)
    assert comps.names() == ["weights", "E", "N", "f_E", "f_N", "gate"] and comps.mask is mask
    full = mask.expand(comps.weights.shape)
    for value in (getattr(comps, name) for name in comps.names()):
        assert value.shape == full.shape
        assert torch.equal(value[~full], torch.zeros_like(value[~full]))
    torch.testing.assert_close(comps.weights, comps.f_E * comps.gate)
    torch.testing.assert_close(comps.f_E[full], torch.tanh(comps.E)[full])
    torch.testing.assert_close(comps.f_N[full], torch.sigmoid(comps.N)[full])  # unscaled: issue 3's sigmoid(N)
    torch.testing.assert_close(comps.gate, 2.0 * comps.f_N)  # the gate, gate_scale = 2 (eq. 5)
    assert torch.equal(comps.weights, coda_matrix(*tensors, mask=mask, center_e=True, center_n=True, gate_scale=2.0))
    assert torch.equal(comps.values("f_N"), comps.f_N[full])
    # centring: the valid pairs of every slice have zero mean
    for key in ("E", "N"):
        sums = getattr(comps, key).sum((-1, -2))
        assert sums.abs().max() < 1e-10


def test_far_pair_is_erased_near_pair_kept():
    e = torch.ones(1, 2, 4, dtype=torch.float64)
    n_a = torch.zeros(1, 2, 4, dtype=torch.float64)
    n_b = torch.zeros(1, 2, 4, dtype=torch.float64)
    n_b[0, 1] = 50.0  # b_1 is far from every a_i in N-space
    m = coda_matrix(e, e, n_a, n_b, scale=False)
    assert m[0, :, 1].abs().max() < 1e-30  # gate 2 sigmoid(-200) ~ 0: de-attention
    torch.testing.assert_close(m[0, :, 0], torch.full((2,), math.tanh(4.0), dtype=torch.float64))  # gate = 1


@pytest.mark.parametrize("e_fn,n_fn,center_e,center_n,gate_scale", COMBOS)
def test_values_stay_in_the_range_the_composition_implies(e_fn, n_fn, center_e, center_n, gate_scale):
    (e_a, e_b, n_a, n_b), mask = make_inputs(3, la=9, lb=11)
    m = coda_matrix(3 * e_a, 3 * e_b, n_a, n_b, e_fn=e_fn, n_fn=n_fn, center_e=center_e, center_n=center_n,
                    gate_scale=gate_scale, mask=mask)
    e_lo, e_hi = RANGE[e_fn]
    n_lo, n_hi = RANGE[n_fn]
    if not center_n:
        n_hi = REF_FN[n_fn](torch.tensor(0.0)).item()  # N <= 0 without centring
    corners = [gate_scale * x * y for x in (e_lo, e_hi) for y in (n_lo, n_hi)]
    assert m.min() >= min(corners) - 1e-12 and m.max() <= max(corners) + 1e-12
    if (e_fn, n_fn, gate_scale, center_n) == ("tanh", "sigmoid", 2.0, False):
        assert m.abs().max() <= 1.0  # eq. 5: tanh * 2 sigmoid in [-1, 1]
    if e_fn == "sigmoid" and n_fn == "sigmoid":
        assert m.min() >= 0.0 and m.max() <= gate_scale


def test_compositional_pool_is_eq7():
    gen = torch.Generator().manual_seed(5)
    m = torch.randn(2, 5, 7, dtype=torch.float64, generator=gen)
    a = torch.randn(2, 5, 3, dtype=torch.float64, generator=gen)
    b = torch.randn(2, 7, 3, dtype=torch.float64, generator=gen)
    a2, b2 = compositional_pool(M=m, a=a, b=b)  # the issue names the argument M
    torch.testing.assert_close(a2[1, 2], sum(m[1, 2, j] * b[1, j] for j in range(7)))
    torch.testing.assert_close(b2[0, 6], sum(m[0, i, 6] * a[0, i] for i in range(5)))


@pytest.mark.parametrize("option,value,needle", [
    ("e_fn", "relu", "e_fn must be one of ['sigmoid', 'tanh']"),
    ("n_fn", "softmax", "n_fn must be one of ['algebraic', 'arctan', 'sigmoid', 'tanh']"),
    ("center_e", "yes", "center_e must be True or False"),
    ("center_n", 1, "center_n must be True or False"),
    ("alpha", -1.0, "alpha must be"),
    ("beta", float("nan"), "beta must be"),
    ("gate_scale", 0.0, "gate_scale must be"),
    ("center_over", "batch", "center_over must be one of ['slice', 'row']"),
    ("kernel", "flashy", "kernel must be one of ['auto', 'flash', 'fused', 'numba', 'chunked', 'torch']"),
    ("scale", "yes", "scale must be True or False"),
    ("sharpness", 2.0, "unknown CoDA option(s) ['sharpness']"),
])
def test_bad_options_raise_value_error_naming_the_option(option, value, needle):
    (e_a, e_b, n_a, n_b), _ = make_inputs(0)
    with pytest.raises(ValueError) as err:
        coda_matrix(e_a, e_b, n_a, n_b, **{option: value})
    assert needle in str(err.value)


@pytest.mark.parametrize("e_fn,n_fn,gate_scale", [("sigmoid", "arctan", 3.0), ("tanh", "algebraic", 1.0)])
def test_components_return_the_unscaled_f_n_beside_the_gate(e_fn, n_fn, gate_scale):
    tensors, mask = make_inputs(12)
    comps = coda_components(*tensors, mask=mask, e_fn=e_fn, n_fn=n_fn, gate_scale=gate_scale)
    full = mask.expand(comps.weights.shape)
    torch.testing.assert_close(comps.f_E[full], REF_FN[e_fn](comps.E)[full])
    torch.testing.assert_close(comps.f_N[full], REF_FN[n_fn](comps.N)[full])
    torch.testing.assert_close(comps.gate, gate_scale * comps.f_N)
    assert torch.equal(comps.f_N[~full], torch.zeros_like(comps.f_N[~full]))


@pytest.mark.parametrize("change,message", [
    ({"mask": torch.ones(2, 5, 7, dtype=torch.int32)}, "coda_matrix: mask must be a bool tensor"),
    ({"e_b": torch.randn(2, 7, 4, dtype=torch.float64)}, "coda_matrix: e_a, e_b, n_a, n_b must share one dtype"),
    ({"mask": torch.ones(2, 5, 6, dtype=torch.bool)},
     r"coda_matrix: mask of shape \(2, 5, 6\) does not broadcast to \(\.\.\., 5, 7\)"),
    ({"n_b": torch.randn(2, 6, 3)}, r"must be \(\.\.\., la, de\), \(\.\.\., lb, de\), \(\.\.\., la, dn\)"),
    ({"e_b": torch.randn(2, 7, 5)}, r"must be \(\.\.\., la, de\)"),
    ({"e_a": torch.randn(3, 5, 4)}, "coda_matrix: the batch dimensions of"),
    ({"n_a": torch.zeros(2, 5, 3, dtype=torch.long)}, "coda_matrix: n_a must be a floating tensor"),
])
@pytest.mark.parametrize("function", [coda_matrix, coda_components])
def test_bad_inputs_name_the_argument(function, change, message):
    """coda_matrix / coda_components check their inputs as coda_attention does (checks.py); they reached raw torch
    errors: 'where expected condition to be a boolean tensor', 'expected scalar type Float but found Double',
    'The expanded size ...'."""
    args = {"e_a": torch.randn(2, 5, 4), "e_b": torch.randn(2, 7, 4), "n_a": torch.randn(2, 5, 3),
            "n_b": torch.randn(2, 7, 3), "mask": None, **change}
    mask = args.pop("mask")
    message = message.replace("coda_matrix", function.__name__)
    with pytest.raises(ValueError, match=message):
        function(*args.values(), mask=mask)
