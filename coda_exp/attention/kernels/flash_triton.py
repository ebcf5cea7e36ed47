"""Flash-CoDA on CUDA with Triton: the host side (checks, launch, autotuning) of the kernels in ``triton_jit``.

``forward`` / ``backward`` follow the ``flash_spec`` contract: out = (dropout(M) ⊙ valid) V without storing M, and
its gradients. ``triton_jit`` holds the kernels (``_fwd_kernel``, ``_dkdv_kernel``, ``_dq_kernel``, ``_stats_kernel``)
and their docstring the algorithm; ``triton_bwd`` the fused backward (``_bwd_kernel``, the default: faster on an
H100) or the split pair (deterministic: taken under ``torch.use_deterministic_algorithms``), ``BACKWARD`` /
``CODA_FLASH_BACKWARD`` choose.

Precision: float16 / bfloat16 inputs are computed and accumulated in float32 (tiles are cast to the input dtype
only as ``tl.dot`` operands, as in FlashAttention); float32 in float32 (``tl.dot`` in TF32, or as three TF32
products where ``torch.get_float32_matmul_precision()`` is "highest": ``fp32_dot_precision``); float64 entirely in float64. Scalars (alpha, beta, gate,
1 / (1 - p)) reach the kernels through a small tensor in the accumulation dtype, so float64 runs are exact to
rounding. tanh and arctan are written out (Cephes' rational forms, tanh by exp from |x| 0.625 up: ~1-2 ulp).

Blocks: on GPUs ``triton.autotune`` picks (BLOCK_M, BLOCK_N, num_warps, num_stages) per key (power-of-two buckets
of Lq and Lk, the padded head dims, dn, causal, shared_n) among two to four configs per kernel (``CONFIGS``, kept
from timings on an H100); feature dims are padded to a power of two >= 16 with masked loads, so any de, dn, dv >= 1
work and lengths are arbitrary. Under the Triton interpreter (CPU tensors,
``TRITON_INTERPRET=1``) one small fixed config is used. ``triton.jit`` decides at decoration time whether it builds
a compiled or an interpreted kernel (from ``TRITON_INTERPRET``), so when this module was imported without it, CPU
calls load a second, interpreted copy of ``triton_jit`` once (``_interpreted_copy``): the CUDA and CPU paths can coexist
in one process regardless of import order. For that copy to work the kernels call only triton.language builtins
(see the comment above the kernels). bfloat16 is refused on cpu: triton 3.9's interpreter gets tl.dot on bfloat16
wrong (on GPUs bfloat16 is supported).
"""

import contextlib
import importlib.util
import math
import os
import sys

import numpy
import torch

from coda_exp.attention.activations import E_FUNCTIONS, N_FUNCTIONS
from coda_exp.attention.flash_spec import BACKWARD_ENV, BACKWARDS, FlashParams, seed_tensor
from coda_exp.attention.kernels import triton_bwd, triton_jit, triton_math
from coda_exp.attention.kernels.triton_args import _bucket, _l1_args, _mask_arg, _pad, _scalars
from coda_exp.attention.kernels.triton_jit import HAVE_TRITON

if HAVE_TRITON:
    import triton
    import triton.language as tl
    from triton import knobs

# activation codes of f_E / f_N inside the kernels
FUNCTION_CODES = {"tanh": 0, "sigmoid": 1, "arctan": 2, "algebraic": 3}
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INTERPRET_BLOCK = (8, 8, 4, 1)  # (BLOCK_M, BLOCK_N, DC, PF) under the interpreter: tiny tests cross blocks and chunks


def available(device_type: str) -> bool:
    """Whether this backend runs on ``device_type``: triton imports and the device is cuda, or cpu under the
    Triton interpreter (``TRITON_INTERPRET=1``)."""
    if not HAVE_TRITON:
        return False
    if device_type == "cuda":
        return True
    return device_type == "cpu" and bool(knobs.runtime.interpret)


_INTERPRETED_COPY = None
_INTERPRETED_BWD = None  # the interpreted copy of triton_bwd (made with _INTERPRETED_COPY)


