"""CoDA under torch.func's transforms and second derivatives, against the explicit reference (float64).

* vmap (+ a backward of its result): every kernel. The fused kernel's custom op has a vmap rule that decides on
  the physical tensors whether to keep its local derivatives (a BatchedTensor says requires_grad=False: they were
  left empty and the backward failed, ``shape '[2, 0, 0]' is invalid``).
* grad / jacrev / jvp / hessian: flash, fused and numba are torch.library custom ops, which those transforms cannot
  run; ``auto`` takes ``chunked`` there, and naming one of them is one error naming it and ``chunked``.
* A double backward: ``chunked`` and ``torch`` have one (``torch``: cdist's backward has none, so under create_graph
  its gradient is ``chunked``'s); flash, fused (the default on the CPU) and numba raise naming ``kernel=chunked``.
"""

from __future__ import annotations

import pytest
import torch

from coda_exp.attention import CoDAOptions, coda_attention, coda_matrix, l1_distance
from coda_exp.attention.kernels.numba_cpu import HAVE_NUMBA
from tests.attention.reference import reference

KERNELS = ["auto", "flash", "fused", "numba", "chunked", "torch"]
CUSTOM_OPS = ["flash", "fused", "numba"]
pytestmark = pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed")


def _attend(t, kernel="torch"):
    """Self-attention on one (H, L, d) example: shared N inputs (eq. 10)."""
    return coda_attention(t, t, t, kernel=kernel)


def _ref_attend(t):
    """The explicit reference (eqs. 1-5, 10: 1/sqrt(d) scaling, gate 2 sigmoid) times V."""
    s = t.shape[-1] ** -0.5
    return reference(t, t, t, t, s, s, "tanh", "sigmoid", False, False, 2.0, None) @ t


def _examples(seed=0, shape=(3, 2, 5, 4)):
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("kernel", KERNELS)
def test_vmap_and_a_backward_of_its_result(kernel):
    x = _examples()
    leaves, ref_leaves = x.clone().requires_grad_(), x.clone().requires_grad_()
    got = torch.func.vmap(lambda t: _attend(t, kernel))(leaves)
    want = torch.stack([_ref_attend(t) for t in ref_leaves])
    torch.testing.assert_close(got, want)
    got.square().sum().backward()
    want.square().sum().backward()
    torch.testing.assert_close(leaves.grad, ref_leaves.grad)


@pytest.mark.parametrize("mask_dim", [0, None, 1])
def test_vmap_of_the_fused_matrix_with_masks_batched_or_not(mask_dim):
    """Unshared N inputs, a mask vmapped over (at dim 0 or 1) or shared by every example, broadcast over heads."""
    gen = torch.Generator().manual_seed(1)
    e_a, e_b = (torch.randn(3, 2, n, 4, dtype=torch.float64, generator=gen, requires_grad=True) for n in (5, 6))
    masks = torch.rand(3, 5, 6, generator=gen) > 0.3
    mask = {0: masks, None: masks[0], 1: masks.transpose(0, 1)}[mask_dim]
    fn = torch.func.vmap(lambda a, b, m: coda_matrix(a, b, 2 * a, b + 1, mask=m, kernel="fused"), (0, 0, mask_dim))
    got = fn(e_a, e_b, mask)
    want = torch.stack([reference(a, b, 2 * a, b + 1, 1.0, 1.0, "tanh", "sigmoid", False, False, 2.0, m)
                        for a, b, m in zip(e_a, e_b, masks if mask_dim is not None else [masks[0]] * 3)])
    torch.testing.assert_close(got, want)
    grads = torch.autograd.grad(got.square().sum(), (e_a, e_b))
    wants = torch.autograd.grad(want.square().sum(), (e_a, e_b))
    for g, w in zip(grads, wants):
        torch.testing.assert_close(g, w)


