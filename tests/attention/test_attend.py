"""Flash-CoDA (coda_exp.attention.kernels.flash, flash_cpu): equal to the materialising reference in float64, values and
gradients, for every composition, mask, length and dropout; never handed an L × L block; deterministic."""

from __future__ import annotations

import dataclasses
import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from coda_exp.attention import CoDACrossAttention, CoDAScoring, MultiHeadAttention, SoftmaxScoring
from coda_exp.attention.attend import coda_attention, run_coda_attention
from coda_exp.attention.dispatch import ENV_VAR
from coda_exp.attention.flash_spec import FlashParams, dropout_keep, reference_forward
from coda_exp.attention.kernels.flash import flash_attention
from coda_exp.attention.options import E_FUNCTIONS, N_FUNCTIONS, CoDAOptions
from tests import ROOT


@pytest.fixture(autouse=True)
def _no_env_override(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def _inputs(seed, b=2, h=3, lq=5, lk=7, de=4, dv=3, dn=None, grad=True):
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape):
        return torch.randn(*shape, dtype=torch.float64, generator=gen).requires_grad_(grad)

    q, k, v = rnd(b, h, lq, de), rnd(b, h, lk, de), rnd(b, h, lk, dv)
    nq, nk = (rnd(b, h, lq, dn), rnd(b, h, lk, dn)) if dn else (None, None)
    key = torch.rand(b, 1, 1, lk, generator=gen) > 0.3
    key[..., 0] = True
    query = torch.rand(b, 1, lq, 1, generator=gen) > 0.2
    return q, k, v, nq, nk, key, query


def _reference(q, k, v, nq, nk, key, query, params):
    full = q.shape[:2] + (q.shape[2], k.shape[2])
    mask = None if key is None else key.expand(full)
    qm = None if query is None else query[..., 0].expand(full[:3])
    shared = nq is None
    return reference_forward(q, k, v, q if shared else nq, k if shared else nk, mask, qm,
                             dataclasses.replace(params, shared_n=shared))


def _check(params, seed=0, **shape):
    q, k, v, nq, nk, key, query = _inputs(seed, **shape)
    got = flash_attention(q, k, v, params=params, n_q=nq, n_k=nk, mask=key, query_mask=query)
    want = _reference(q, k, v, nq, nk, key, query, params)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-13)
    inputs = [t for t in (q, k, v, nq, nk) if t is not None]
    dout = torch.randn_like(got)
    for g, w in zip(torch.autograd.grad(got, inputs, dout), torch.autograd.grad(want, inputs, dout)):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
    return got


@pytest.mark.parametrize("e_fn,n_fn", list(itertools.product(sorted(E_FUNCTIONS), sorted(N_FUNCTIONS))))
def test_every_composition_of_table_9_matches_the_reference(e_fn, n_fn):
    _check(FlashParams(alpha=0.6, beta=0.3, gate=2.0 if n_fn == "sigmoid" else 1.0, e_fn=e_fn, n_fn=n_fn))


# blocks are 4 query rows x 256 keys: 9 rows and 300 keys cross both block edges
@pytest.mark.parametrize("causal,lq,lk", [(False, 5, 7), (True, 5, 7), (True, 9, 4), (False, 1, 1), (True, 6, 6),
                                          (False, 9, 300), (True, 7, 300), (True, 300, 9)])
