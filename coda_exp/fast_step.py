"""The fast training step for small models (``trainer=gpu_fast``, ``docs/fast_path.md``).

A tiny network (MLU's T2T tiny: 0.9M parameters, batches of 192 short pairs) leaves a GPU idle most of each step:
the time goes to launching kernels and to Python, not to arithmetic. :class:`FastStep` removes what it can, each
lever a field of :class:`FastOptions`:

- ``cuda_graph`` (CUDA only): after ``warmup_steps`` eager steps, the forward, backward, gradient clipping and
  the on-device loss sums are captured once per batch shape in a CUDA graph and replayed every step (one launch
  instead of hundreds). Gradients live in fixed buffers, zeroed inside the graph, so every graph and every eager
  step writes the same tensors the optimizer reads;
- ``compile``: ``torch.compile`` of the loss (``TaskModule.train_loss``) with that mode (fusion; any device);
  the first call that fails to compile falls back to eager, once, with a warning (``fallback`` says why);
- ``fused_optimizer``: the optimizer's fused implementation (one multi-tensor kernel per step) where it has one;
- ``log_every``: the training loss is summed on the device and read (one host synchronisation) every that many
  steps; nothing else waits for the GPU during training;
- static shapes are the data module's (``data.static_shapes``), so that one graph serves every batch.

The optimizer step runs through Lightning's ``LightningOptimizer.step(closure)`` (manual optimization), so step
counting, checkpoints, schedulers and resuming are Lightning's as in the plain path. A callback that needs a
step's real forward (``GateStats``' hooks do not fire in a replayed graph) calls ``request_eager()`` before it.
On a CPU the same code runs eagerly (or compiled): the path is tested there at fixture scale.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import asdict, dataclass

import torch

log = logging.getLogger(__name__)

COMPILE_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass(frozen=True)
class FastOptions:
    """The levers of the fast path (see the module docstring); ``static_shapes`` and ``eval_batch_size`` are
    handed to the data module by the pipeline."""

    cuda_graph: bool = True
    compile: str | None = None
    fused_optimizer: bool = True
    log_every: int = 100
    warmup_steps: int = 3
    max_graphs: int = 4
    static_shapes: bool = True
    eval_batch_size: int | None = None
    gradient_clip_val: float | None = None  # by global L2 norm, inside the step (Lightning clips only automatic steps)

    def __post_init__(self) -> None:
        if self.compile not in COMPILE_MODES:
            raise ValueError(f"fast.compile must be one of {list(COMPILE_MODES)}, got {self.compile!r}")
        if self.cuda_graph and self.compile == "reduce-overhead":
            raise ValueError("fast.compile=reduce-overhead makes CUDA graphs of its own: set fast.cuda_graph=false "
                             "or another compile mode")
        for key in ("log_every", "max_graphs"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"fast.{key} must be an int >= 1, got {value!r}")
        if not isinstance(self.warmup_steps, int) or self.warmup_steps < 1:
            raise ValueError(f"fast.warmup_steps must be an int >= 1, got {self.warmup_steps!r}")
        if self.eval_batch_size is not None and (not isinstance(self.eval_batch_size, int) or self.eval_batch_size < 1):
            raise ValueError(f"fast.eval_batch_size must be an int >= 1 or null, got {self.eval_batch_size!r}")
        clip = self.gradient_clip_val
        if clip is not None and (isinstance(clip, bool) or not isinstance(clip, (int, float)) or clip < 0):
            raise ValueError(f"fast.gradient_clip_val must be a number >= 0 or null, got {clip!r}")

    @classmethod
    def from_config(cls, node) -> FastOptions | None:
        """The options of a config's ``fast`` node (None stays None); unknown keys are one ValueError."""
        if node is None:
            return None
        if isinstance(node, FastOptions):
            return node
        node = dict(node)
        unknown = sorted(set(node) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"fast: unknown key(s) {unknown}; expected some of {sorted(cls.__dataclass_fields__)}")
        return cls(**node)