def _load_interpreted(module):
    spec = importlib.util.spec_from_file_location(module.__name__ + "_interpreted", module.__file__)
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    return copy


def _interpreted_copy():
    """``triton_jit`` loaded once more with ``triton.jit`` in interpreter mode (see the module docstring), its
    helpers from an interpreted copy of ``triton_math`` (in ``sys.modules`` while the copy imports them); likewise
    ``triton_bwd`` (``_INTERPRETED_BWD``), importing the interpreted ``triton_jit`` and ``triton_math``."""
    global _INTERPRETED_COPY, _INTERPRETED_BWD
    if _INTERPRETED_COPY is None:
        with knobs.runtime.scope():
            knobs.runtime.interpret = True
            originals = {m.__name__: sys.modules[m.__name__] for m in (triton_math, triton_jit)}
            try:
                sys.modules[triton_math.__name__] = _load_interpreted(triton_math)
                jit_copy = _load_interpreted(triton_jit)
                sys.modules[triton_jit.__name__] = jit_copy
                _INTERPRETED_BWD = _load_interpreted(triton_bwd)
                _INTERPRETED_COPY = jit_copy
            finally:
                sys.modules.update(originals)
    return _INTERPRETED_COPY


def _kernels(device: torch.device):
    """The module whose kernels run on ``device``: ``triton_jit``, or its interpreted copy for CPU tensors."""
    if device.type == "cpu" and not triton_jit._INTERPRETED:
        return _interpreted_copy()
    return triton_jit


def _kernel(kern, name: str):
    """Kernel ``name`` of ``kern`` (``_kernels``' module): the fused backward's is in ``triton_bwd`` (or its
    interpreted copy beside ``kern``'s)."""
    if name != "bwd":
        return getattr(kern, f"_{name}_kernel")
    return (triton_bwd if kern is triton_jit else _INTERPRETED_BWD)._bwd_kernel


# ---------------------------------------------------------------------- host side
def _shape_error(name: str, tensor, expected: str) -> ValueError:
    got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
    return ValueError(f"Flash-CoDA (triton): {name} must be {expected}, got {got}")


