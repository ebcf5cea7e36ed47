"""Flash-CoDA Triton kernels (``flash_triton``) under the Triton interpreter against ``flash_spec.reference_forward``.

TRITON_INTERPRET: ``triton.jit`` reads it when a kernel is *decorated* (when ``flash_triton`` is imported), and
``flash_triton`` runs CPU tensors through an interpreted copy of its kernels when it was imported without it. So
here the variable is only set per test, by the autouse fixture below (``monkeypatch``: ``available("cpu")`` reads
it at call time), and other tests of the same pytest process never see it, whatever the import order.
``test_interpret_set_before_import`` covers the other order (variable set before triton is imported, the module's
own kernels interpreted) in a subprocess.

Values and gradients are compared in float64 (gradients of the reference by autograd), on tiny shapes: the
interpreter runs every tile op in numpy. ``INTERPRET_BLOCK`` is (8, 8, 4, 1): lengths up to 20
still cross blocks, feature dims over 4 cross chunks (prefetched: PF 1; ``test_cases_float64`` runs PF 0 too).
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("triton")

from coda_exp.attention.flash_spec import FlashParams, dropout_keep, reference_forward
from coda_exp.attention.kernels import flash_triton as ft
from tests import ROOT

FN_PAIRS = list(itertools.product(["tanh", "sigmoid"], ["sigmoid", "tanh", "arctan", "algebraic"]))  # Table 9
TOL64 = {"rtol": 1e-10, "atol": 1e-12}


@pytest.fixture(autouse=True)
def _interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _randn(gen, dtype, *shape):
    return torch.randn(*shape, generator=gen, dtype=dtype)


def _inputs(b, h, lq, lk, de, dn, dv, *, shared=False, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = _randn(gen, dtype, b, h, lq, de), _randn(gen, dtype, b, h, lk, de), _randn(gen, dtype, b, h, lk, dv)
    if shared:
        return q, k, v, None, None
    return q, k, v, _randn(gen, dtype, b, h, lq, dn), _randn(gen, dtype, b, h, lk, dn)


def _masks(kind: str | None, b, h, lq, lk, seed=1):
    """Expanded views, as the contract passes them: key padding (B, 1, 1, Lk), pair (B, 1, Lq, Lk), per head."""
    gen = torch.Generator().manual_seed(seed)
    if kind is None:
        return None
    if kind == "keys":
        keys = torch.ones(b, lk, dtype=torch.bool)
        keys[0, lk - 3:] = False
        keys[-1, :2] = False
        return keys[:, None, None, :].expand(b, h, lq, lk)
    if kind == "pair":
        return (torch.rand(b, 1, lq, lk, generator=gen) > 0.3).expand(b, h, lq, lk)
    assert kind == "per-head"
    return torch.rand(b, h, lq, lk, generator=gen) > 0.4


def _query_mask(b, h, lq):
    rows = torch.ones(b, lq, dtype=torch.bool)
    rows[0, 1] = False
    rows[-1, lq - 1] = False
    return rows[:, None, :].expand(b, h, lq)


def _compare(q, k, v, nq, nk, mask, query_mask, params, tol=TOL64):
    """forward / backward against the reference (float64 copies of the inputs, gradients by autograd)."""
    names = ["q", "k", "v"] if params.shared_n else ["q", "k", "v", "nq", "nk"]
    leaves = [t.detach().double().requires_grad_() for t in ((q, k, v) if params.shared_n else (q, k, v, nq, nk))]
    ref_n = (leaves[0], leaves[1]) if params.shared_n else (leaves[3], leaves[4])
    want = reference_forward(*leaves[:3], *ref_n, mask, query_mask, params)
    assert want.abs().max() > 0.1  # the comparison is not between two zero tensors
    got = ft.forward(q, k, v, nq, nk, mask, query_mask, params)
    assert got.dtype == q.dtype and got.shape == want.shape
    torch.testing.assert_close(got.double(), want, **tol)

    dout = _randn(torch.Generator().manual_seed(7), torch.float64, *want.shape)
    wants = torch.autograd.grad(want, leaves, dout)
    dout_t = dout.to(q.dtype).transpose(-1, -2).contiguous().transpose(-1, -2)  # non-contiguous: accepted
    grads = ft.backward(q, k, v, nq, nk, mask, query_mask, params, dout_t)
    if params.shared_n:
        assert grads[3] is None and grads[4] is None
    for name, g, w in zip(names, grads, wants):
        assert g.dtype == q.dtype and g.shape == w.shape, name
        torch.testing.assert_close(g.double(), w, **tol, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("e_fn,n_fn", FN_PAIRS)
def test_functions_float64(e_fn, n_fn):
    """Every f_E x f_N of Table 9, gate 2 and 1 in turn, a key-padding mask, Lk across two key blocks."""
    index = FN_PAIRS.index((e_fn, n_fn))
    b, h, lq, lk = 1, 2, 6, 11
    q, k, v, nq, nk = _inputs(b, h, lq, lk, 3, 4, 5, seed=index)
    params = FlashParams(alpha=0.9, beta=0.35, gate=2.0 if index % 2 == 0 else 1.0, e_fn=e_fn, n_fn=n_fn)
    _compare(q, k, v, nq, nk, _masks("keys", b, h, lq, lk), None, params)


CASES = {  # name: (B, H, Lq, Lk, de, dn, dv, mask, query_mask, FlashParams overrides)
    "keys-odd": (2, 2, 13, 17, 5, 3, 4, "keys", False, {}),
    "pair+query": (2, 2, 9, 11, 6, 5, 3, "pair", True, {"gate": 1.0, "e_fn": "sigmoid", "n_fn": "arctan"}),
    "causal-wide+dropout": (2, 2, 8, 17, 4, 3, 5, "keys", False, {"causal": True, "dropout_p": 0.25, "seed": 123}),
    "causal-tall+query": (2, 2, 18, 5, 3, 4, 2, None, True, {"causal": True, "n_fn": "algebraic"}),
    "shared+dropout": (2, 2, 10, 12, 7, 7, 3, "per-head", False, {"shared_n": True, "dropout_p": 0.4, "seed": 9}),
    "length-1": (2, 2, 1, 1, 1, 1, 1, None, False, {"e_fn": "sigmoid"}),
    "wide-dims": (1, 2, 5, 9, 16, 9, 12, None, False, {"causal": True, "n_fn": "tanh"}),
}


@pytest.mark.parametrize("name,prefetch", [  # each case once in make test, the PFs in turn; every pair with -m slow
    pytest.param(name, pf, marks=() if pf == (1, 0, 2)[i % 3] else pytest.mark.slow)
    for i, name in enumerate(CASES) for pf in (1, 0, 2)])
def test_cases_float64(name, prefetch, monkeypatch):
    """Masks (expanded views), query masks, causal with Lq != Lk, dropout, shared_n, odd lengths, d not 2^k; the
    feature chunks loaded one ahead (PF 1), as they are used (PF 0), or the distance over a grid of pairs (PF 2)."""
    monkeypatch.setattr(ft, "INTERPRET_BLOCK", (*ft.INTERPRET_BLOCK[:3], prefetch))
    b, h, lq, lk, de, dn, dv, mask_kind, with_query, overrides = CASES[name]
    params = FlashParams(**{"alpha": 0.6, "beta": 0.3, "gate": 2.0, "e_fn": "tanh", "n_fn": "sigmoid",
                            **overrides})
    q, k, v, nq, nk = _inputs(b, h, lq, lk, de, dn, dv, shared=params.shared_n, seed=len(name))
    query_mask = _query_mask(b, h, lq) if with_query else None
    _compare(q, k, v, nq, nk, _masks(mask_kind, b, h, lq, lk), query_mask, params)


def test_ties_in_unshared_n_have_no_gradient_on_either_side():
    """nq_i = nk_i exactly on every row (unshared inputs): |nq_i - nk_i| has sign 0, so neither dnq nor dnk gets a
    term from those pairs (the kernels' 2 Σ g step(d) - Σ g must cancel them to rounding, on each side)."""
    gen = torch.Generator().manual_seed(5)
    q, k = _randn(gen, torch.float64, 1, 2, 10, 4), _randn(gen, torch.float64, 1, 2, 10, 4)
    v, nq = _randn(gen, torch.float64, 1, 2, 10, 3), _randn(gen, torch.float64, 1, 2, 10, 5)
    nk = nq.clone()
    params = FlashParams(alpha=0.5, beta=0.7, gate=2.0, e_fn="tanh", n_fn="sigmoid")
    leaves = [t.clone().requires_grad_() for t in (q, k, v, nq, nk)]
    want = reference_forward(*leaves, None, None, params)
    dout = _randn(gen, torch.float64, *want.shape)
    grads_want = torch.autograd.grad(want, leaves, dout)
    got = ft.backward(q, k, v, nq, nk, None, None, params, dout)
    for name, g, w in zip(("dq", "dk", "dv", "dnq", "dnk"), got, grads_want):
        torch.testing.assert_close(g, w, **TOL64, msg=lambda m, name=name: f"{name}: {m}")


def test_self_attention_shared_n_with_ties():
    """q = k = nq = nk (one tensor): the diagonal has |x_i - x_i| = 0, whose gradient is sign(0) = 0."""
    gen = torch.Generator().manual_seed(3)
    x = _randn(gen, torch.float64, 2, 2, 9, 4)
    v = _randn(gen, torch.float64, 2, 2, 9, 3)
    params = FlashParams(alpha=0.5, beta=0.7, gate=2.0, e_fn="tanh", n_fn="arctan", causal=True,
                         dropout_p=0.2, seed=77, shared_n=True)
    xl, vl = x.clone().requires_grad_(), v.clone().requires_grad_()
    want = reference_forward(xl, xl, vl, xl, xl, None, None, params)
    torch.testing.assert_close(ft.forward(x, x, v, x, x, None, None, params), want, **TOL64)
    dout = _randn(gen, torch.float64, *want.shape)
    dx_want, dv_want = torch.autograd.grad(want, (xl, vl), dout)
    dq, dk, dv, dnq, dnk = ft.backward(x, x, v, None, None, None, None, params, dout)
    assert dnq is None and dnk is None
    torch.testing.assert_close(dq + dk, dx_want, **TOL64)
    torch.testing.assert_close(dv, dv_want, **TOL64)


@pytest.mark.parametrize("seed", [0, 2 ** 31 - 1])
def test_dropout_keep_pattern_is_the_spec_hash(seed):
    """alpha = beta = 0, sigmoid x sigmoid, gate 4: M = 1, so out = keep / (1 - p) with v = I (exact)."""
    b, h, lq, lk, p = 2, 3, 19, 13, 0.5
    q = torch.zeros(b, h, lq, 2, dtype=torch.float64)
    k = torch.zeros(b, h, lk, 2, dtype=torch.float64)
    v = torch.eye(lk, dtype=torch.float64).expand(b, h, lk, lk).contiguous()
    params = FlashParams(alpha=0.0, beta=0.0, gate=4.0, e_fn="sigmoid", n_fn="sigmoid", dropout_p=p, seed=seed,
                         shared_n=True)
    out = ft.forward(q, k, v, None, None, None, None, params)
    keep = dropout_keep(seed, p, (b, h, lq, lk))
    assert torch.equal(out != 0, keep)
    assert torch.equal(out[keep], torch.full((int(keep.sum()),), 2.0, dtype=torch.float64))
    assert 0.4 < keep.double().mean() < 0.6


@pytest.mark.parametrize("dtype,tol", [(torch.float32, {"rtol": 1e-4, "atol": 2e-5}),
                                       pytest.param(torch.float16, {"rtol": 5e-3, "atol": 5e-3},
                                                    marks=pytest.mark.slow)])
def test_low_precision_within_tolerance(dtype, tol):
    """float32 (accumulated in float32) and float16 (tiles cast to float16 only as tl.dot operands)."""
    b, h, lq, lk = 2, 2, 11, 14
    q, k, v, nq, nk = _inputs(b, h, lq, lk, 6, 5, 4, dtype=dtype, seed=5)
    params = FlashParams(alpha=0.6, beta=0.3, gate=2.0, e_fn="tanh", n_fn="arctan", causal=True, dropout_p=0.1,
                         seed=4)
    _compare(q, k, v, nq, nk, _masks("keys", b, h, lq, lk), _query_mask(b, h, lq), params, tol=tol)


def test_available_and_device_error(monkeypatch):
    assert ft.available("cpu") and ft.available("cuda")
    assert not ft.available("mps")
    monkeypatch.delenv("TRITON_INTERPRET")
    assert not ft.available("cpu")
    q, k, v, nq, nk = _inputs(1, 1, 2, 2, 2, 2, 2)
    with pytest.raises(ValueError, match="q is on cpu"):
        ft.forward(q, k, v, nq, nk, None, None, FlashParams(1.0, 1.0, 2.0, "tanh", "sigmoid"))


def _bad_inputs():
    """(argument named in the error, (q, k, v, nq, nk, mask, query_mask, params), dout) per malformed call."""
    q, k, v, nq, nk = _inputs(2, 2, 3, 4, 5, 2, 3)
    p = FlashParams(1.0, 1.0, 2.0, "tanh", "sigmoid")
    good = (q, k, v, nq, nk, None, None, p)

    def change(index, value):
        args = list(good)
        args[index] = value
        return tuple(args)

    return [
        ("q", change(0, q.to(torch.int64)), None),
        ("q", tuple(t.bfloat16() if isinstance(t, torch.Tensor) else t for t in good), None),  # cpu: no bf16
        ("k", change(1, k[..., :4].contiguous()), None),
        ("v", change(2, v[:, :, :3].contiguous()), None),
        ("nq", change(3, None), None),
        ("nk", change(4, nk.float()), None),
        ("v", change(2, v.transpose(-1, -2).contiguous().transpose(-1, -2)), None),  # non-contiguous
        ("k", change(1, k.to("meta")), None),  # another device
        ("mask", change(5, torch.ones(2, 2, 3, 4)), None),
        ("query_mask", change(6, torch.ones(2, 2, 4, dtype=torch.bool)), None),
        ("dropout_p", change(7, FlashParams(1.0, 1.0, 2.0, "tanh", "sigmoid", dropout_p=1.0)), None),
        ("n_fn", change(7, FlashParams(1.0, 1.0, 2.0, "tanh", "relu")), None),
        ("nq", change(7, FlashParams(1.0, 1.0, 2.0, "tanh", "sigmoid", shared_n=True)), None),  # nq is not q
        ("dout", good, torch.zeros(2, 2, 2, 3, dtype=torch.float64)),
    ]


@pytest.mark.parametrize("index", range(len(_bad_inputs())),
                         ids=[f"{i}-{name}" for i, (name, _, _) in enumerate(_bad_inputs())])
def test_errors_name_the_argument(index):
    name, args, dout = _bad_inputs()[index]
    with pytest.raises(ValueError, match=rf"[ .]{name} must|{name} is "):
        if dout is None:
            ft.forward(*args)
        else:
            ft.backward(*args, dout)


def test_imports_without_triton(monkeypatch):
    from coda_exp.attention import kernels

    monkeypatch.setitem(sys.modules, "triton", None)  # `import triton` raises ImportError
    for name in ("triton_jit", "triton_bwd"):  # imported afresh, without triton
        monkeypatch.delitem(sys.modules, f"coda_exp.attention.kernels.{name}")
        monkeypatch.delattr(kernels, name)
    spec = importlib.util.spec_from_file_location("flash_triton_without_triton", ft.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert not module.HAVE_TRITON
    assert not module.available("cuda") and not module.available("cpu")


_SUBPROCESS = """
import torch
from coda_exp.attention.kernels import flash_triton as ft
from coda_exp.attention.flash_spec import FlashParams, reference_forward
assert ft.triton_jit._INTERPRETED and ft._kernels(torch.device("cpu")) is ft.triton_jit
g = torch.Generator().manual_seed(0)
q, k, nq, nk = (torch.randn(2, 1, 9, 3, generator=g, dtype=torch.float64) for _ in range(4))
v = torch.randn(2, 1, 9, 2, generator=g, dtype=torch.float64)
p = FlashParams(0.7, 0.4, 2.0, "sigmoid", "tanh", causal=True, dropout_p=0.3, seed=11)
leaves = [t.clone().requires_grad_() for t in (q, k, v, nq, nk)]
want = reference_forward(*leaves, None, None, p)
dout = torch.randn(want.shape, generator=g, dtype=torch.float64)
errors = [(ft.forward(q, k, v, nq, nk, None, None, p) - want).abs().max().item()]
for ft.BACKWARD in ft.BACKWARDS:
    for got, ref in zip(ft.backward(q, k, v, nq, nk, None, None, p, dout), torch.autograd.grad(want, leaves, dout,
                                                                                            retain_graph=True)):
        errors.append((got - ref).abs().max().item())
print(max(errors))
"""


@pytest.mark.slow
def test_interpret_set_before_import():
    """TRITON_INTERPRET=1 before triton is imported: the module's own kernels are the interpreted ones (both
    backwards)."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-c", _SUBPROCESS], check=False, env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert float(run.stdout.strip().splitlines()[-1]) < 1e-12


@pytest.mark.parametrize("kernel,dtype,shared", [("fwd", "fp16", False), ("dkdv", "fp16", True), ("dq", "bf16", False),
                                                 ("stats", "bf16", False), ("bwd", "bf16", False), ("fwd", "fp64", True),
                                                 ("dq", "fp64", False), ("fwd", "fp32", True), ("bwd", "fp32", False)])
def test_kernels_compile_for_sm90(monkeypatch, kernel, dtype, shared):
    """The compiled path, which the interpreter does not exercise, builds for an H100 (no GPU needed). float64
    kernels read masks as int32 (``triton_args._mask_arg``: Triton 3.6 cannot build them with 8-bit masks); float32
    ones take their tl.dot as three TF32 products (torch's default "highest" float32 matmul precision)."""
    if ft.triton_jit._INTERPRETED:
        pytest.skip("this process imported the kernels under TRITON_INTERPRET=1")
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    fn = ft._kernel(ft.triton_jit, kernel)  # bwd: triton_bwd's fused backward
    wide = dtype == "fp64"
    constants = {"DE": 40, "DN": 40 if shared else 24, "DV": 24, "DE_P": 64, "DN_P": 64 if shared else 32,
                 "DV_P": 32, "E_FN": 0, "N_FN": 2, "HAS_MASK": True, "HAS_QMASK": True, "CAUSAL": True,
                 "DROPOUT": True, "SHARED": shared, "CDT": tl.float64 if wide else tl.float32, "FAST": not wide,
                 "DOT_PREC": "ieee" if wide else ft.fp32_dot_precision() if dtype == "fp32" else "tf32",
                 "CENTER_E": True, "CENTER_N": True, "GRAD": True, "BLOCK_M": 32, "BLOCK_N": 32, "DC": 8, "PF": 1,
                 **ft._lanes(kernel, 32, 32, 4)}
    constants = {name: value for name, value in constants.items() if name in fn.arg_names}
    acc, mask = ("fp64", "*i32") if wide else ("fp32", "*u8")
    pointers = {"MASK": mask, "QMASK": mask, "SCAL": f"*{acc}", "SCR": f"*{acc}", "SEED": "*i64", "CENT": f"*{acc}",
                "OUT": f"*{acc}" if kernel == "stats" else f"*{dtype}", "DNQ": f"*{acc}",
                "DQ": f"*{acc}" if kernel == "bwd" else f"*{dtype}"}  # bwd adds into accumulation-dtype buffers
    signature = {name: "constexpr" if name in constants else pointers.get(name, f"*{dtype}") if name.isupper()
                 else "i32" for name in fn.arg_names}
    signature.update({name: "i32" for name in ("H", "LQ", "LK", "LQ_BUCKET", "LK_BUCKET")})
    compiled = triton.compile(ASTSource(fn, signature, constants), target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": 4, "num_stages": 2})
    assert compiled.asm["cubin"] and "mma" in compiled.asm["ptx"]  # tl.dot on tensor cores
    if dtype == "fp32":  # TF32 operands (three products each), not FMAs
        assert "tf32" in compiled.asm["ptx"]


def test_the_op_runs_the_triton_backend_like_the_cpu_one():
    """``flash.flash_attention(backend="triton")`` (what CUDA tensors get) equals the numba backend, with autograd."""
    from coda_exp.attention.kernels.flash import flash_attention

    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 2, 9, 5, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.rand(2, 1, 1, 9, generator=gen) > 0.3
    params = FlashParams(0.7, 0.4, 2.0, "tanh", "sigmoid", causal=True, dropout_p=0.2, seed=11)
    results = []
    for backend in ("triton", "cpu"):
        out = flash_attention(q, k, v, params=params, mask=mask, backend=backend)
        results.append((out, *torch.autograd.grad(out.square().sum(), (q, k, v))))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, **TOL64)


@pytest.mark.parametrize("over,center_e,center_n,causal,dropout,masked", [  # the fused backward's: test_flash_triton_fused
    pytest.param("row", True, False, True, 0.0, True, marks=pytest.mark.slow), ("row", False, True, False, 0.3, True),
    ("row", True, True, True, 0.3, False), pytest.param("slice", True, False, False, 0.0, True, marks=pytest.mark.slow),
    ("slice", False, True, True, 0.3, False),
    pytest.param("slice", True, True, False, 0.3, True, marks=pytest.mark.slow)])
def test_centring_streams_like_the_reference(over, center_e, center_n, causal, dropout, masked):
    """Eqs. 6 / 4 streamed: a first pass for the row / slice means of E and D over the valid pairs (dropout aside),
    and in the backward one for the means of their gradients; the values and all five gradients match the
    materialising reference (gate 1 with center_n, as the options give)."""
    params = FlashParams(0.6, 0.4, 1.0 if center_n else 2.0, "tanh", "sigmoid", causal=causal, dropout_p=dropout,
                         seed=7, center_e=center_e, center_n=center_n, center_over=over)
    q, k, v, nq, nk = _inputs(2, 2, 9, 11, 5, 3, 4, shared=False, seed=3)
    mask = _masks("keys", 2, 2, 9, 11) if masked else None
    _compare(q, k, v, nq, nk, mask, _query_mask(2, 2, 9) if masked else None, params)


def test_centring_through_the_op_equals_the_materialising_path():
    """coda_attention's flash op (the triton backend, interpreted) with centre_n against kernel=torch: the op
    carries the centring options, and autograd reaches q, k, v."""
    from coda_exp.attention import coda_attention
    from coda_exp.attention.kernels.flash import flash_attention, flash_params
    from coda_exp.attention.options import CoDAOptions

    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 2, 9, 4, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.rand(2, 1, 1, 9, generator=gen) > 0.3
    options = CoDAOptions(center_n=True, center_e=True, center_over="row", scale=False)
    want = coda_attention(q, k, v, options=options.replace(kernel="torch"), mask=mask, causal=True)
    params = flash_params(options, 4, causal=True)
    got = flash_attention(q, k, v, params=params, mask=mask, backend="triton")
    torch.testing.assert_close(got, want, **TOL64)
    for a, b in zip(torch.autograd.grad(got.sum(), (q, k, v)), torch.autograd.grad(want.sum(), (q, k, v))):
        torch.testing.assert_close(a, b, **TOL64)


def test_float64_kernels_get_int32_masks_without_materialising_them():
    """``_mask_arg``: a uint8 view for the other dtypes; for float64 an int32 copy of the compact tensor under an
    expanded view, expanded again (its stride-0 dims stay 0: an (L, L) pattern over B x H costs L² ints)."""
    base = torch.rand(1, 1, 6, 5, generator=torch.Generator().manual_seed(3)) > 0.5
    mask = base.expand(4, 3, 6, 5)
    narrow = ft._mask_arg(mask, wide=False)
    assert narrow.dtype == torch.uint8 and narrow.stride() == mask.stride() and narrow.data_ptr() == mask.data_ptr()
    wide = ft._mask_arg(mask, wide=True)
    assert wide.dtype == torch.int32 and wide.shape == mask.shape and wide.stride()[:2] == (0, 0)
    assert wide.untyped_storage().nbytes() == 6 * 5 * 4
    assert torch.equal(wide.bool(), mask)
    query_mask = (torch.arange(7) < 5).view(1, 1, 7).expand(2, 3, 7)
    assert torch.equal(ft._mask_arg(query_mask, wide=True).bool(), query_mask)


def test_autotune_timings_are_cached_on_disk(monkeypatch):
    """Every autotuned kernel keeps its timings in Triton's on-disk cache: a sweep's next process picks the same
    configs without timing them again."""
    if ft.triton_jit._INTERPRETED:
        pytest.skip("this process imported the kernels under TRITON_INTERPRET=1")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(ft, "_TUNED", {})
    for name in ft.CONFIGS:
        tuner = ft._tuned(ft.triton_jit, name)
        assert tuner.cache_results and len(tuner.configs) == len(ft.CONFIGS[name])
        # a 7th entry caps the registers (ptx .maxnreg): the forward's three-programs-per-SM config
        assert [c.maxnreg for c in tuner.configs] == [(cfg[6:] or [None])[0] for cfg in ft.CONFIGS[name]]
        # the key holds what changes the code or its speed: float32's tl.dot precision too
        assert "DOT_PREC" in tuner.keys
    assert 168 in [c.maxnreg for c in ft._TUNED["fwd"].configs]