def with_fused(factory, params: list[torch.Tensor]):
    """``factory(params)`` with ``fused=True`` where its optimizer takes it and runs fused on the parameters'
    device and dtype (torch's Adam/AdamW/SGD/Adagrad...), else ``factory(params)`` as is."""
    try:
        return factory(params, fused=True)
    except (TypeError, RuntimeError, ValueError) as err:  # no such argument, or not on this device / dtype
        log.info("fast path: the optimizer runs unfused (%s)", str(err).splitlines()[0][:120])
        return factory(params)


class _Graph:
    """One captured step for one batch shape: its static input tensors, the graph, the loss it outputs, the
    (parameter, gradient buffer) pairs its backward writes, and the body it captured (what a replay computes; the
    tests replay it eagerly on a CPU to check the bookkeeping)."""

    def __init__(self, graph: torch.cuda.CUDAGraph, inputs: dict[str, torch.Tensor], loss: torch.Tensor,
                 grads: list[tuple[torch.Tensor, torch.Tensor]], body=None):
        self.graph, self.inputs, self.loss, self.grads, self.body = graph, inputs, loss, grads, body

    def replay(self, batch: dict) -> torch.Tensor:
        for key, static in self.inputs.items():
            static.copy_(batch[key], non_blocking=True)
        self.graph.replay()
        return self.loss


def shape_key(batch: dict) -> tuple:
    return tuple((k, tuple(v.shape), v.dtype) for k, v in sorted(batch.items()) if torch.is_tensor(v))