def _check(q, k, v, nq, nk, mask, query_mask, params, dout=None):
    """Validate the contract's arguments; returns (B, H, Lq, Lk, de, dn, dv, nq, nk) (nq/nk resolved)."""
    if not HAVE_TRITON:
        raise RuntimeError("Flash-CoDA (triton): triton is not installed")
    backward_kind()  # a bad choice of backward fails the forward already, not a step later
    if not isinstance(params, FlashParams):
        raise ValueError(  # noqa: TRY004 (the contract's argument errors are ValueErrors)
            f"Flash-CoDA (triton): params must be a FlashParams, got {type(params).__name__}")
    for name, allowed in (("e_fn", E_FUNCTIONS), ("n_fn", N_FUNCTIONS)):
        if getattr(params, name) not in allowed:
            raise ValueError(f"Flash-CoDA (triton): params.{name} must be one of {sorted(allowed)}, "
                             f"got {getattr(params, name)!r}")
    if params.center_over not in ("row", "slice"):
        raise ValueError(f"Flash-CoDA (triton): params.center_over must be 'row' or 'slice', got {params.center_over!r}")
    if not 0.0 <= params.dropout_p < 1.0:
        raise ValueError(f"Flash-CoDA (triton): params.dropout_p must be in [0, 1), got {params.dropout_p!r}")
    if isinstance(params.seed, torch.Tensor):
        if params.seed.numel() != 1 or params.seed.dtype not in (torch.int32, torch.int64):
            raise ValueError("Flash-CoDA (triton): params.seed must be an int or a one-element integer tensor, got "
                             f"{params.seed.dtype} {tuple(params.seed.shape)}")
    elif not 0 <= params.seed < 2 ** 31:
        raise ValueError(f"Flash-CoDA (triton): params.seed must be in [0, 2^31), got {params.seed!r}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise _shape_error(name, t, "a 4-D tensor (B, H, L, d)")
    b, h, lq, de = q.shape
    lk = k.shape[2]
    if tuple(k.shape) != (b, h, lk, de):
        raise _shape_error("k", k, f"(B, H, Lk, de) = ({b}, {h}, Lk, {de}) like q")
    if tuple(v.shape[:3]) != (b, h, lk):
        raise _shape_error("v", v, f"(B, H, Lk, dv) = ({b}, {h}, {lk}, dv) like k")
    dv = v.shape[3]
    if params.shared_n:
        for name, t, base in (("nq", nq, q), ("nk", nk, k)):
            if t is not None and not (isinstance(t, torch.Tensor) and t.data_ptr() == base.data_ptr()
                                      and t.shape == base.shape and t.stride() == base.stride()):
                raise ValueError(f"Flash-CoDA (triton): with params.shared_n, {name} must be None or "
                                 f"{'q' if name == 'nq' else 'k'} itself")
        nq, nk, dn = q, k, de
    else:
        if not isinstance(nq, torch.Tensor) or nq.dim() != 4 or tuple(nq.shape[:3]) != (b, h, lq):
            raise _shape_error("nq", nq, f"(B, H, Lq, dn) = ({b}, {h}, {lq}, dn)")
        dn = nq.shape[3]
        if not isinstance(nk, torch.Tensor) or tuple(nk.shape) != (b, h, lk, dn):
            raise _shape_error("nk", nk, f"(B, H, Lk, dn) = ({b}, {h}, {lk}, {dn})")
    tensors = [("q", q), ("k", k), ("v", v), ("nq", nq), ("nk", nk)]
    if dout is not None:
        if not isinstance(dout, torch.Tensor) or tuple(dout.shape) != (b, h, lq, dv):
            raise _shape_error("dout", dout, f"(B, H, Lq, dv) = ({b}, {h}, {lq}, {dv})")
        tensors.append(("dout", dout.contiguous()))  # autograd may hand over an expanded gradient
    if q.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"Flash-CoDA (triton): q must be one of {SUPPORTED_DTYPES}, got {q.dtype}")
    for name, t in tensors:
        if t.dtype != q.dtype:
            raise ValueError(f"Flash-CoDA (triton): {name} must have q's dtype {q.dtype}, got {t.dtype}")
        if t.device != q.device:
            raise ValueError(f"Flash-CoDA (triton): {name} must be on q's device {q.device}, got {t.device}")
        if not t.is_contiguous():
            raise ValueError(f"Flash-CoDA (triton): {name} must be contiguous")
    if not available(q.device.type):
        raise ValueError(f"Flash-CoDA (triton): q is on {q.device}; this backend runs on cuda, or on cpu under "
                         f"the Triton interpreter (TRITON_INTERPRET=1)")
    if q.device.type == "cpu" and q.dtype == torch.bfloat16:  # triton 3.9's interpreter: tl.dot on bf16 is wrong
        raise ValueError("Flash-CoDA (triton): q is bfloat16, which the Triton interpreter (cpu) does not support")
    for name, t, shape in (("mask", mask, (b, h, lq, lk)), ("query_mask", query_mask, (b, h, lq))):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor) or t.dtype != torch.bool or tuple(t.shape) != shape:
            got = f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"Flash-CoDA (triton): {name} must be None or a bool tensor of shape {shape} "
                             f"(an expanded view is fine), got {got}")
        if t.device != q.device:
            raise ValueError(f"Flash-CoDA (triton): {name} must be on q's device {q.device}, got {t.device}")
    return b, h, lq, lk, de, dn, dv, nq, nk


# float32's tl.dot under torch.get_float32_matmul_precision() "highest" (torch's default): "tf32x3" (three TF32
# products on the tensor cores, ~2^-22 relative per product: float32's accuracy to a few ulp) or "ieee" (Triton
# lowers it to FMAs: on an H200 the float32 backward at L 32 took 28-140 ms against bfloat16's 2.0, the forward at
# (128, 64) 26 ms against 1.6: results/bench/gpu_h200.json). "high" / "medium" take TF32.
FP32_HIGHEST = "tf32x3"