@pytest.mark.parametrize("shared", [True, False])
def test_masks_lengths_blocks_and_n_inputs(causal, lq, lk, shared):
    params = FlashParams(alpha=0.8, beta=0.5, gate=2.0, e_fn="tanh", n_fn="sigmoid", causal=causal)
    _check(params, seed=lq * 10 + lk, lq=lq, lk=lk, dn=None if shared else 5)


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_is_the_counter_hash_of_flash_spec(p):
    params = FlashParams(alpha=0.8, beta=0.5, gate=2.0, e_fn="tanh", n_fn="sigmoid", causal=True, dropout_p=p,
                         seed=12345)
    _check(params, lq=6, lk=300, dn=3)
    # the kernel's own keep pattern, read off its output: with sigmoid(0) activations (q = k = nq = nk = 0) every
    # M_ij is 2 * 0.5 * 0.5 before dropout, and v = I makes out[i, j] = dropped M_ij (47 rows, 300 keys: several blocks)
    zeros = torch.zeros(2, 3, 47, 4)
    keys = torch.zeros(2, 3, 300, 4)
    eye = torch.eye(300).expand(2, 3, 300, 300)
    dropped = FlashParams(1.0, 1.0, 2.0, "sigmoid", "sigmoid", dropout_p=p, seed=99)
    out = flash_attention(zeros, keys, eye, params=dropped, backend="cpu")
    keep = dropout_keep(99, p, (2, 3, 47, 300))
    torch.testing.assert_close(out, torch.where(keep, 0.5 / (1 - p), 0.0), rtol=1e-6, atol=0)
    assert abs(keep.double().mean().item() - (1 - p)) < 0.02


def test_gradcheck_in_float64():
    params = FlashParams(alpha=0.9, beta=0.7, gate=2.0, e_fn="tanh", n_fn="sigmoid", causal=True, dropout_p=0.2,
                         seed=3)
    q, k, v, nq, nk, key, query = _inputs(4, b=1, h=2, lq=4, lk=5, de=3, dv=2, dn=2)

    def fn(q, k, v, nq, nk):
        return flash_attention(q, k, v, params=params, n_q=nq, n_k=nk, mask=key, query_mask=query)

    assert torch.autograd.gradcheck(fn, (q, k, v, nq, nk))


