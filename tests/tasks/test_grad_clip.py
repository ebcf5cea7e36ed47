"""``task.gradient_clip_val`` really clips: one SGD step on a huge gradient moves the parameters by at most lr x the
norm (it reaches the trainer, which clips the global L2 norm)."""

from __future__ import annotations

import functools

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from coda_exp.tasks import PairClassificationTask


class Scaled(torch.nn.Module):
    """Logits = 1e4 * (a linear map of a constant feature): gradients in the thousands."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, a_ids, a_mask, b_ids, b_mask):
        return 1e4 * self.linear(torch.ones(a_ids.shape[0], 4))


def batches():
    row = {"a_ids": torch.ones(2, 3, dtype=torch.long), "a_mask": torch.ones(2, 3, dtype=torch.bool),
           "b_ids": torch.ones(2, 3, dtype=torch.long), "b_mask": torch.ones(2, 3, dtype=torch.bool),
           "label": torch.tensor([0, 2]), "index": torch.tensor([0, 1])}
    return DataLoader([row], batch_size=None)


def step_size(gradient_clip_val) -> float:
    torch.manual_seed(0)
    task = PairClassificationTask(Scaled(), functools.partial(torch.optim.SGD, lr=1.0), num_classes=3)
    before = torch.cat([p.detach().clone().flatten() for p in task.parameters()])
    trainer = pl.Trainer(max_steps=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, gradient_clip_val=gradient_clip_val)
    trainer.fit(task, train_dataloaders=batches())
    after = torch.cat([p.detach().flatten() for p in task.parameters()])
    return float((after - before).norm())


def test_gradient_clip_val_bounds_the_step():
    assert step_size(None) > 100  # unclipped: the huge gradient moves the weights far
    assert step_size(0.5) == pytest.approx(0.5, rel=1e-4)  # clipped to norm 0.5, lr 1: a step of 0.5


@pytest.mark.parametrize("trainer", ["cpu", "gpu", "ddp"])
def test_task_gradient_clip_val_reaches_every_trainer(make_cfg, trainer):
    assert make_cfg("task=snli", f"trainer={trainer}").trainer.gradient_clip_val is None
    assert make_cfg("task=snli", f"trainer={trainer}", "+task.gradient_clip_val=0.5").trainer.gradient_clip_val == 0.5
