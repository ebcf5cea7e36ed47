"""A step budget that ends an epoch-validated run before its first validation is refused before training (it was
Lightning's early-stopping traceback once training ended: "conditioned on metric val/acc which is not available")."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from coda_exp.config_checks import ConfigError
from coda_exp.validation_checks import check_first_validation


def trainer(**settings):
    base = {"max_steps": 2, "check_val_every_n_epoch": 1, "val_check_interval": 1.0, "limit_train_batches": 1.0,
            "accumulate_grad_batches": 1, "world_size": 1}
    return SimpleNamespace(**{**base, **settings})


class Data:
    def __init__(self, batches):
        self.batches = batches

    def train_dataloader(self):
        if self.batches is None:
            return iter(())  # an endless stream has no len()
        return [0] * self.batches


def test_a_budget_that_ends_before_the_first_validation_is_refused():
    with pytest.raises(ConfigError, match=r"trainer.max_steps = 2 ends the run before its first validation, after "
                                          r"batch 5 .*give at least trainer.max_steps=5"):
        check_first_validation(trainer(), Data(5))
    with pytest.raises(ConfigError, match="after batch 10 .*trainer.max_steps=5"):  # 2 batches a step, 2nd epoch
        check_first_validation(trainer(max_steps=4, check_val_every_n_epoch=2, accumulate_grad_batches=2), Data(5))
    check_first_validation(trainer(max_steps=5), Data(5))  # validates at its last step
    check_first_validation(trainer(max_steps=2, val_check_interval=0.25), Data(8))  # validates after batch 2
    check_first_validation(trainer(max_steps=-1), Data(5))  # epochs are the budget
    check_first_validation(trainer(check_val_every_n_epoch=None, val_check_interval=250), Data(5))  # by batches
    check_first_validation(trainer(), Data(None))  # a stream
    check_first_validation(trainer(world_size=2), Data(5))  # a rank's share: Lightning's rules


@pytest.mark.parametrize("overrides,said", [
    (["trainer.max_epochs=2", "task.epochs=5"], ("trainer.max_epochs=2 is the budget this run trains to, not "
                                                "task.epochs=5")),
    (["task.epochs=5"], None),  # the trainer follows the task
    (["trainer.max_epochs=8"], None),  # the fixture's own 8 epochs: no contradiction
    (["trainer.max_epochs=2", "task.epochs=5", "debug=limit"], None),  # debug sets the Trainer's budget on purpose
])
def test_a_trainer_budget_beside_another_task_budget_is_a_warning(make_cfg, overrides, said):
    """trainer.max_epochs=2 task.epochs=5 trained 2 epochs without a word about task.epochs."""
    from coda_exp.validation_checks import warn_budget_overrides

    data = SimpleNamespace(said=[])
    data.warn = data.said.append
    warn_budget_overrides(make_cfg("task=snli", "scale=fixture", *overrides), data)
    assert data.said == [] if said is None else len(data.said) == 1 and said in data.said[0]
