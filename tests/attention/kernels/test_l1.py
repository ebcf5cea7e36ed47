"""l1_distance: every kernel's L1 against the explicit (..., la, lb, d) broadcast; gradients; memory; kernel choice."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from coda_exp.attention.dispatch import ENV_VAR, describe, l1_distance, select_kernel
from coda_exp.attention.kernels.l1 import CHUNK_BYTES, chunk_plan

KERNELS = ["numba", "chunked", "torch"]


def l1_reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Obviously right and memory-hungry: (..., la, 1, d) - (..., 1, lb, d), |.|, sum over d."""
    return (x.unsqueeze(-2) - y.unsqueeze(-3)).abs().sum(-1)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("shape_x,shape_y", [
    ((5, 3), (7, 3)),  # no batch dim, odd unequal lengths
    ((2, 3, 5, 4), (2, 3, 7, 4)),  # batch and heads
    ((2, 3, 6, 4), (3, 1, 4)),  # broadcast batch dims
    ((4, 1, 8), (4, 9, 8)),  # la = 1
])
def test_values_and_gradients_match_broadcast(kernel, shape_x, shape_y):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape_x, dtype=torch.float64, generator=gen, requires_grad=True)
    y = torch.randn(shape_y, dtype=torch.float64, generator=gen, requires_grad=True)
    out, ref = l1_distance(x, y, kernel=kernel), l1_reference(x, y)
    assert out.shape == ref.shape
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    grad = torch.randn(ref.shape, dtype=torch.float64, generator=gen)
    got = torch.autograd.grad(out, (x, y), grad)
    want = torch.autograd.grad(ref, (x, y), grad)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("la,lb", [(5, 7), (4, 3), (1, 1)])
def test_gradcheck_numba(la, lb):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, la, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    y = torch.randn(2, lb, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: l1_distance(a, b, kernel="numba"), (x, y))


