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
from coda_exp.attention.kernels import flash_triton
from coda_exp.attention.options import CoDAOptions
from coda_exp.models import DecompAtt, TransformerClassifier
from tests.attention.reference import make_inputs


@pytest.fixture(autouse=True)
def _no_env_override(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def _pick(kernel="auto", **request) -> str:
    return select_kernel(kernel, KernelRequest(**{"device": "cpu", "dtype": torch.float32, **request})).name


def test_auto_picks_by_device_dtype_and_what_is_needed(monkeypatch):
    assert _pick() == "fused"  # CPU float32/float64: eqs. 1-5 in one numba pass
    assert _pick(dtype=torch.float64) == "fused"
    assert _pick(maps=True) == _pick(centred=True) == "numba"  # maps or centring need E and N: materialised
    assert _pick(output="l1") == "numba"  # the distance alone
    assert _pick(mask_ok=False) == "numba"  # a float mask, or a mask on another device
    assert _pick(dtype=torch.bfloat16) == "torch"  # no numba kernel for it
    assert _pick(dtype=None) == "torch"  # mixed dtypes
    assert _pick(device="cuda") == _pick(device="cuda", maps=True) == "chunked"
    assert _pick(device="mixed") == "chunked"
    # M V requested (a scoring module without maps): Flash-CoDA where it applies and M is big enough
    big = dispatch.CPU_SELF_FLASH_MIN_BYTES  # on the CPU (the sweep's rule); CUDA: SELF_FLASH_MIN_BYTES (0)
    monkeypatch.setattr(flash_triton, "available", lambda device_type: True)  # a CUDA machine with triton
    assert dispatch.SELF_FLASH_MIN_BYTES == 0
    assert _pick(output="attention", device="cuda", matrix_bytes=1) == "flash"  # any size on CUDA
    assert _pick(output="attention", device="cuda", dtype=torch.float64, matrix_bytes=1) == "flash"  # masks too
    assert _pick(output="attention", matrix_bytes=big) == _pick(output="attention", dtype=torch.float64,
                                                                matrix_bytes=big) == "flash"
    assert _pick(output="attention", matrix_bytes=big - 1) == "fused"  # small M: the one-pass kernel is faster
    long = dispatch.CPU_FLASH_MIN_LENGTH  # a long slice: flash's recomputation pays even where M is small
    assert _pick(output="attention", matrix_bytes=1 << 20, key_length=long) == "flash"
    assert _pick(output="attention", matrix_bytes=1 << 20, key_length=long - 1) == "fused"
    assert _pick(output="attention", matrix_bytes=dispatch.CROSS_FLASH_MIN_BYTES - 1, cross=True) == "fused"
    assert _pick(output="attention", matrix_bytes=dispatch.CROSS_FLASH_MIN_BYTES, cross=True) == "flash"
    # on CUDA the cross-attention streams at every size too (no fused kernel there; chunked was 4-23x slower on an H200)
    assert _pick(output="attention", device="cuda", matrix_bytes=1, cross=True) == "flash"
    assert _pick(output="attention", centred=True, matrix_bytes=big) == "numba"  # centring: the means need E, N
    assert _pick(output="attention", mask_ok=False, matrix_bytes=big) == "numba"
    assert _pick(output="attention", dtype=torch.bfloat16, matrix_bytes=big) == "torch"
    cuda64 = {"output": "attention", "device": "cuda", "dtype": torch.float64, "matrix_bytes": big}
    if dispatch.flash_backend("cuda", torch.float64) is not None:  # Triton installed
        assert _pick(**cuda64) == "flash"


def test_a_named_kernel_runs_the_call_or_says_why_not():
    assert [_pick(k.name, output="attention") for k in REGISTRY] == ["flash", "fused", "numba", "chunked", "torch"]
    assert _pick("flash", output="attention", matrix_bytes=1) == "flash"  # named: whatever the size of M
    # what a kernel never computes goes to auto: M or the maps from flash, the maps or the L1 from fused
    assert [_pick(k.name) for k in REGISTRY] == ["fused", "fused", "numba", "chunked", "torch"]
    assert _pick("fused", maps=True) == _pick("flash", maps=True) == _pick("fused", output="l1") == "numba"
    assert _pick("torch", device="cuda") == "torch"
    for kernel, request, why in [
            ("numba", {"device": "cuda"}, "it runs on CPU tensors, these are on cuda"),
            ("fused", {"device": "cuda"}, "it runs on CPU tensors"),
            ("numba", {"dtype": torch.half}, "it runs float32/float64, these are torch.float16"),
            ("fused", {"mask_ok": False}, "its mask must be a bool tensor"),
            ("fused", {"centred": True}, "the fused kernel does not centre"),
            ("flash", {"output": "attention", "centred": True}, "Flash-CoDA centres .* in CUDA self-attention only"),
            ("flash", {"output": "attention", "centred": True, "device": "cuda", "cross": True},
             "Flash-CoDA centres .* in CUDA self-attention only"),
            ("flash", {"output": "attention", "dtype": torch.bfloat16}, "no Flash-CoDA backend for cpu torch.bfloat16")]:
        with pytest.raises(dispatch.KernelUnavailable, match=f"CoDA option kernel is '{kernel}', which cannot run "
                                                               f"this call: {why}"):
            _pick(kernel, **request)


def test_a_named_kernel_that_cannot_centre_is_refused_when_the_options_are_built():
    with pytest.raises(ValueError, match="CoDA option kernel 'fused' cannot run centred CoDA"):
        CoDAOptions(kernel="fused", center_n=True)
    with pytest.raises(ValueError, match="cannot run centred CoDA"):
        CoDAScoring(kernel="fused", center_e=True)
    assert CoDAOptions(kernel="numba", center_e=True).centred
    assert CoDAOptions(kernel="flash", center_e=True).centred  # flash centres on CUDA (refused per call elsewhere)


def test_flash_on_cuda_follows_the_gpus_compute_capability(monkeypatch):
    """Flash-CoDA's Triton kernels have run on 9.0 only: auto takes them from 8.0 (A100 up), chunked below (T4,
    V100); a named kernel=flash runs from 7.5 (bfloat16 from 8.0) and is an error naming the GPU below; an unknown
    capability restricts nothing. describe() asks the driver once per device."""
    monkeypatch.setattr(flash_triton, "available", lambda device_type: True)  # a CUDA machine with triton
    call = {"output": "attention", "device": "cuda", "matrix_bytes": 1}
    for cap, auto in (((9, 0), "flash"), ((8, 0), "flash"), ((7, 5), "chunked"), ((7, 0), "chunked"), (None, "flash")):
        assert _pick(capability=cap, **call) == auto, cap
    assert _pick("flash", capability=(7, 5), dtype=torch.float16, **call) == "flash"
    with pytest.raises(dispatch.KernelUnavailable, match=r"bfloat16 needs a GPU of compute capability 8\.0 or newer "
                                                          r"\(Triton's bfloat16 dot\), this one is 7\.5"):
        _pick("flash", capability=(7, 5), dtype=torch.bfloat16, **call)
    with pytest.raises(dispatch.KernelUnavailable, match=r"compute capability 7\.5 or newer, this one is 7\.0"):
        _pick("flash", capability=(7, 0), **call)
    asked = []
    monkeypatch.setattr(dispatch, "_CAPABILITIES", {})
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: asked.append(index) or (7, 5))
    assert dispatch.cuda_capability(torch.device("cuda")) == dispatch.cuda_capability(torch.device("cuda", 1)) == (7, 5)
    assert asked == [1]