def fp32_dot_precision() -> str:
    """Triton's ``input_precision`` for float32 ``tl.dot``: TF32 under torch's "high" / "medium" float32 matmul
    precision, ``FP32_HIGHEST`` under "highest"."""
    return FP32_HIGHEST if torch.get_float32_matmul_precision() == "highest" else "tf32"


def _common(q, k, v, nq, nk, mask, query_mask, params, dims):
    """Kernel arguments shared by the three kernels (positional after the tensors, then constexpr keywords)."""
    h, lq, lk, de, dn, dv = dims
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / (1.0 - params.dropout_p)
    scalars = _scalars((float(params.alpha), float(params.beta), float(params.gate), scale, 1.0), cdt, q.device)
    nq, nk, inv_w = _l1_args(nq, nk)  # 16-bit inputs: float16 nq / w, nk / w (triton_math._l1_tile)
    if inv_w is not None:
        scalars = torch.cat((scalars[:4], inv_w.reshape(1)))
    mask_t = q if mask is None else _mask_arg(mask, wide=cdt == torch.float64)
    ms = (0, 0, 0, 0) if mask is None else mask_t.stride()
    qmask_t = q if query_mask is None else _mask_arg(query_mask, wide=cdt == torch.float64)
    qs = (0, 0, 0) if query_mask is None else qmask_t.stride()
    # uniform = (h >> 8) 2^-24 >= p  <=>  (h >> 8) >= ceil(p 2^24) (p 2^24 is exact in float64)
    drop_thr = math.ceil(params.dropout_p * 2.0 ** 24)
    prec = "ieee" if cdt == torch.float64 else fp32_dot_precision() if q.dtype == torch.float32 else "tf32"
    kern = _kernels(q.device)
    # the seed stays a device tensor (the kernels load it): nothing syncs, and a CUDA graph reads each replay's draw
    tensors = (q, k, v, nq, nk, mask_t, qmask_t, scalars, seed_tensor(params.seed, q.device))
    ints = (h, lq, lk, *ms, *qs, drop_thr, _bucket(lq), _bucket(lk))
    meta = {"DE": de, "DN": dn, "DV": dv, "DE_P": _pad(de), "DV_P": _pad(dv), "E_FN": FUNCTION_CODES[params.e_fn],
            "N_FN": FUNCTION_CODES[params.n_fn], "HAS_MASK": mask is not None, "HAS_QMASK": query_mask is not None,
            "CAUSAL": bool(params.causal), "DROPOUT": params.dropout_p > 0,
            "CDT": tl.float64 if cdt == torch.float64 else tl.float32, "DOT_PREC": prec,
            # 16-bit inputs on a GPU: tanh / sigmoid by MUFU.TANH (2^-11 relative, below their rounding)
            "FAST": q.dtype in (torch.float16, torch.bfloat16) and not kern._INTERPRETED,
            "CENTER_E": bool(params.center_e), "CENTER_N": bool(params.center_n)}
    return kern, tensors, ints, meta


def _centring(kern, tensors, ints, meta, dims, params: FlashParams, dout=None) -> torch.Tensor:
    """The (B, H, Lq, 4) table a centred call subtracts per query row (eqs. 6 / 4): the mean of E and of D over the
    row's (``center_over="slice"``: the slice's) valid pairs, and, for a backward (``dout``), the means of their
    gradients dE and G over the same pairs (the gradient of x - mean(x) is g - mean(g)). ``_stats_kernel`` sums per
    row, the means are taken here: one pass before a forward; two before a backward (the means of E and D again,
    not kept from the forward, then those of the gradients). Not centred: a placeholder (the kernels never read it)."""
    q = tensors[0]
    if not params.centred:
        return q
    b, h, lq = dims
    cent = torch.zeros((b, h, lq, 4), dtype=torch.float64 if q.dtype == torch.float64 else torch.float32,
                       device=q.device)
    sums = torch.empty_like(cent)

    def means(first: int):
        total, count = sums[..., 0:2], sums[..., 2:3]
        if params.center_over == "slice":
            total, count = total.sum(-2, keepdim=True), count.sum(-2, keepdim=True)
        cent[..., first:first + 2] = total / count.clamp(min=1)  # no valid pair: mean 0, nothing subtracted

    _launch(kern, "stats", lq, "BLOCK_M", b, h, (*tensors, cent, q, sums, *ints), {**meta, "GRAD": False})
    means(0)
    if dout is not None:
        _launch(kern, "stats", lq, "BLOCK_M", b, h, (*tensors, cent, dout, sums, *ints), {**meta, "GRAD": True})
        means(2)
    return cent