_PEAK = """
import sys, torch
from pathlib import Path
from coda_exp.attention.kernels.flash import flash_attention
from coda_exp.attention.flash_spec import FlashParams
status = lambda f: next(int(x.split()[1]) for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(f))
q, k, v = (torch.randn(1, 1, 2048, 8, requires_grad=True) for _ in range(3))
for causal in (True, False):
    params = FlashParams(0.5, 0.5, 2.0, "tanh", "sigmoid", causal=causal)
    small = [t[:, :, :8].detach().requires_grad_() for t in (q, k, v)]
    flash_attention(*small, params=params).sum().backward()  # compile / load the kernels first
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak resident set (VmHWM)
    before = status("VmRSS:")
    flash_attention(q, k, v, params=params).sum().backward()
    print((status("VmHWM:") - before) / 1024)
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc to read the peak RSS")
def test_fwd_bwd_at_2048_never_allocates_the_lq_by_lk_matrix():
    """At L = 2048 one float32 M alone is 16 MB; fwd + bwd (causal, then full) each stay within 4 MB of growth."""
    out = subprocess.run([sys.executable, "-c", _PEAK], capture_output=True, text=True, check=True,
                         env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}, cwd=ROOT)
    rises = [float(x) for x in out.stdout.split()]
    assert len(rises) == 2 and max(rises) < 4, rises


def test_deterministic_across_runs_and_threads():
    q, k, v, _, _, key, query = _inputs(5, lq=33, lk=40, de=16, dv=8)
    params = FlashParams(0.5, 0.5, 2.0, "tanh", "sigmoid", dropout_p=0.1, seed=8)
    threads = torch.get_num_threads()
    results = []
    try:
        for n in (1, 2, 1):
            torch.set_num_threads(n)
            out = flash_attention(q, k, v, params=params, mask=key, query_mask=query)
            results.append((out, *torch.autograd.grad(out.square().sum(), (q, k, v))))
    finally:
        torch.set_num_threads(threads)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert torch.equal(a, b)


def test_scoring_in_multihead_attention_equals_the_materialising_path():
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 3, CoDAScoring(), dropout=0.0).double()
    x = torch.randn(2, 7, 12, dtype=torch.float64, requires_grad=True)
    pad = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    outs = []
    for kernel in ("flash", "torch"):
        mha.scoring.options = CoDAOptions(kernel=kernel)
        out = mha(x, x, x, key_padding_mask=pad, causal=True)
        assert mha.scoring.kernel_used == kernel
        outs.append((out, *torch.autograd.grad(out.sum(), (x, *mha.parameters()))))
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-12)
    maps_out, maps = mha(x, x, x, key_padding_mask=pad, causal=True, return_maps=True)
    torch.testing.assert_close(maps_out, outs[0][0], rtol=1e-11, atol=1e-12)
    assert not maps.weights[0, :, 0, 1:].any()  # causal in the maps too


@pytest.mark.parametrize("share", [True, False])
def test_cross_attention_module_uses_two_flash_calls(share):
    torch.manual_seed(1)
    module = CoDACrossAttention(6, hidden=5, share_projections=share, dropout=0.0).double()
    a = torch.randn(2, 5, 6, dtype=torch.float64, requires_grad=True)
    b = torch.randn(2, 8, 6, dtype=torch.float64, requires_grad=True)
    mask_a = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    mask_b = torch.tensor([[True] * 6 + [False] * 2, [True] * 8])
    results = []
    for kernel in ("flash", "torch"):
        module.options = module.options.replace(kernel=kernel)
        out_a, out_b = module(a, b, mask_a, mask_b)
        assert module.kernel_used == kernel
        results.append((out_a, out_b, *torch.autograd.grad((out_a.sum() + 2 * out_b.sum()), (a, b))))
    for x, y in zip(*results):
        torch.testing.assert_close(x, y, rtol=1e-11, atol=1e-12)
    assert not results[0][0][1, 3:].any() and not results[0][1][0, 6:].any()  # padded rows are 0


def test_the_op_takes_options_falls_back_for_centring_and_validates():
    q, k, v, _, _, key, _ = _inputs(6, grad=False)
    out, ran = run_coda_attention(q, k, v, CoDAOptions(kernel="flash"), mask=key)
    assert ran == "flash"
    assert run_coda_attention(q, k, v, CoDAOptions(), mask=key)[1] == "fused"  # auto: M below CPU_SELF_FLASH_MIN_BYTES
    torch.testing.assert_close(coda_attention(q, k, v, mask=key, kernel="torch"), out, rtol=1e-12, atol=1e-13)
    centred, ran = run_coda_attention(q, k, v, CoDAOptions(center_n=True, center_over="row"), mask=key)
    assert ran == "numba"  # the means need E / N: the materialising path
    want = coda_attention(q, k, v, mask=key, center_n=True, center_over="row", kernel="torch")
    torch.testing.assert_close(centred, want, rtol=1e-12, atol=1e-13)
    three_d = coda_attention(q[:, 0], k[:, 0], v[:, 0], mask=key[:, 0], kernel="flash")  # (B, L, d) inputs
    torch.testing.assert_close(three_d, out[:, 0], rtol=1e-12, atol=1e-13)
    with pytest.raises(ValueError, match="must have the same feature size"):
        coda_attention(q, k[..., :2], v)
    with pytest.raises(ValueError, match="unknown CoDA option"):
        coda_attention(q, k, v, sharpness=2)


def test_query_scale_is_t2ts_q_scaling_before_both_affinities():
    """query_scale with scale=False: E = q k^T / sqrt(d) (eq. 10's E) but N = -||q / sqrt(d) - k||_1, every path."""
    q, k, v, _, _, key, _ = _inputs(9, grad=False)
    d = q.shape[-1]
    opts = CoDAOptions(scale=False, query_scale=True)
    params = FlashParams(alpha=1.0, beta=1.0, gate=2.0, e_fn="tanh", n_fn="sigmoid")
    want = _reference(q / d ** 0.5, k, v, None, None, key, None, params)
    for kernel in ("flash", "fused", "torch"):
        got, ran = run_coda_attention(q, k, v, opts.replace(kernel=kernel), mask=key)
        assert ran == kernel
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-13)
    module = CoDACrossAttention(4, hidden=4, dropout=0.0, scale=False, query_scale=True).double()
    a, b = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 5, 4, dtype=torch.float64)
    outs = []
    for kernel in ("flash", "torch"):
        module.options = module.options.replace(kernel=kernel)
        outs.append(module(a, b))
    for x, y in zip(*outs):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-13)


