"""dispatch.select_kernel: one decision (config, CODA_KERNEL, device, dtype, maps); every kernel equals `torch`."""

from __future__ import annotations

import functools

import pytest
import torch

from coda_exp.attention import (
    CoDACrossAttention,
    CoDAScoring,
    SoftmaxScoring,
    coda_components,
    dispatch,
    kernels_used,
)
from coda_exp.attention.dispatch import ENV_VAR, REGISTRY, KernelRequest, describe, select_kernel
from coda_exp.attention.functional import run_coda
from coda_exp.attention.options import CoDAOptions
from coda_exp.models import DecompAtt, TransformerClassifier
from tests.attention.reference import make_inputs


@pytest.fixture(autouse=True)
def _no_env_override(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def _pick(kernel="auto", **request) -> str:
    return select_kernel(kernel, KernelRequest(**{"device": "cpu", "dtype": torch.float32, **request})).name


def test_auto_picks_by_device_dtype_and_what_is_needed():
    assert _pick() == "fused"  # CPU float32/float64: eqs. 1-5 in one numba pass
    assert _pick(dtype=torch.float64) == "fused"
    assert _pick(materialise=True) == "numba"  # maps or centring need E and N: the materialising path
    assert _pick(mask_ok=False) == "numba"  # a float mask, or a mask on another device
    assert _pick(dtype=torch.bfloat16) == "torch"  # no numba kernel for it
    assert _pick(dtype=None) == "torch"  # mixed dtypes
    assert _pick(device="cuda") == _pick(device="cuda", materialise=True) == "chunked"
    assert _pick(device="mixed") == "chunked"
    # M V requested (a scoring module without maps): Flash-CoDA wherever it applies, else the same choices
    assert _pick(output="attention") == _pick(output="attention", dtype=torch.float64) == "flash"
    assert _pick(output="attention", materialise=True) == "numba"  # centring: the means need E and N
    assert _pick(output="attention", mask_ok=False) == "numba"
    assert _pick(output="attention", dtype=torch.bfloat16) == "torch"


def test_a_requested_kernel_runs_if_it_can_else_auto_decides():
    assert [_pick(k.name) for k in REGISTRY] == ["fused", "fused", "numba", "chunked", "torch"]  # flash: no M
    assert [_pick(k.name, output="attention") for k in REGISTRY] == ["flash", "fused", "numba", "chunked", "torch"]
    assert _pick("fused", materialise=True) == "numba"  # the fused kernel returns M only
    assert _pick("numba", device="cuda") == _pick("fused", device="cuda") == "chunked"
    assert _pick("numba", dtype=torch.half) == "torch"
    assert _pick("torch", device="cuda") == "torch"


def test_without_numba_the_cpu_runs_torch(monkeypatch):
    monkeypatch.setattr(dispatch._kernels, "HAVE_NUMBA", False)
    assert _pick() == _pick("fused") == _pick("numba") == "torch"


def test_the_environment_beats_the_config(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "torch")
    assert _pick("fused") == _pick("auto") == "torch"
    (q, k, _, _), _ = make_inputs(0)
    scoring = CoDAScoring(kernel="fused")
    scoring(q, k, k)
    assert scoring.kernel_used == "torch"
    monkeypatch.setenv(ENV_VAR, "  ")  # blank: no override
    assert _pick("numba") == "numba"
    monkeypatch.setenv(ENV_VAR, "fast")
    with pytest.raises(ValueError, match=f"environment variable {ENV_VAR} must be one of"):
        scoring(q, k, k)


def test_describe_reads_device_dtype_mask_and_grad_mode():
    x = torch.randn(2, 3, requires_grad=True)
    req = describe(x, x.detach().double(), mask=torch.ones(2, 2))
    assert (req.device, req.dtype, req.mask_ok, req.materialise, req.needs_grad) == ("cpu", None, False, False, True)
    with torch.no_grad():
        assert not describe(x, mask=torch.ones(2, 2, dtype=torch.bool)).needs_grad
    assert describe(x, x.to("meta")).device == "mixed"


@pytest.mark.parametrize("kernel", [k.name for k in REGISTRY if not k.attend])  # flash: tests/attention/test_flash.py
@pytest.mark.parametrize("center", [False, True])
def test_every_kernel_matches_the_torch_reference_in_float64(kernel, center):
    tensors, mask = make_inputs(21, batch=(2, 3), la=5, lb=6, de=4, dn=3, requires_grad=True)
    causal = torch.ones(5, 6, dtype=torch.bool).tril(1)
    grad = torch.randn(2, 3, 5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    for m in (mask, mask & causal, None):
        opts = CoDAOptions(alpha=0.7, beta=0.4, center_e=center, center_n=center, center_over="row", kernel=kernel)
        got, ran = run_coda(*tensors, opts, m)
        want, ref = run_coda(*tensors, opts.replace(kernel="torch"), m)
        assert ref == "torch" and ran == ("numba" if center and kernel == "fused" else kernel)
        torch.testing.assert_close(got, want, rtol=1e-11, atol=1e-13)
        for g, w in zip(torch.autograd.grad(got, tensors, grad), torch.autograd.grad(want, tensors, grad)):
            torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
        maps = coda_components(*tensors, opts, mask=m)  # the maps' M is the same matrix
        torch.testing.assert_close(maps.weights, want, rtol=1e-11, atol=1e-13)


def test_requesting_maps_falls_back_to_the_materialising_path():
    (q, k, _, _), _ = make_inputs(2)
    v = k.flip(-1)  # (.., Lk, dv)
    scoring = CoDAScoring()
    out, maps = scoring(q, k, v)
    assert maps is None and scoring.kernel_used == "fused"  # a small M: auto keeps the one-pass kernel
    out_maps, maps = scoring(q, k, v, return_maps=True)
    assert scoring.kernel_used == "numba" and maps.f_E is not None
    torch.testing.assert_close(out_maps, out, rtol=1e-12, atol=1e-14)


def _decompatt(attention):
    torch.manual_seed(0)
    return DecompAtt(vocab_size=20, num_classes=3, attention=functools.partial(attention, hidden=8),
                     hidden_size=8, embedding_dim=8, dropout=0.0)


def test_kernels_used_lists_what_the_last_forwards_ran(monkeypatch):
    ids = torch.randint(1, 20, (2, 5))
    mask = torch.ones(2, 5, dtype=torch.bool)
    net = TransformerClassifier(vocab_size=20, num_classes=3, d_model=8, num_layers=2, num_heads=2, d_ff=16,
                                scoring=CoDAScoring)
    assert kernels_used(net) == []  # nothing ran yet
    net(ids, mask)
    assert kernels_used(net) == ["fused"]  # small M: auto keeps the fused kernel (flash.SELF_FLASH_MIN_BYTES)
    net.encoder.layers[0].self_attn.scoring.options = CoDAOptions(kernel="torch")  # one layer on another kernel
    net(ids, mask)
    assert kernels_used(net) == ["fused", "torch"]
    monkeypatch.setenv(ENV_VAR, "chunked")
    net(ids, mask)
    assert kernels_used(net) == ["chunked"]
    softmax = TransformerClassifier(vocab_size=20, num_classes=3, d_model=8, num_layers=1, num_heads=2, d_ff=16,
                                    scoring=SoftmaxScoring)
    softmax(ids, mask)
    assert kernels_used(softmax) == []
    monkeypatch.delenv(ENV_VAR)
    pair = _decompatt(CoDACrossAttention)
    pair(ids, mask, ids[:, :4], mask[:, :4])
    assert kernels_used(pair) == ["fused"]  # a small M: auto keeps the one-pass fused kernel (flash.CROSS_FLASH_...)
    pair.attention_maps(ids, mask, ids[:, :4], mask[:, :4])
    assert kernels_used(pair) == ["numba"]
