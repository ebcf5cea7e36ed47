"""tanh in the kernels that write it out (numba ``_activate`` of the fused and Flash-CoDA kernels, the Triton
``_tanh`` without ``FAST``) keeps its relative accuracy near 0: within 2 ulp of the exact value for every |x|.

The exp form 1 - 2 / (exp(2x) + 1) they used alone cancels for small |x| (float32: tanh(1e-6) came out 9.5e-7,
tanh(1e-8) 0; float64 lost four digits at 1e-12). References by mpmath at 100 bits, errors in ulp of the dtype."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from coda_exp.attention import coda_attention, coda_matrix
from coda_exp.attention.kernels.numba_cpu import HAVE_NUMBA

mpmath = pytest.importorskip("mpmath")

DTYPES = [torch.float32, torch.float64]
# tiny to saturated, dense around the switch between the two forms at 0.625, both signs and 0
_MAGNITUDES = np.concatenate([np.logspace(-30, 1.5, 700), np.linspace(0.6, 0.65, 301), [1e-8, 1e-6, 1e-4]])
POINTS = np.concatenate([_MAGNITUDES, -_MAGNITUDES, [0.0]])


def _exact(x: np.ndarray) -> np.ndarray:
    with mpmath.workprec(100):
        return np.array([float(mpmath.tanh(mpmath.mpf(float(v)))) for v in x])


def _max_ulp(got: torch.Tensor, x: np.ndarray, dtype: torch.dtype) -> float:
    """Largest |got - tanh(x)| in units of the last place of tanh(x) rounded to ``dtype``."""
    want = _exact(x)
    rounded = torch.tensor(want).to(dtype).numpy()
    spacing = np.maximum(np.spacing(np.abs(rounded)).astype(np.float64), np.finfo(np.float64).tiny)
    return float((np.abs(got.double().numpy() - want) / spacing).max())


def _points(dtype):
    return POINTS.astype(np.float32).astype(np.float64) if dtype == torch.float32 else POINTS


pytestmark = pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed")


@pytest.mark.parametrize("dtype", DTYPES)
def test_tanh_of_the_fused_kernel_is_accurate_near_zero(dtype):
    """f_E = tanh (E = x: alpha 1, e_b = 1) and f_N = tanh (N = -|x|, with f_E = sigmoid(0) = 1/2), gate 1."""
    x = _points(dtype)
    col = torch.tensor(x, dtype=dtype)[:, None]
    one, zero, zeros = torch.ones(1, 1, dtype=dtype), torch.zeros(1, 1, dtype=dtype), torch.zeros_like(col)
    e_side = coda_matrix(col, one, zeros, zero, kernel="fused", gate_scale=1.0)[:, 0] * 2  # tanh(x) sigmoid(0) * 2
    assert _max_ulp(e_side, x, dtype) <= 2
    n_side = coda_matrix(zeros, one, col, zero, kernel="fused", gate_scale=1.0, e_fn="sigmoid", n_fn="tanh")[:, 0] * 2
    assert _max_ulp(-n_side, np.abs(x), dtype) <= 2
    tiny = coda_matrix(torch.tensor([[1e-8]], dtype=dtype), one, zero, zero, kernel="fused")[0, 0]
    assert tiny.item() == pytest.approx(1e-8, rel=1e-6)  # was 0.0 in float32


@pytest.mark.parametrize("dtype", DTYPES)
def test_tanh_of_the_numba_flash_kernel_is_accurate_near_zero(dtype):
    x = _points(dtype)
    col = torch.tensor(x, dtype=dtype)[:, None]
    one, zero, zeros = torch.ones(1, 1, dtype=dtype), torch.zeros(1, 1, dtype=dtype), torch.zeros_like(col)
    opts = {"kernel": "flash", "scale": False, "gate_scale": 1.0}
    e_side = coda_attention(col, one, one, n_q=zeros, n_k=zero, **opts)[:, 0] * 2
    assert _max_ulp(e_side, x, dtype) <= 2
    n_side = coda_attention(zeros, one, one, n_q=col, n_k=zero, e_fn="sigmoid", n_fn="tanh", **opts)[:, 0] * 2
    assert _max_ulp(-n_side, np.abs(x), dtype) <= 2


@pytest.mark.parametrize("dtype", DTYPES)
def test_tanh_of_the_triton_kernel_is_accurate_near_zero(dtype, monkeypatch):
    """The Triton forward under the interpreter (``FAST`` is off there, as for float32/float64 on a GPU)."""
    pytest.importorskip("triton")
    from coda_exp.attention.flash_spec import FlashParams
    from coda_exp.attention.kernels import flash_triton as ft

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    x = _points(dtype)[::9]  # ~190 points: the interpreter runs each tile in numpy
    col = torch.tensor(x, dtype=dtype).reshape(1, 1, -1, 1)
    one, zeros = torch.ones(1, 1, 1, 1, dtype=dtype), torch.zeros_like(col)
    zero = torch.zeros(1, 1, 1, 1, dtype=dtype)
    e_side = ft.forward(col, one, one, zeros, zero, None, None,
                        FlashParams(alpha=1.0, beta=1.0, gate=1.0, e_fn="tanh", n_fn="sigmoid"))
    assert _max_ulp(e_side.reshape(-1) * 2, x, dtype) <= 2
    n_side = ft.forward(zeros, one, one, col, zero, None, None,
                        FlashParams(alpha=1.0, beta=1.0, gate=1.0, e_fn="sigmoid", n_fn="tanh"))
    assert _max_ulp(-n_side.reshape(-1) * 2, np.abs(x), dtype) <= 2