def test_auto_cross_attention_streams_only_a_large_m(monkeypatch):
    from coda_exp.attention import dispatch

    module = CoDACrossAttention(4, hidden=4, dropout=0.0)
    a, b = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    module(a, b)
    assert module.kernel_used == "fused"  # 2 x 3 x 5 floats: far below CROSS_FLASH_MIN_BYTES
    monkeypatch.setattr(dispatch, "CROSS_FLASH_MIN_BYTES", 2 * 3 * 5 * 4)
    module(a, b)
    assert module.kernel_used == "flash"


def test_auto_self_attention_streams_from_a_size_of_m_on(monkeypatch):
    from coda_exp.attention import dispatch

    q, k, v, _, _, key, _ = _inputs(10, grad=False)
    assert run_coda_attention(q, k, v, CoDAOptions(), mask=key)[1] == "fused"
    monkeypatch.setattr(dispatch, "CPU_SELF_FLASH_MIN_BYTES", 2 * 3 * 5 * 7 * 8)  # this M in float64
    out, ran = run_coda_attention(q, k, v, CoDAOptions(), mask=key)
    assert ran == "flash"
    torch.testing.assert_close(out, coda_attention(q, k, v, mask=key, kernel="torch"), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("change,message", [
    ({"k": torch.randn(3, 2, 5, 8)}, "batch dimensions of"),
    ({"v": torch.randn(2, 2, 6, 8)}, "v has 6 positions, k has 5"),
    ({"k": torch.randn(2, 2, 5, 7), "v": torch.randn(2, 2, 5, 8)}, "the same feature size"),
    ({"mask": torch.ones(2, 1, 1, 4, dtype=torch.bool)}, r"mask of shape \(2, 1, 1, 4\) does not broadcast"),
    ({"mask": torch.ones(2, 1, 1, 5)}, "mask must be a bool tensor"),
    ({"query_mask": torch.ones(2, 1, 3, 2, dtype=torch.bool)}, "query_mask of shape"),
    ({"v": torch.randn(2, 2, 5, 8, dtype=torch.float64)}, "must share one dtype"),
    ({"n_q": torch.randn(2, 2, 4, 6)}, "give both n_q and n_k"),
    ({"q": torch.zeros(2, 2, 4, 8, dtype=torch.long)}, "q must be a floating tensor"),
])
def test_bad_inputs_name_the_argument(change, message):
    """Mismatched shapes, a float mask or mixed dtypes used to raise raw torch errors deep in a kernel, or (mixed
    dtypes on the flash path) return silently (issue 20)."""
    args = {"q": torch.randn(2, 2, 4, 8), "k": torch.randn(2, 2, 5, 8), "v": torch.randn(2, 2, 5, 8), **change}
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    with pytest.raises(ValueError, match=message):
        coda_attention(q, k, v, **args)


@pytest.mark.parametrize("call,error,message", [
    # the flash kernel divided by 1 - p unchecked: p = 1 a ZeroDivisionError, 1.5 zeros, -0.1 no dropout
    (lambda: coda_attention(*(torch.randn(1, 2, 4, 3) for _ in range(3)), kernel="flash", dropout_p=1.0),
     ValueError, r"dropout_p must be a probability in \[0, 1\), got 1.0"),
    (lambda: coda_attention(*(torch.randn(1, 2, 4, 3) for _ in range(3)), dropout_p=-0.1), ValueError, "dropout_p"),
    (lambda: coda_attention(*(torch.randn(1, 2, 4, 3) for _ in range(3)), options={"alpha": 0.5}), TypeError,
     "options must be a CoDAOptions"),
    # the modules reached torch's own errors deep inside (a bmm, an expand, a bitwise_and on floats)
    (lambda: CoDAScoring()(torch.randn(1, 2, 4, 3), torch.randn(1, 2, 4, 3), torch.randn(1, 2, 3, 3)), ValueError,
     "CoDAScoring: v has 3 positions, k has 4"),
    (lambda: MultiHeadAttention(8, 2, CoDAScoring())(*(torch.randn(2, 5, 8),) * 3,
                                                     key_padding_mask=torch.ones(2, 6, dtype=torch.bool)),
     ValueError, r"key_padding_mask of shape \(2, 6\): expected \(batch, length\) = \(2, 5\)"),
    (lambda: MultiHeadAttention(8, 2, CoDAScoring())(*(torch.randn(2, 5, 8),) * 3, key_padding_mask=torch.zeros(2, 5)),
     ValueError, "key_padding_mask must be a bool tensor .*an additive float mask"),
    (lambda: CoDACrossAttention(8)(torch.randn(2, 4, 8), torch.randn(2, 6, 8), torch.ones(2, 4), torch.ones(2, 6)),
     ValueError, "mask_a must be a bool tensor"),
    (lambda: CoDACrossAttention(8)(torch.randn(2, 4, 8), torch.randn(3, 6, 8)), ValueError, "share the batch size"),
    (lambda: CoDACrossAttention(8, hidden=0), ValueError, "hidden must be an int >= 1, got 0"),
    # 'not enough values to unpack' and a projection's matmul error
    (lambda: MultiHeadAttention(8, 2, CoDAScoring())(*(torch.randn(5, 8),) * 3), ValueError,
     r"MultiHeadAttention: query must be a floating tensor \(B, L, d_model=8\), got torch.float32 \(5, 8\)"),
    (lambda: MultiHeadAttention(8, 2, SoftmaxScoring())(torch.randn(2, 5, 8), *(torch.randn(2, 4, 6),) * 2),
     ValueError, r"MultiHeadAttention: key must be a floating tensor \(B, L, d_model=8\), got torch.float32"),
    (lambda: MultiHeadAttention(8, 2, CoDAScoring())(torch.randn(2, 5, 8), torch.randn(2, 4, 8),
                                                     torch.randn(2, 3, 8)), ValueError, "must share B, and key"),
])
def test_the_modules_and_options_name_what_is_wrong(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_integer_padding_masks_still_read_as_bool():
    torch.manual_seed(0)
    mha, x = MultiHeadAttention(8, 2, CoDAScoring()).eval(), torch.randn(2, 5, 8)
    keep = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    torch.testing.assert_close(mha(x, x, x, key_padding_mask=keep), mha(x, x, x, key_padding_mask=keep.bool()))
    cross, a, b = CoDACrossAttention(8).eval(), torch.randn(2, 4, 8), torch.randn(2, 6, 8)
    ints = (torch.ones(2, 4, dtype=torch.long), torch.ones(2, 6, dtype=torch.long))
    torch.testing.assert_close(cross(a, b, *ints), cross(a, b, *(m.bool() for m in ints)))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-3), (torch.bfloat16, 3e-2), (torch.float64, 1e-12)])
