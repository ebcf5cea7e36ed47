"""The eager path of a CoDA call without torch.compile's machinery (issue 22: on an H100 an eager CoDA training
step at MLU's short sequences was slower with Flash-CoDA than with the materialising path, its kernels taking
microseconds): Flash-CoDA's op runs as an autograd.Function outside torch.compile and as the custom op inside it,
computing the same; shapes broadcast without torch's symbolic-shape machinery; the Triton kernels' scalars are a
device tensor made once per set of values (torch.tensor on CUDA copied and synchronised at every call)."""

from __future__ import annotations

import pytest
import torch

from coda_exp.attention import CoDAOptions, coda_attention
from coda_exp.attention.kernels import flash
from coda_exp.attention.kernels.triton_args import _scalars
from coda_exp.attention.shapes import broadcast_shapes


@pytest.mark.parametrize("shapes", [((2, 1, 3), (1, 4, 3)), ((5,), (2, 1)), ((), (3, 2)), ((0, 1), (1, 4)),
                                    ((2, 3), (2, 3), (1, 3)), ((1,), ())])
def test_broadcast_shapes_as_torch(shapes):
    assert broadcast_shapes(*shapes) == torch.broadcast_shapes(*shapes)


@pytest.mark.parametrize("shapes", [((2, 3), (3, 3)), ((0,), (2,)), ((4, 1), (2, 1, 3), (5,))])
def test_shapes_that_do_not_broadcast_raise_as_torch(shapes):
    with pytest.raises(RuntimeError):
        torch.broadcast_shapes(*shapes)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        broadcast_shapes(*shapes)


def _run(monkeypatch, custom_op: bool):
    """Flash-CoDA (the numba backend) forward and gradients, through the custom op or the eager Function."""
    if custom_op:
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    else:
        monkeypatch.setattr(flash, "_flash_op", None)  # never reached outside torch.compile
    gen = torch.Generator().manual_seed(0)
    q, k, v, nq, nk = (torch.randn(2, 3, 7, 4, generator=gen, dtype=torch.float64).requires_grad_() for _ in range(5))
    mask = torch.rand(2, 1, 1, 7, generator=gen) > 0.3
    query_mask = torch.rand(2, 1, 7, 1, generator=gen) > 0.2
    torch.manual_seed(3)  # the dropout seed
    out = coda_attention(q, k, v, options=CoDAOptions(kernel="flash"), mask=mask, query_mask=query_mask, n_q=nq,
                         n_k=nk, causal=True, dropout_p=0.2)
    grads = torch.autograd.grad(out, (q, k, v, nq, nk), torch.randn(out.shape, generator=gen, dtype=out.dtype))
    return out, grads


def test_the_eager_function_computes_what_the_custom_op_does(monkeypatch):
    out, grads = _run(monkeypatch, custom_op=False)
    monkeypatch.undo()
    want_out, want_grads = _run(monkeypatch, custom_op=True)
    assert torch.equal(out, want_out)
    assert all(torch.equal(g, w) for g, w in zip(grads, want_grads))


def test_a_second_derivative_through_flash_is_refused_by_name():
    q, k, v = (torch.randn(1, 1, 5, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    out = coda_attention(q, k, v, options=CoDAOptions(kernel="flash"))
    with pytest.raises(RuntimeError, match="kernel .flash. has no second derivative.*use kernel=chunked"):
        torch.autograd.grad(out.sum(), q, create_graph=True)


def test_the_kernels_scalars_are_made_once_per_set_of_values():
    cpu = torch.device("cpu")
    first = _scalars((0.5, 0.25, 2.0, 1.0), torch.float32, cpu)
    assert _scalars((0.5, 0.25, 2.0, 1.0), torch.float32, cpu) is first
    assert first.tolist() == [0.5, 0.25, 2.0, 1.0] and first.dtype == torch.float32
    other = _scalars((0.5, 0.25, 2.0, 1.0), torch.float64, cpu)
    assert other is not first and other.dtype == torch.float64
    assert _scalars((0.5, 0.25, 1.0, 1.0), torch.float32, cpu).tolist() == [0.5, 0.25, 1.0, 1.0]


def test_vmap_through_flash_takes_the_custom_op():
    """torch.vmap (bench_fast_path's vmap lever) batches the custom op; the autograd.Function has no vmap rule."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, 2, 6, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    opts = CoDAOptions(kernel="flash")

    def attend(q, k, v):
        return coda_attention(q, k, v, options=opts)

    got = torch.vmap(attend)(q, k, v)
    want = torch.stack([attend(*x) for x in zip(q, k, v)])
    torch.testing.assert_close(got, want)