def test_func_grad_jacrev_and_vmap_of_grad_with_auto():
    x = _examples()[0]
    x_ref = x.clone().requires_grad_()
    (want,) = torch.autograd.grad(_ref_attend(x_ref).square().sum(), x_ref)
    torch.testing.assert_close(torch.func.grad(lambda t: _attend(t, "auto").square().sum())(x), want)
    jac = torch.func.jacrev(lambda t: _attend(t, "auto"))(x)
    torch.testing.assert_close(jac, torch.autograd.functional.jacobian(_ref_attend, x))
    batch = _examples(seed=2)
    per_example = torch.func.vmap(torch.func.grad(lambda t: _attend(t, "auto").sum()))(batch)
    torch.testing.assert_close(per_example, torch.stack(
        [torch.autograd.functional.jacobian(lambda t: _ref_attend(t).sum(), t) for t in batch]))


def test_forward_mode_and_hessian_with_auto():
    x = _examples(shape=(1, 3, 2))[0]
    tangent = torch.randn_like(x)
    _, got = torch.func.jvp(lambda t: _attend(t, "auto"), (x,), (tangent,))
    _, want = torch.autograd.functional.jvp(_ref_attend, x, tangent)
    torch.testing.assert_close(got, want)
    hess = torch.func.hessian(lambda t: _attend(t, "auto").square().sum())(x)
    torch.testing.assert_close(hess, torch.autograd.functional.hessian(lambda t: _ref_attend(t).square().sum(), x))


@pytest.mark.parametrize("kernel", CUSTOM_OPS)
def test_a_custom_op_kernel_under_func_grad_is_refused_by_name(kernel):
    with pytest.raises(ValueError, match=f"kernel is '{kernel}'.*torch.func.*use kernel=chunked"):
        torch.func.grad(lambda t: _attend(t, kernel).sum())(_examples()[0])


@pytest.mark.parametrize("kernel", ["chunked", "torch"])
def test_twice_differentiable_kernels(kernel):
    gen = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, 4, 3, dtype=torch.float64, generator=gen, requires_grad=True) for _ in range(3))
    assert torch.autograd.gradgradcheck(lambda a, b, c: coda_attention(a, b, c, kernel=kernel), (q, k, v))
    x, y = (torch.randn(2, n, 3, dtype=torch.float64, generator=gen, requires_grad=True) for n in (4, 5))
    assert torch.autograd.gradgradcheck(lambda a, b: l1_distance(a, b, kernel=kernel), (x, y))


@pytest.mark.parametrize("kernel", [*CUSTOM_OPS, "auto"])
def test_a_double_backward_names_the_kernel_and_chunked(kernel):
    q = torch.randn(1, 1, 5, 3, dtype=torch.float64, requires_grad=True)
    out = coda_attention(q, q, q, options=CoDAOptions(kernel=kernel))
    ran = "fused" if kernel == "auto" else kernel  # auto on a small CPU call
    with pytest.raises(RuntimeError, match=f"kernel '{ran}' has no second derivative.*use kernel=chunked"):
        (g,) = torch.autograd.grad(out.square().sum(), q, create_graph=True)  # flash refuses here already
        g.sum().backward()


@pytest.mark.parametrize("chunk_bytes", [1, None])
def test_chunked_l1_forward_mode_and_jacrev_block_by_block(chunk_bytes):
    """chunk_bytes=1: one row and one feature per block (the tangent and the out-of-place backward join them)."""
    gen = torch.Generator().manual_seed(5)
    x, y = torch.randn(2, 4, 3, dtype=torch.float64, generator=gen), torch.randn(2, 5, 3, dtype=torch.float64,
                                                                                 generator=gen)
    tx, ty = torch.randn_like(x), torch.randn_like(y)

    def explicit(a, b):
        return (a.unsqueeze(-2) - b.unsqueeze(-3)).abs().sum(-1)

    def chunked(a, b):
        return l1_distance(a, b, kernel="chunked", chunk_bytes=chunk_bytes)

    torch.testing.assert_close(torch.func.jvp(chunked, (x, y), (tx, ty))[1],
                               torch.autograd.functional.jvp(explicit, (x, y), (tx, ty))[1])
    for got, want in zip(torch.func.jacrev(chunked, argnums=(0, 1))(x, y),
                         torch.autograd.functional.jacobian(explicit, (x, y))):
        torch.testing.assert_close(got, want)