class FastStep:
    """One training step of ``task`` (a ``TaskModule`` in manual optimization) on the fast path."""

    def __init__(self, task, options: FastOptions):
        self.task, self.options = task, options
        self.graphs: dict[tuple, _Graph] = {}
        self.pool = None
        self.eager_steps = 0
        self.replays = 0
        self.fallback: str | None = None
        self._compiled = None  # torch.compile of the loss (fast.compile), built at the first step
        self._compile_failed = False
        self._eager_next = False
        self._sum: torch.Tensor | None = None
        self._count: torch.Tensor | None = None
        # (parameter, gradient buffer) pairs, set at the first capture: a graph writes these buffers whatever
        # ``p.grad`` says, so every step puts them back where something (Lightning's zero_grad before each
        # validation) set ``p.grad`` to None; else the optimizer would skip every parameter from then on
        self._fixed: list[tuple[torch.Tensor, torch.Tensor]] | None = None

    # -- what the record says ------------------------------------------------------------------------------
    def summary(self) -> dict:
        return {**asdict(self.options), "graphs_captured": len(self.graphs), "graph_replays": self.replays,
                "eager_steps": self.eager_steps, "fallback": self.fallback}

    def request_eager(self) -> None:
        """The next step runs its real forward (hooks fire), not a replay."""
        self._eager_next = True

    # -- the step ------------------------------------------------------------------------------------------
    def step(self, batch: dict) -> None:
        task = self.task
        task.optimizers().step(closure=lambda: self._forward_backward(batch))
        task.step_schedulers("step")
        step = task.trainer.global_step
        if step % self.options.log_every == 0 or step >= task.trainer.max_steps > 0:
            self.log_loss()

    def log_loss(self) -> None:
        """The mean training loss since the last log (one host synchronisation), as ``train/loss``."""
        if self._count is None:
            return
        count = float(self._count)
        if count > 0:
            mean = float(self._sum) / count
            if not math.isfinite(mean):  # diverged since the last log (checked every log_every steps)
                self.task.diverge(self.task.trainer.global_step)
                return
            self.task.log("train/loss", mean, on_step=True, on_epoch=False, prog_bar=True, batch_size=1)
        self._sum.zero_()
        self._count.zero_()

    def _params(self) -> list[torch.nn.Parameter]:
        return [p for p in self.task.parameters() if p.requires_grad]

    def _compiled_loss(self):
        """The compiled loss (``fast.compile``), or None: compile off, or compiling it failed once."""
        if self.options.compile is None or self._compile_failed:
            return None
        if self._compiled is None:
            self._compiled = torch.compile(self.task.train_loss, mode=self.options.compile, dynamic=False)
        return self._compiled

    def _fall_back(self, what: str, err: Exception) -> None:
        """Say (a warning, and ``fallback`` in the record) that ``what`` failed and steps go on eagerly."""
        message = f"{what} failed, eager instead: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
        self.fallback = message if self.fallback is None else f"{self.fallback}; {message}"
        warnings.warn(f"fast path: {message}", stacklevel=3)

    def _accumulate(self, loss: torch.Tensor, weight) -> None:
        if self._sum is None:
            self._sum = torch.zeros((), dtype=torch.float64, device=loss.device)
            self._count = torch.zeros((), dtype=torch.float64, device=loss.device)
        if torch.is_tensor(weight):
            weight = weight.to(torch.float64)
        else:  # a Python number: a kernel argument (a host-to-device copy would break a capture)
            weight = float(weight)
        self._sum.add_(loss.detach().to(torch.float64) * weight)
        self._count.add_(weight)

    def _clip_grads(self) -> None:
        if self.options.gradient_clip_val:
            torch.nn.utils.clip_grad_norm_(self._params(), self.options.gradient_clip_val, foreach=True)

    def _attach_grads(self) -> None:
        """Every parameter's ``grad`` is its fixed buffer again (after a ``zero_grad(set_to_none=True)``)."""
        for p, buf in self._fixed:
            if p.grad is not buf:
                p.grad = buf

    def _zero_grads(self) -> None:
        if self._fixed is not None:  # graphs hold these buffers: zero them in place, never replace them
            torch._foreach_zero_([buf for _, buf in self._fixed])
        else:
            for p in self._params():
                p.grad = None

    def _run(self, batch: dict) -> torch.Tensor:
        """Zero the gradients, forward, backward, clip, sum the loss: the body a graph captures."""
        self._zero_grads()
        compiled = self._compiled_loss()
        try:
            loss, weight = (compiled or self.task.train_loss)(batch)
        except Exception as err:
            if compiled is None:  # the task's own loss failed: a real error
                raise
            self._compile_failed = True  # a loss torch.compile cannot compile: eager from now on
            self._fall_back("torch.compile", err)
            loss, weight = self.task.train_loss(batch)
        loss.backward()
        self._clip_grads()
        self._accumulate(loss, weight)
        return loss.detach()

    def _forward_backward(self, batch: dict) -> torch.Tensor:
        eager = self._eager_next or not self.options.cuda_graph or not _on_cuda(batch)
        self._eager_next = False
        if self._fixed is not None:
            self._attach_grads()
        if not eager:
            key = shape_key(batch)
            graph = self.graphs.get(key)
            if graph is None and self.eager_steps >= self.options.warmup_steps and len(self.graphs) < self.options.max_graphs:
                graph = self._capture(batch, key)
            if graph is not None:
                self.replays += 1
                return graph.replay(batch)
            if self.eager_steps < self.options.warmup_steps:  # warm-up: real steps, on a side stream
                return self._warmup(batch)
        self.eager_steps += 1
        return self._run(batch)

    def _warmup(self, batch: dict) -> torch.Tensor:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            loss = self._run(batch)
        torch.cuda.current_stream().wait_stream(side)
        self.eager_steps += 1
        return loss

    def _capture(self, batch: dict, key: tuple) -> _Graph | None:
        """Capture :meth:`_run` for ``batch``'s shape (None, and eager from then on, if capture fails)."""
        if self._fixed is None:
            self._fixed = [(p, p.grad) for p in self._params() if p.grad is not None]
        inputs = {k: v.detach().clone() for k, v in batch.items() if torch.is_tensor(v)}
        static_batch = {**batch, **inputs}
        graph = torch.cuda.CUDAGraph()
        try:
            torch.cuda.synchronize()
            with torch.cuda.graph(graph, pool=self.pool):
                loss = self._run(static_batch)
        except Exception as err:  # noqa: BLE001 - anything capture refuses: keep training, eagerly
            self._fall_back("CUDA graph capture", err)
            self.options = FastOptions(**{**asdict(self.options), "cuda_graph": False})
            return None
        self.pool = graph.pool()
        self.graphs[key] = _Graph(graph, inputs, loss, self._fixed, body=lambda: self._run(static_batch))
        log.info("fast path: captured a CUDA graph for batches of shape %s", [(k, s) for k, s, _ in key])
        return self.graphs[key]


def _on_cuda(batch: dict) -> bool:
    return any(torch.is_tensor(v) and v.is_cuda for v in batch.values())
