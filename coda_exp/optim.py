"""Tensor2Tensor's learning-rate schedules and label-smoothed loss, for the Transformer tasks (CoDA Tables 4-7).

T2T composes its schedule from factors (``learning_rate_schedule``), s = the training step:
``constant`` = learning_rate_constant, ``linear_warmup`` = min(1, s / warmup), ``rsqrt_decay`` =
rsqrt(max(s, warmup)), ``rsqrt_hidden_size`` = hidden_size ** -0.5.

- ``transformer_tiny`` / ``transformer_base`` use ``constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size`` with
  constant 2.0 and warmup 8000: that is Vaswani et al.'s "noam" schedule, ``noam_lambda`` here.
- ``transformer_base_single_gpu`` uses ``constant*linear_warmup*rsqrt_decay`` with constant 0.1 and warmup 16000:
  lr = 0.1 * min(1, s/16000) * rsqrt(max(s, 16000)). ``linear_warmup_rsqrt_decay_lambda`` writes the same curve
  with its peak: lr = peak_lr * min(1, s/w) * sqrt(w / max(s, w)), peak_lr = 0.1 / sqrt(16000) = 7.9057e-4.

Here s = step + 1 (``step`` = optimizer steps taken, 0 for the first update), so the first update has a
non-zero rate. The schedulers are ``LambdaLR`` whose lambda IS the learning rate: the optimizer's lr must be 1.0.
"""

from __future__ import annotations

import functools
import logging
import math

import torch
from torch.optim.lr_scheduler import LambdaLR

from coda_exp.errors import UserError

log = logging.getLogger(__name__)


def schedule_node(cfg):
    """``cfg.scheduler`` when it names a schedule (its ``_target_``), else None. A node without one holds changes to a
    preset's schedule that no preset brought (``preset=none`` with a scale's shorter warm-up, ``scale=fixture``'s
    ``scheduler.warmup_steps: 10``): it was a config node that could not be called once the data had loaded. Said in
    a warning; the learning rate stays the optimizer's."""
    node = cfg.get("scheduler")
    if not node:
        return None
    if "_target_" in node:
        return node
    keys = ", ".join(f"scheduler.{k}" for k in node)
    log.warning("no learning-rate schedule is chosen (scheduler has no _target_: preset=none, or a preset without "
                "one), so nothing reads %s; the learning rate stays optimizer.lr = %s", keys, cfg.optimizer.get("lr"))
    return None


def noam_lambda(step: int, d_model: int, warmup: int, factor: float = 2.0) -> float:
    """factor * min(1, s / warmup) * rsqrt(max(s, warmup)) * rsqrt(d_model), s = step + 1.

    Equal to Vaswani et al. (2017) eq. 3, factor * d^-0.5 * min(s^-0.5, s * warmup^-1.5).
    """
    s = step + 1
    return factor * min(1.0, s / warmup) / math.sqrt(max(s, warmup)) / math.sqrt(d_model)


def linear_warmup_rsqrt_decay_lambda(step: int, warmup: int, peak_lr: float) -> float:
    """peak_lr * min(1, s / warmup) * sqrt(warmup / max(s, warmup)), s = step + 1: linear rise to peak_lr at
    s = warmup, then decay as 1 / sqrt(s). T2T's ``constant*linear_warmup*rsqrt_decay`` with
    constant = peak_lr * sqrt(warmup)."""
    s = step + 1
    return peak_lr * min(1.0, s / warmup) * math.sqrt(warmup / max(s, warmup))


class ScheduleError(UserError, ValueError):
    """A learning-rate schedule the optimizer's settings cannot take (``config_checks`` says so before the data
    loads; this is the schedule's own check, for a caller that builds it directly)."""


def _check_unit_lr(optimizer: torch.optim.Optimizer, name: str) -> None:
    lrs = [group["lr"] for group in optimizer.param_groups]
    if any(lr != 1.0 for lr in lrs):
        raise ScheduleError(f"{name}: the schedule gives the learning rate itself, so the optimizer's lr must be 1.0 "
                         f"(got {lrs}); set optimizer.lr=1.0")


def noam_schedule(optimizer: torch.optim.Optimizer, d_model: int, warmup_steps: int = 8000,
                  factor: float = 2.0) -> LambdaLR:
    """LambdaLR with lr = ``noam_lambda`` (T2T transformer_tiny/base); step it every optimizer step."""
    _check_unit_lr(optimizer, "noam_schedule")
    return LambdaLR(optimizer, functools.partial(noam_lambda, d_model=d_model, warmup=warmup_steps, factor=factor))


