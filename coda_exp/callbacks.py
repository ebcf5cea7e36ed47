"""Lightning callbacks the configs use (``configs/callbacks/default.yaml``)."""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl


class LastCheckpoint(pl.callbacks.ModelCheckpoint):
    """``<dirpath>/last.ckpt``, rewritten at every checkpointing point (each validation, or each epoch end): where a
    killed run resumes (``ckpt_path=.../last.ckpt``).

    ModelCheckpoint's own ``save_last`` is not enough: pytorch-lightning 2.6 writes ``last.ckpt`` only at steps
    where a top-k (best) checkpoint is also saved, so after the monitored metric stops improving ``last.ckpt``
    stays at the best step and a resumed run would repeat the epochs since.
    """

    def __init__(self, dirpath: str | Path, filename: str = "last"):
        super().__init__(dirpath=dirpath, filename=filename, monitor=None, save_top_k=1, save_last=False,
                         enable_version_counter=False, auto_insert_metric_name=False)


class EarlyStopping(pl.callbacks.EarlyStopping):
    """EarlyStopping whose ``patience`` is the configured one even after resuming from a checkpoint (Lightning
    restores the patience saved in the checkpoint, so ``task.epochs`` raised on resume would still stop at the old
    budget). The wait count and best score are restored as usual."""

    def load_state_dict(self, state_dict: dict) -> None:
        patience = self.patience
        super().load_state_dict(state_dict)
        self.patience = patience