def test_a_centred_call_streams_on_cuda(monkeypatch):
    """Flash-CoDA streams centring in CUDA self-attention (auto picks it there); CPU and cross-attention
    materialise."""
    monkeypatch.setattr(flash_triton, "available", lambda device_type: True)  # a CUDA machine with triton
    assert _pick(output="attention", device="cuda", centred=True, matrix_bytes=1) == "flash"
    assert _pick(output="attention", device="cuda", centred=True, cross=True) == "chunked"
    assert _pick(output="attention", centred=True, matrix_bytes=1 << 30, key_length=4096) == "numba"


def test_without_numba_the_cpu_runs_torch(monkeypatch):
    monkeypatch.setattr(dispatch.numba_cpu, "HAVE_NUMBA", False)
    assert _pick() == "torch"
    for kernel in ("fused", "numba"):
        with pytest.raises(dispatch.KernelUnavailable, match="numba is not installed"):
            _pick(kernel)


def test_the_environment_beats_the_config(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "torch")
    assert _pick("fused") == _pick("auto") == "torch"
    monkeypatch.setenv(ENV_VAR, "numba")
    with pytest.raises(dispatch.KernelUnavailable, match=f"environment variable {ENV_VAR} is 'numba', which "):
        _pick(device="cuda")
    monkeypatch.setenv(ENV_VAR, "torch")
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
    assert (req.device, req.dtype, req.mask_ok, req.centred, req.maps, req.needs_grad) == ("cpu", None, False, False,
                                                                                           False, True)
    assert req.matrix_bytes == 2 * 2 * 4  # M of the first two tensors (2 x 2), in their first's element size
    with torch.no_grad():
        assert not describe(x, mask=torch.ones(2, 2, dtype=torch.bool)).needs_grad
    assert describe(x, x.to("meta")).device == "mixed"


@pytest.mark.parametrize("kernel", [k.name for k in REGISTRY if k.computes != "attention"])  # flash: tests/attention/test_attend.py
@pytest.mark.parametrize("center", [False, True])
def test_every_kernel_matches_the_torch_reference_in_float64(kernel, center):
    tensors, mask = make_inputs(21, batch=(2, 3), la=5, lb=6, de=4, dn=3, requires_grad=True)
    causal = torch.ones(5, 6, dtype=torch.bool).tril(1)
    grad = torch.randn(2, 3, 5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    if center and kernel == "fused":  # the fused kernel does not centre: refused when the options are built
        with pytest.raises(ValueError, match="cannot run centred CoDA"):
            CoDAOptions(center_e=True, kernel=kernel)
        return
    for m in (mask, mask & causal, None):
        opts = CoDAOptions(alpha=0.7, beta=0.4, center_e=center, center_n=center, center_over="row", kernel=kernel)
        got, ran = run_coda(*tensors, opts, m)
        want, ref = run_coda(*tensors, opts.replace(kernel="torch"), m)
        assert ref == "torch" and ran == kernel
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
    assert kernels_used(net) == ["fused"]  # small M: auto keeps the fused kernel (dispatch.CPU_SELF_FLASH_MIN_BYTES)
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