def test_float32_numba_matches_float64_reference():
    gen = torch.Generator().manual_seed(2)
    x, y = torch.randn(3, 33, 16, generator=gen), torch.randn(3, 20, 16, generator=gen)
    torch.testing.assert_close(l1_distance(x, y, kernel="numba").double(), l1_reference(x.double(), y.double()),
                               rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("kernel", KERNELS)
def test_sign_at_exact_ties_is_zero(kernel):
    """sign(0) = 0 at x_ik == y_jk, like torch.cdist's gradient (and unlike sign(0) = +1)."""
    x = torch.tensor([[[1.0, 2.0], [0.5, -1.0]]], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([[[1.0, 3.0]]], dtype=torch.float64, requires_grad=True)
    gx, gy = torch.autograd.grad(l1_distance(x, y, kernel=kernel).sum(), (x, y))
    torch.testing.assert_close(gx, torch.tensor([[[0.0, -1.0], [-1.0, -1.0]]], dtype=torch.float64))
    torch.testing.assert_close(gy, torch.tensor([[[1.0, 2.0]]], dtype=torch.float64))


def test_zero_gradient_pairs_are_skipped_correctly():
    """Rows/columns with G = 0 (masked pairs) must not leak into the gradients of other rows."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 5, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    y = torch.randn(2, 6, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    grad = torch.randn(2, 5, 6, dtype=torch.float64, generator=gen)
    grad[:, 1] = 0
    grad[:, :, 4] = 0
    grad[0, 2:4, :] = 0  # both rows of a 2-row block
    got = torch.autograd.grad(l1_distance(x, y, kernel="numba"), (x, y), grad)
    want = torch.autograd.grad(l1_reference(x, y), (x, y), grad)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_deterministic_bitwise():
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(8, 31, 24, generator=gen, requires_grad=True)
    y = torch.randn(8, 17, 24, generator=gen, requires_grad=True)
    grad = torch.randn(8, 31, 17, generator=gen)
    runs = []
    for _ in range(2):
        out = l1_distance(x, y, kernel="numba")
        runs.append((out, *torch.autograd.grad(out, (x, y), grad)))
    for a, b in zip(*runs):
        assert torch.equal(a, b)


@pytest.mark.parametrize("kernel", ["numba", "chunked"])
def test_empty_sizes(kernel):
    x = torch.randn(2, 0, 3, dtype=torch.float64, requires_grad=True)
    y = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    out = l1_distance(x, y, kernel=kernel)
    assert out.shape == (2, 0, 4)
    out.sum().backward()
    assert torch.equal(y.grad, torch.zeros_like(y))
    x0, y0 = torch.randn(2, 3, 0), torch.randn(2, 4, 0)
    assert torch.equal(l1_distance(x0, y0, kernel=kernel), torch.zeros(2, 3, 4))


def test_the_l1_kernel_follows_the_dispatch(monkeypatch):
    """l1_distance asks select_kernel for a materialising kernel: never fused, numba on float CPU, chunked off it."""
    x = torch.randn(2, 3)
    monkeypatch.delenv(ENV_VAR, raising=False)
    for kernel, dtype, device, want in [("auto", torch.float32, "cpu", "numba"), ("fused", torch.float64, "cpu", "numba"),
                                        ("auto", torch.bfloat16, "cpu", "torch"), ("chunked", torch.float32, "cpu", "chunked"),
                                        ("auto", torch.float32, "meta", "chunked"), ("torch", torch.float32, "meta", "torch")]:
        t = x.to(device=device, dtype=dtype)
        assert select_kernel(kernel, describe(t, t, output="l1")).name == want, (kernel, dtype, device)
    for kernel, dtype, device in [("numba", torch.half, "cpu"), ("numba", torch.float32, "meta")]:
        t = x.to(device=device, dtype=dtype)
        with pytest.raises(ValueError, match="CoDA option kernel is 'numba', which cannot run this call"):
            select_kernel(kernel, describe(t, t, output="l1"))
    monkeypatch.setenv(ENV_VAR, "torch")  # the environment beats the argument
    assert select_kernel("numba", describe(x, x, output="l1")).name == "torch"
    monkeypatch.setenv(ENV_VAR, "fast")
    with pytest.raises(ValueError, match=f"environment variable {ENV_VAR} must be one of"):
        l1_distance(x, x)
    monkeypatch.delenv(ENV_VAR)
    with pytest.raises(ValueError, match="CoDA option kernel must be one of"):
        l1_distance(x, x, kernel="cuda")
    with pytest.raises(ValueError, match="chunk_bytes must be"):
        l1_distance(x, x, kernel="chunked", chunk_bytes=0)
    with pytest.raises(ValueError, match="feature sizes differ"):
        l1_distance(torch.randn(2, 3), torch.randn(2, 4))


def test_numba_backward_is_first_order_only():
    x = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    (gx,) = torch.autograd.grad(l1_distance(x, x.flip(0), kernel="numba").sum(), (x,), create_graph=True)
    with pytest.raises(RuntimeError):
        gx.sum().backward()


def test_peak_memory_grows_as_la_lb_not_la_lb_d():
    """B*H = 256, L = 256, d = 64: the broadcast form needs 256*256*256*64*4 B = 4.3 GB for one temporary."""
    code = textwrap.dedent("""
        import resource, torch
        from coda_exp.attention import CoDAScoring
        torch.manual_seed(0)
        q, k, v = (torch.randn(32, 8, 256, 64, requires_grad=True) for _ in range(3))
        CoDAScoring(kernel="numba")(q[:1, :1, :8], k[:1, :1, :8], v[:1, :1, :8])  # load kernels first
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out, _ = CoDAScoring(kernel="numba")(q, k, v)
        out.sum().backward()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(before // 1024, peak // 1024)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    before_mb, peak_mb = map(int, res.stdout.split()[-2:])
    assert peak_mb < 1500, f"peak RSS {peak_mb} MB (before the call: {before_mb} MB)"


@pytest.mark.parametrize("la,lb", [(11, 13), (8, 8), (3, 17)])
def test_row_blocks_and_zero_gradient_spans(la, lb):
    """Four-row blocks plus remainder rows; G zero outside causal / padded spans is skipped without leaking."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(3, la, 6, dtype=torch.float64, generator=gen, requires_grad=True)
    y = torch.randn(3, lb, 6, dtype=torch.float64, generator=gen, requires_grad=True)
    grad = torch.randn(3, la, lb, dtype=torch.float64, generator=gen)
    grad[0] *= torch.ones(la, lb, dtype=torch.float64).tril(diagonal=lb - la)  # causal
    grad[1, :, lb - 3:] = 0  # padded keys
    grad[2, 1:3] = 0  # zero rows inside a block
    grad[2, :, :2] = 0
    out = l1_distance(x, y, kernel="numba")
    torch.testing.assert_close(out, l1_reference(x, y), rtol=1e-12, atol=1e-12)
    got = torch.autograd.grad(out, (x, y), grad)
    want = torch.autograd.grad(l1_reference(x, y), (x, y), grad)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- chunked backward (CUDA default)


def test_chunk_plan_fits_the_budget():
    assert chunk_plan(2, 5, 7, 3, 8, 10**9) == (5, 3)  # everything in one block
    assert chunk_plan(2, 5, 7, 3, 8, 2 * 7 * 8 * 5 * 2) == (5, 2)  # all rows, 2 of 3 features
    assert chunk_plan(2, 5, 7, 3, 8, 2 * 7 * 8 * 3) == (3, 1)  # one feature, 3 rows
    assert chunk_plan(2, 5, 7, 3, 8, 1) == (1, 1)  # a budget below one (S, 1, lb, 1) block: one row, one feature
    rows, width = chunk_plan(256, 256, 256, 64, 4, CHUNK_BYTES)  # B*H=256, L=256, d=64, float32
    assert 256 * rows * 256 * width * 4 <= CHUNK_BYTES and width < 64


@pytest.mark.parametrize("chunk_bytes", [1, 2 * 13 * 8 * 3, 2 * 13 * 8 * 11 * 2, 10**9])
@pytest.mark.parametrize("la,lb,d", [(11, 13, 5), (1, 13, 1), (7, 13, 4)])
def test_chunked_matches_reference_for_any_block_size(chunk_bytes, la, lb, d):
    """Row blocks and feature chunks (chunk < d, remainders, single row/feature) give the reference gradients."""
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(2, la, d, dtype=torch.float64, generator=gen, requires_grad=True)
    y = torch.randn(2, lb, d, dtype=torch.float64, generator=gen, requires_grad=True)
    x.data[0, 0, 0] = y.data[0, 3, 0]  # an exact tie: sign 0
    grad = torch.randn(2, la, lb, dtype=torch.float64, generator=gen)
    out = l1_distance(x, y, kernel="chunked", chunk_bytes=chunk_bytes)
    torch.testing.assert_close(out, l1_reference(x, y), rtol=1e-12, atol=1e-12)
    got = torch.autograd.grad(out, (x, y), grad)
    want = torch.autograd.grad(l1_reference(x, y), (x, y), grad)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("chunk_bytes", [1, 64, None])
def test_gradcheck_chunked(chunk_bytes):
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(2, 1, 5, 3, dtype=torch.float64, generator=gen, requires_grad=True)  # broadcast over dim 1
    y = torch.randn(2, 2, 4, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: l1_distance(a, b, kernel="chunked", chunk_bytes=chunk_bytes),
                                     (x, y))


@pytest.mark.parametrize("chunk_bytes", [1, None])
def test_chunked_is_twice_differentiable(chunk_bytes):
    """Its backward was wrapped in once_differentiable, which never reached autograd: a second derivative through
    CoDA came out silently wrong (0.27 off at 0.97) instead of raising. The blocks are formed out of place under
    create_graph, so it is right (dX, dY linear in G; sign' = 0 a.e.)."""
    from coda_exp.attention import coda_attention

    gen = torch.Generator().manual_seed(9)
    x = torch.randn(2, 1, 5, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    y = torch.randn(2, 2, 4, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda a, b: l1_distance(a, b, kernel="chunked", chunk_bytes=chunk_bytes),
                                        (x, y))
    q, k, v = (torch.randn(1, 1, 4, 3, dtype=torch.float64, generator=gen, requires_grad=True) for _ in range(3))
    assert torch.autograd.gradgradcheck(lambda a, b, c: coda_attention(a, b, c, kernel="chunked"), (q, k, v))


def test_chunked_float32():
    gen = torch.Generator().manual_seed(8)
    x, y = torch.randn(3, 33, 16, generator=gen), torch.randn(3, 20, 16, generator=gen)
    torch.testing.assert_close(l1_distance(x, y, kernel="chunked").double(), l1_reference(x.double(), y.double()),
                               rtol=1e-5, atol=1e-4)


def test_chunked_backward_peak_memory_stays_within_its_budget():
    """B*H = 64, L = 256, d = 64: one (la, lb, d) temporary would be 64*256*256*64*4 B = 1.07 GB; with a 16 MiB
    budget the backward's peak RSS growth (after inputs exist) stays near out + grad + dx + dy + one block."""
    code = textwrap.dedent("""
        from pathlib import Path
        import torch
        from coda_exp.attention import l1_distance

        def kb(field):
            return next(int(x.split()[1]) for x in Path("/proc/self/status").read_text().splitlines()
                        if x.startswith(field + ":"))

        torch.manual_seed(0)
        x, y = (torch.randn(64, 256, 64, requires_grad=True) for _ in range(2))
        l1_distance(x[:1, :4], y[:1, :4], kernel="chunked").sum().backward()  # warm up
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM)
        before = kb("VmRSS")
        l1_distance(x, y, kernel="chunked", chunk_bytes=16 * 2**20).sum().backward()
        print((kb("VmHWM") - before) // 1024)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    growth_mb = int(res.stdout.split()[-1])
    assert growth_mb < 200, f"peak RSS grew by {growth_mb} MB during fwd+bwd"


def test_the_chunked_kernel_runs_under_vmap_as_one_batch():
    """Several seeds of one model in one process (torch.func.vmap, the fast path's benchmark) need the chunked L1,
    CUDA's kernel, to be vmappable: values and gradients equal the batched call's, small chunks included."""
    from coda_exp.attention.kernels.l1 import chunked_l1

    x = torch.randn(3, 2, 4, 5, dtype=torch.float64, requires_grad=True)
    y = torch.randn(3, 2, 6, 5, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(3, 2, 4, 6, dtype=torch.float64)
    mapped = torch.vmap(lambda a, b: chunked_l1(a, b, chunk_bytes=64))(x, y)
    gx, gy = torch.autograd.grad((mapped * weights).sum(), (x, y))
    whole = chunked_l1(x, y)
    wx, wy = torch.autograd.grad((whole * weights).sum(), (x, y))
    torch.testing.assert_close(mapped, whole)
    torch.testing.assert_close(gx, wx)
    torch.testing.assert_close(gy, wy)
