"""trainer.precision settings a run or an evaluation cannot honour, each as one message: float16 mixed precision
without a GPU (Lightning would run bf16-mixed while the record said float16), and float16 weights with an optimizer
whose ``eps`` float16 cannot hold. Used by ``run_checks.check_trainer`` (training) and ``trained.prepare`` (eval)."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig

from coda_exp.fingerprint import PRECISION_ALIASES

#: what Lightning runs with a GradScaler: 16-mixed and its old names (fingerprint.PRECISION_ALIASES: "16")
FP16_MIXED = ("16-mixed", *(alias for alias, name in PRECISION_ALIASES.items() if name == "16-mixed"))


def float16_weights_problem(optimizer: DictConfig | None) -> str | None:
    """Why ``trainer.precision=16-true`` cannot train with ``optimizer``: its ``eps`` (given, else the class's
    default: Adam's 1e-8) is 0 in float16, where the weights and the optimizer's state then are, so a weight whose
    gradient is 0 is updated by 0 / 0 and training diverges at its first steps (the run ended "diverged", status 0)."""
    import inspect

    from hydra.utils import get_class

    if not optimizer or not optimizer.get("_target_"):
        return None
    eps = optimizer.get("eps")
    if eps is None:
        try:
            eps = inspect.signature(get_class(str(optimizer._target_))).parameters["eps"].default
        except (KeyError, ValueError, TypeError, ImportError, AttributeError):
            return None
    if not isinstance(eps, (int, float)) or torch.tensor(float(eps), dtype=torch.float16).item() != 0.0 or eps <= 0:
        return None
    name = str(optimizer._target_).rsplit(".", 1)[-1]
    return (f"trainer.precision=16-true: the weights and {name}'s state would be float16, where its eps={eps:g} is 0 "
            "(float16's smallest value is 6e-08): a weight whose gradient is 0 would be updated by 0/0 and the run "
            "diverge at its first steps; use trainer.precision=bf16-true or bf16-mixed (16-mixed on a GPU), or "
            "optimizer.eps=1e-4")


def no_gpu_for_float16(trainer: pl.Trainer, what: str) -> str:
    """Why float16 mixed precision cannot run: ``this machine has no CUDA GPU``, or ``this <what> is on the
    <accelerator>`` of ``trainer`` (``what``: run, evaluation)."""
    if not torch.cuda.is_available():
        return "this machine has no CUDA GPU"
    return f"this {what} is on the {trainer.accelerator.__class__.__name__.removesuffix('Accelerator')}"


def float16_without_gpu(requested: str, trainer: pl.Trainer, what: str) -> str:
    """The refusal of ``trainer.precision=<requested>`` (float16 mixed) where Lightning's ``trainer`` would run
    another precision (bf16-mixed, with a warning on stderr only) while the run's or evaluation's record would state
    float16: one wording for training (:func:`check_trainer`) and ``coda-exp eval`` (``trained.prepare``)."""
    runs_as = str(trainer.precision)
    return (f"trainer.precision={requested}: float16 mixed precision needs a GPU, and "
            f"{no_gpu_for_float16(trainer, what)} (Lightning would run {runs_as} instead, while the record would "
            f"say {requested}): use trainer.precision=32-true or {runs_as}"
            + (", or trainer=gpu" if torch.cuda.is_available() else ""))