# (BLOCK_M, BLOCK_N, DC, PF, num_warps, num_stages[, maxnreg]) per kernel, autotune's candidates, the fastest on an
# H200 first (bf16, L 4096, d 64, Triton 3.6: results/bench/gpu_h200.json; the H100's results/bench/gpu_h100.json
# times the configs dropped before: each lost by 24-60 % at every length). The forward: PF 2 (the distance over a
# grid of pairs, triton_math._l1_grid) capped at 168 registers 12.9 ms, DC 4 13.9, PF 0 14.7, PF 1 14.8, (128, 64)
# 16.5 with or without a cap (the cap changed nothing; 128 x 128 PF 2 15.2, (128, 64) DC 4 15.8, 64 x 32 23.5):
# latency-bound, not instruction-bound (PF 0 builds 4.3 SASS instructions per pair and feature, PF 1 3.0). The
# 128 x 64 tiles need more shared memory in float64 than an H100 has: autotune skips them there. With 16-bit
# inputs' distances in float16 (triton_args._l1_args), sm_90 SASS built as the runtime specialises the benchmark's
# call (results/bench/sass_sm90_triton36_aligned.json; the earlier records, unspecialised, counted more): PF 2 DC 2
# 2.72, DC 8 2.04 (capped at 168), PF 0 DC 8 1.65 (230 registers, in place of PF 2 DC 4's 2.27), PF 0 DC 4 1.9;
# not timed on a GPU yet. float32 inputs: 3.51, 3.32, 4.51 (spilling: autotune keeps it for 16-bit inputs), 3.42.
CONFIGS = {"fwd": [(64, 64, 2, 2, 4, 2, 168), (64, 64, 8, 2, 4, 2, 168), (64, 64, 8, 0, 4, 2), (64, 64, 4, 0, 4, 2)],
           "dkdv": [(64, 64, 4, 0, 4, 2), (128, 64, 4, 1, 8, 2)],
           "dq": [(64, 64, 4, 0, 4, 2), (64, 64, 4, 1, 4, 2)]}
CONFIGS["stats"] = CONFIGS["dq"]  # the centring pass: one program per query block, like dq (its GRAD pass is dq's)
# the fused backward (triton_bwd._bwd_kernel): one program per key block, like dkdv; its sign tiles: 8 x 8 lanes
# (two warps) over the pairs, num_warps / 2 such pairs of warps over features (_lanes). On the H200 (64, 64) PF 2
# took 67.3 ms at L 4096, PF 1 70.1, (128, 32) 79.7, (128, 64) 81.1 (dropped), though sm_90 SASS counts 11.2 (PF 1),
# 12.4 and 10.3 instructions per pair and feature: occupancy, not instructions, decides here too. (128, 32) won in
# float32 at L 32 (28 ms against 50, when float32's tl.dot was "ieee"). DC is the distance's chunk alone (the sign
# sums take triton_bwd.SIGN_DC). With 16-bit inputs' sign sums in float16, specialised sm_90 SASS (as above): 8.32
# (DC 2), 7.61 (DC 8, in place of PF 1), 9.62 (128, 32), and (128, 64) of 8 warps at DC 4 6.74, 112 B spilled
# against ~370 at 64 x 64 (added). Not timed on a GPU yet.
CONFIGS["bwd"] = [(64, 64, 2, 2, 4, 2), (64, 64, 8, 2, 4, 2), (128, 64, 4, 2, 8, 2), (128, 32, 2, 1, 8, 2)]
# the autotune key: power-of-two buckets of the lengths, padded dims, flags that change the code
_KEY = ["LQ_BUCKET", "LK_BUCKET", "DE_P", "DN", "DV_P", "CAUSAL", "FAST", "DOT_PREC", "CENTER_E", "CENTER_N"]
_TUNED: dict[str, object] = {}
# Per kernel name, a CONFIGS tuple replacing autotuning on GPUs (empty: autotune): checks, timing configs.
FIXED_CONFIGS: dict[str, tuple[int, ...]] = {}


