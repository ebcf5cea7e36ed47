"""FastStep's CUDA-graph bookkeeping, on a CPU: warm-up, one capture per batch shape, replays into fixed gradient
buffers, eager steps on request, the graph cap. torch.cuda's stream and graph calls are stood in for, and a replay
runs the captured body eagerly (what the graph would launch), so the same code paths run without a GPU."""

import contextlib

import pytest
import torch

from coda_exp.fast_step import FastOptions, FastStep


class _Task(torch.nn.Module):
    """The parts of a TaskModule FastStep uses: parameters and train_loss."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))

    def train_loss(self, batch):
        return ((self.net(batch["x"]).squeeze(-1) - batch["y"]) ** 2).mean(), batch["y"].numel()


def batches(n: int, size: int = 6):
    gen = torch.Generator().manual_seed(1)
    return [{"x": torch.randn(size, 4, generator=gen), "y": torch.randn(size, generator=gen)} for _ in range(n)]


def train(step_fn, task, data):
    opt = torch.optim.SGD(task.parameters(), lr=0.1)
    losses = []
    for b in data:
        losses.append(float(step_fn(b)))
        opt.step()
    return losses, [p.detach().clone() for p in task.parameters()]


def test_warm_up_then_one_capture_then_replays_into_fixed_gradient_buffers(fake_cuda):
    eager_task = _Task()
    eager = FastStep(eager_task, FastOptions(cuda_graph=False))
    want_losses, want_params = train(eager._forward_backward, eager_task, batches(7))

    task = _Task()
    fast = FastStep(task, FastOptions(cuda_graph=True, warmup_steps=2))
    grads = {}

    def step(b):
        loss = fast._forward_backward(b)
        grads[len(grads)] = [p.grad for p in task.parameters()]
        return loss

    losses, params = train(step, task, batches(7))
    assert (fast.eager_steps, len(fast.graphs), fast.replays) == (2, 1, 5) and fake_cuda == [None]
    after = grads[2]  # the buffers captured at step 3 are the ones every replay writes
    assert all(all(g is a for g, a in zip(grads[i], after)) for i in range(2, 7))
    assert losses == pytest.approx(want_losses, rel=1e-6)
    for p, q in zip(params, want_params):
        torch.testing.assert_close(p, q)
    summary = fast.summary()
    assert summary["graphs_captured"] == 1 and summary["graph_replays"] == 5 and summary["fallback"] is None


def test_replays_still_train_after_a_zero_grad_that_sets_grads_to_none(fake_cuda):
    """Lightning calls ``zero_grad()`` (set_to_none) before every validation. Replays write the captured buffers
    whatever ``p.grad`` says, so the optimizer would see ``grad is None`` and skip every parameter for the rest of
    the run (seen on an H200: MLU's training loss flat from the first validation at step 5000 to step 100K)."""
    eager_task = _Task()
    eager = FastStep(eager_task, FastOptions(cuda_graph=False))
    want_losses, want_params = train(eager._forward_backward, eager_task, batches(8))

    task = _Task()
    fast = FastStep(task, FastOptions(cuda_graph=True, warmup_steps=2))

    def step(b):
        if fast.replays == 2:
            task.zero_grad()  # what on_validation_model_zero_grad does
            assert all(p.grad is None for p in task.parameters())
        return fast._forward_backward(b)

    losses, params = train(step, task, batches(8))
    assert fast.replays == 6
    assert losses == pytest.approx(want_losses, rel=1e-6)
    for p, q in zip(params, want_params):
        torch.testing.assert_close(p, q)


def test_an_eager_request_a_second_shape_and_the_graph_cap(fake_cuda):
    task = _Task()
    fast = FastStep(task, FastOptions(cuda_graph=True, warmup_steps=1, max_graphs=2))
    small, mid, large = batches(3, 6), batches(2, 5), batches(2, 3)
    for b in small:
        fast._forward_backward(b)
    assert (fast.eager_steps, len(fast.graphs), fast.replays) == (1, 1, 2)
    fast.request_eager()  # e.g. GateStats: this step's hooks must fire
    fast._forward_backward(small[0])
    assert (fast.eager_steps, fast.replays) == (2, 2)
    for b in mid:  # a second shape: its own graph
        fast._forward_backward(b)
    assert len(fast.graphs) == 2 and fast.replays == 4 and fake_cuda == [None, "pool"]  # one memory pool shared
    for b in large:  # beyond max_graphs: eager
        fast._forward_backward(b)
    assert len(fast.graphs) == 2 and fast.eager_steps == 4


def test_a_capture_that_fails_falls_back_to_eager_steps_with_a_warning(fake_cuda, monkeypatch):
    @contextlib.contextmanager
    def broken(g, pool=None):
        raise RuntimeError("operation not permitted when stream is capturing")
        yield  # pragma: no cover

    monkeypatch.setattr(torch.cuda, "graph", broken)
    task = _Task()
    fast = FastStep(task, FastOptions(cuda_graph=True, warmup_steps=1))
    data = batches(4)
    fast._forward_backward(data[0])  # the warm-up step
    with pytest.warns(UserWarning, match="CUDA graph capture failed, eager instead"):
        fast._forward_backward(data[1])
    for b in data[2:]:
        fast._forward_backward(b)
    assert not fast.graphs and fast.eager_steps == 4 and "not permitted" in fast.fallback
    assert fast.options.cuda_graph is False


def test_a_real_error_of_the_loss_is_raised_not_taken_for_a_compile_failure():
    """Without fast.compile, an error of the task's own loss propagates once: no "torch.compile failed" warning,
    no second forward."""
    import warnings

    calls = []

    class Broken(_Task):
        def train_loss(self, batch):  # a method, as on a TaskModule: each access is a new bound method
            calls.append(1)
            raise RuntimeError("a real bug in the loss")

    task = Broken()
    fast = FastStep(task, FastOptions(cuda_graph=False))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeError, match="a real bug in the loss"):
            fast._forward_backward(batches(1)[0])
    assert calls == [1] and fast.fallback is None


@pytest.mark.gpu
def test_a_real_cuda_graph_trains_as_eager_steps_across_a_zero_grad():
    """On a GPU, the real capture and replays (no stand-ins): 8 steps with Lightning's pre-validation zero_grad()
    after the second replay train the weights eager steps train (the H200 bug froze them instead)."""
    data = [{k: v.cuda() for k, v in b.items()} for b in batches(8)]
    eager_task = _Task().cuda()
    want_losses, want_params = train(FastStep(eager_task, FastOptions(cuda_graph=False))._forward_backward,
                                     eager_task, data)
    task = _Task().cuda()
    fast = FastStep(task, FastOptions(cuda_graph=True, warmup_steps=2))

    def step(b):
        if fast.replays == 2:
            task.zero_grad()
        return fast._forward_backward(b).clone()

    losses, params = train(step, task, data)
    assert (fast.eager_steps, len(fast.graphs), fast.replays, fast.fallback) == (2, 1, 6, None)
    assert losses == pytest.approx(want_losses, rel=1e-5)
    for p, q in zip(params, want_params):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