def test_flash_on_cuda_matches_the_float64_reference(dtype, tol):
    """The Triton backend through the op, with key and query masks, causal and unshared N inputs, values and
    gradients against the materialising float64 reference on the CPU (relative L2 error). float64 reads its masks
    as int32 (``triton_args._mask_arg``: Triton 3.6 could not build it with 8-bit masks)."""
    q, k, v, nq, nk, key, query = _inputs(30, b=2, h=3, lq=70, lk=90, de=32, dv=16, dn=8)
    leaves = (q, k, v, nq, nk)
    opts = CoDAOptions(alpha=0.7, beta=0.4, kernel="torch")
    want = coda_attention(q, k, v, options=opts, mask=key, query_mask=query, causal=True, n_q=nq, n_k=nk)
    dout = torch.randn(want.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    want_grads = torch.autograd.grad(want, leaves, dout)
    cuda = [t.detach().to("cuda", dtype).requires_grad_() for t in leaves]
    got = coda_attention(*cuda[:3], options=opts.replace(kernel="flash"), mask=key.cuda(), query_mask=query.cuda(),
                         causal=True, n_q=cuda[3], n_k=cuda[4])
    got_grads = torch.autograd.grad(got, cuda, dout.to("cuda", dtype))

    def rel(a, b):
        return float((a.double().cpu() - b).norm() / b.norm())

    assert rel(got, want) < tol
    assert all(rel(g, w) < tol for g, w in zip(got_grads, want_grads))