def _lanes(name: str, bm: int, bn: int, num_warps: int | None) -> dict[str, int]:
    """The fused backward's sign tiles (``triton_bwd._sign_pairs``): two warps' lanes over the tile's pairs, TM = 8
    along queries and TN = 8 along keys, and W = num_warps / 2 such pairs of warps, each on its own features; or
    4 × 4 lanes and W = 2 under the interpreter (``num_warps`` None); nothing for other kernels."""
    if name != "bwd":
        return {}
    tm, tn, w = (4, 4, 2) if num_warps is None else (8, 8, num_warps // 2)
    if bm % tm or bn % tn or w < 1 or (num_warps is not None and num_warps % 2):
        raise ValueError(f"Flash-CoDA (triton): the fused backward takes an even number of warps and blocks "
                         f"({bm}, {bn}) that are multiples of its lanes ({tm}, {tn}); got {num_warps} warps")
    return {"TM": tm, "TN": tn, "W": w}


def _launch(kern, name: str, grid_rows: int, block_axis: str, b: int, h: int, args, meta):
    """Run kernel ``name``: autotuned on GPUs (or ``FIXED_CONFIGS[name]``), ``INTERPRET_BLOCK`` when interpreted."""
    fixed = FIXED_CONFIGS.get(name)
    if kern._INTERPRETED or fixed is not None:
        bm, bn, dc, pf, *launch = (*INTERPRET_BLOCK, None, None) if kern._INTERPRETED else fixed
        block = bm if block_axis == "BLOCK_M" else bn
        options = {} if kern._INTERPRETED else dict(zip(("num_warps", "num_stages", "maxnreg"), launch))
        # interpreted (numpy): the fused backward's sign step overflows d 2^127 to inf on purpose (it saturates to 1)
        with numpy.errstate(over="ignore") if kern._INTERPRETED else contextlib.nullcontext():
            _kernel(kern, name)[(b * h, triton.cdiv(grid_rows, block))](
                *args, **meta, BLOCK_M=bm, BLOCK_N=bn, DC=dc, PF=pf, **_lanes(name, bm, bn, launch[0]), **options)
    else:
        _tuned(kern, name)[lambda cfg: (b * h, triton.cdiv(grid_rows, cfg[block_axis]))](*args, **meta)


def _tuned(kern, name: str):
    """Kernel ``name`` of the compiled ``triton_jit`` under ``triton.autotune`` over ``CONFIGS[name]`` (made once).
    The fused backward's atomics add into DQ and DNQ: autotune zeroes them before each timed run and the last.
    Timings are cached on disk (Triton's cache, keyed by GPU, versions, kernel source, autotune key and configs):
    a sweep's later processes take the first one's choice instead of timing again (and compute the same sums)."""
    if name not in _TUNED:
        configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "DC": dc, "PF": pf, **_lanes(name, bm, bn, w)},
                                 num_warps=w, num_stages=st, maxnreg=(reg or [None])[0])
                   for bm, bn, dc, pf, w, st, *reg in CONFIGS[name]]
        key = _KEY + {"dkdv": ["SHARED"], "dq": ["SHARED"], "bwd": ["SHARED"], "stats": ["GRAD"]}.get(name, [])
        reset = ["DQ", "DNQ"] if name == "bwd" else None
        _TUNED[name] = triton.autotune(configs, key=key, reset_to_zero=reset, cache_results=True)(
            _kernel(kern, name))
    return _TUNED[name]


