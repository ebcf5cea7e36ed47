"""Helpers of the config tests: every run object a composed config describes, built without training."""

from __future__ import annotations

import pytest
import torch
from hydra.utils import instantiate

from coda_exp import pipeline


def build_run(cfg) -> dict:
    """What ``pipeline.run`` builds before fitting: data module (set up), network, task module with its optimizer
    and scheduler, trainer (on CPU), callbacks and loggers. A config whose model does not serve its task raises
    the pipeline's ValueError."""
    dm = instantiate(cfg.data)
    dm.setup("fit")
    net = pipeline.build_model(cfg, dm)
    module = pipeline.build_task(cfg, net, dm)
    optimizer = instantiate(cfg.optimizer)(net.parameters())
    scheduler = instantiate(cfg.scheduler)(optimizer) if cfg.get("scheduler") else None
    loggers = pipeline.build_loggers(cfg)
    callbacks = pipeline.build_callbacks(cfg, with_logger=bool(loggers))
    gpu = {"accelerator": "cpu", "devices": 1, "strategy": "auto", "precision": "32-true"}
    trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False,
                          **(gpu if cfg.trainer.accelerator != "cpu" else {}))
    assert sum(p.numel() for p in module.parameters()) > 0
    assert isinstance(optimizer, torch.optim.Optimizer)
    return {"data": dm, "model": net, "task": module, "optimizer": optimizer, "scheduler": scheduler,
            "trainer": trainer, "callbacks": callbacks, "loggers": loggers}


@pytest.fixture(scope="session")
def build():
    """``build(cfg)``: :func:`build_run`."""
    return build_run