def linear_warmup_rsqrt_decay(optimizer: torch.optim.Optimizer, warmup_steps: int = 16000,
                              peak_lr: float = 0.1 / math.sqrt(16000)) -> LambdaLR:
    """LambdaLR with lr = ``linear_warmup_rsqrt_decay_lambda`` (T2T transformer_base_single_gpu by default)."""
    _check_unit_lr(optimizer, "linear_warmup_rsqrt_decay")
    return LambdaLR(optimizer, functools.partial(linear_warmup_rsqrt_decay_lambda, warmup=warmup_steps,
                                                 peak_lr=peak_lr))


def label_smoothed_nll(logits: torch.Tensor, target: torch.Tensor, pad_id: int | None = None,
                       epsilon: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """T2T's label-smoothed cross-entropy: (loss, nll), both means over the non-pad targets
    (:func:`label_smoothed_token_nll`'s sums over its count)."""
    loss, nll, real = label_smoothed_token_nll(logits, target, pad_id, epsilon)
    count = real.sum().clamp(min=1).to(loss.dtype)
    return loss.sum() / count, nll.sum() / count


def label_smoothed_token_nll(logits: torch.Tensor, target: torch.Tensor, pad_id: int | None = None,
                             epsilon: float = 0.1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """T2T's label-smoothed cross-entropy per target: (loss, nll, real), each of ``target``'s shape, loss and nll 0
    where ``real`` (the targets not equal to ``pad_id``) is False.

    logits (..., V), target (...). The smoothed target puts 1 - epsilon on the gold token and epsilon / (V - 1) on
    every other token (T2T ``smoothing_cross_entropy``); ``loss`` is the cross-entropy to it minus its entropy
    (T2T subtracts this normalising constant), i.e. KL(smoothed || model) >= 0, equal to ``nll`` when
    epsilon = 0. ``nll`` = -log p(gold), for perplexity.
    """
    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"epsilon must be in [0, 1), got {epsilon!r}")
    vocab = logits.shape[-1]
    logp = torch.log_softmax(logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits, -1)
    real = torch.ones_like(target, dtype=torch.bool) if pad_id is None else target != pad_id  # (...)
    nll = -logp.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (...)
    if epsilon > 0:
        if vocab < 2:
            raise ValueError("label smoothing needs a vocabulary of at least 2 tokens")
        confidence, low = 1.0 - epsilon, epsilon / (vocab - 1)
        others = -logp.sum(-1) - nll  # (...) sum of -log p over the non-gold tokens
        entropy = -(confidence * math.log(confidence) + epsilon * math.log(low))  # of the smoothed target
        loss = confidence * nll + low * others - entropy
    else:
        loss = nll
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    return torch.where(real, loss, zero), torch.where(real, nll, zero), real


def warmup_cosine_lambda(step: int, warmup: int, total: int, peak_lr: float, final_fraction: float = 0.0,
                         hold: int = 0) -> float:
    """peak_lr * min(1, s / warmup) for s <= warmup, held at peak_lr for ``hold`` more steps, then a half cosine from
    peak_lr down to final_fraction * peak_lr at s = total (held there after), s = step + 1: the short-budget schedule
    of the MLU CPU scale (``configs/task_scale/mlu_cpu.yaml``). hold > 0 is a warm-up/stable/decay schedule whose
    decay is the cosine over the last total - warmup - hold steps."""
    s = step + 1
    if s <= warmup:
        return peak_lr * s / warmup
    progress = min(1.0, max(0, s - warmup - hold) / max(1, total - warmup - hold))
    return peak_lr * (final_fraction + (1.0 - final_fraction) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def warmup_cosine(optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int, peak_lr: float,
                  final_fraction: float = 0.0, hold_steps: int = 0) -> LambdaLR:
    """LambdaLR with lr = ``warmup_cosine_lambda``; total_steps is usually ``task.max_steps``."""
    _check_unit_lr(optimizer, "warmup_cosine")
    if not (all(isinstance(n, int) for n in (warmup_steps, total_steps, hold_steps))
            and 0 < warmup_steps and 0 <= hold_steps and warmup_steps + hold_steps <= total_steps):
        raise ValueError(f"warmup_cosine: need integers 0 < warmup_steps, 0 <= hold_steps, warmup_steps + hold_steps "
                         f"<= total_steps, got warmup_steps={warmup_steps!r}, hold_steps={hold_steps!r}, "
                         f"total_steps={total_steps!r}")
    if not (peak_lr > 0 and 0.0 <= final_fraction <= 1.0):
        raise ValueError(f"warmup_cosine: need peak_lr > 0 and 0 <= final_fraction <= 1, got {peak_lr!r}, "
                         f"{final_fraction!r}")
    return LambdaLR(optimizer, functools.partial(warmup_cosine_lambda, warmup=warmup_steps, total=total_steps,
                                                 peak_lr=peak_lr, final_fraction=final_fraction, hold=hold_steps))