# The backward: "split" (triton_jit's _dkdv_kernel, then _dq_kernel: each recomputes every tile) or "fused"
# (triton_bwd's _bwd_kernel: each tile once, dq and dnq by atomic adds, summed in a varying order). None: the
# variable CODA_FLASH_BACKWARD, else fused, split under torch.use_deterministic_algorithms. H100, bf16, B.L 16384,
# H 16, d 64 (results/bench/gpu_h100.json): fused 17.9 / 68.4 / 271 ms at L 1K / 4K / 16K, split 19.2 / 74.9 / 295.
BACKWARD: str | None = None


def backward_kind() -> str:
    """``BACKWARD``, or ``CODA_FLASH_BACKWARD``, or "fused" ("split" where deterministic algorithms are asked for);
    a ValueError naming the choices for any other value."""
    default = "split" if torch.are_deterministic_algorithms_enabled() else "fused"
    kind = BACKWARD if BACKWARD is not None else os.environ.get(BACKWARD_ENV) or default
    if kind not in BACKWARDS:
        source = "flash_triton.BACKWARD" if BACKWARD is not None else BACKWARD_ENV
        raise ValueError(f"Flash-CoDA (triton): {source} must be one of {list(BACKWARDS)}, got {kind!r}")
    return kind


def forward(q, k, v, nq, nk, mask, query_mask, params: FlashParams) -> torch.Tensor:
    """out (B, H, Lq, dv) in q's dtype: (dropout(M) ⊙ valid) V per the ``flash_spec`` contract."""
    b, h, lq, lk, de, dn, dv, nq, nk = _check(q, k, v, nq, nk, mask, query_mask, params)
    out = torch.empty((b, h, lq, dv), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    if lk == 0:
        return out.zero_()
    kern, tensors, ints, meta = _common(q, k, v, nq, nk, mask, query_mask, params, (h, lq, lk, de, dn, dv))
    cent = _centring(kern, tensors, ints, meta, (b, h, lq), params)
    _launch(kern, "fwd", lq, "BLOCK_M", b, h, (*tensors, cent, out, *ints), meta)
    return out


def backward(q, k, v, nq, nk, mask, query_mask, params: FlashParams, dout):
    """(dq, dk, dv, dnq, dnk) of ``forward`` for the upstream gradient ``dout`` (B, H, Lq, dv).

    With ``params.shared_n`` the L1 gradients are included in dq / dk and dnq = dnk = None.
    """
    b, h, lq, lk, de, dn, dv, nq, nk = _check(q, k, v, nq, nk, mask, query_mask, params, dout)
    fused = backward_kind() == "fused"
    dout = dout.contiguous()
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    launch = b * h > 0 and lq > 0 and lk > 0
    new = torch.empty if launch else torch.zeros  # the kernels write every element (scratch rows included)
    dq, dk, dv_out = (new(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))
    # fused: dq and dnq are sums of atomic adds, in the accumulation dtype (dnq into dq's buffer with shared N)
    scr_q = (torch.zeros if fused else new)((b, h, lq, dn), dtype=cdt, device=q.device)
    scr_k = new((b, h, lk, dn), dtype=cdt, device=q.device)
    if launch:
        kern, tensors, ints, meta = _common(q, k, v, nq, nk, mask, query_mask, params, (h, lq, lk, de, dn, dv))
        cent = _centring(kern, tensors, ints, meta, (b, h, lq), params, dout)
        meta.update(DN_P=_pad(dn), SHARED=bool(params.shared_n))
        if fused:
            dq_acc = scr_q if params.shared_n else torch.zeros((b, h, lq, de), dtype=cdt, device=q.device)
            _launch(kern, "bwd", lk, "BLOCK_N", b, h,
                    (*tensors, cent, dout, dq_acc, dk, dv_out, scr_q, scr_k, *ints), meta)
            dq = dq_acc.to(q.dtype)
        else:
            _launch(kern, "dkdv", lk, "BLOCK_N", b, h, (*tensors, cent, dout, dk, dv_out, scr_k, *ints), meta)
            _launch(kern, "dq", lq, "BLOCK_M", b, h, (*tensors, cent, dout, dq, scr_q, *ints), meta)
    if params.shared_n:
        return dq, dk, dv_out, None, None
    return dq, dk, dv_out, scr_q.to(q.dtype), scr_k.to(q.dtype)
