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


class RandomState(pl.Callback):
    """Saves the global random states (Python, NumPy, torch CPU and CUDA) in every checkpoint and restores them when
    training resumes, so that dropout after a resume draws what the uninterrupted run drew (Lightning restores the
    weights, optimiser and loops, not the generators; ``seed_everything`` would restart them from the seed)."""

    def __init__(self) -> None:
        self._restored: dict | None = None

    def state_dict(self) -> dict:
        import random

        import numpy as np
        import torch

        kind, keys, pos, has_gauss, gauss = np.random.get_state()  # plain values: checkpoints load weights_only
        numpy_state = [kind, keys.tolist(), int(pos), int(has_gauss), float(gauss)]
        state = {"python": random.getstate(), "numpy": numpy_state, "torch": torch.get_rng_state()}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        self._restored = dict(state_dict)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Applied here, the last point before the first resumed step (after the sanity check and data setup)."""
        import random

        import numpy as np
        import torch

        state, self._restored = self._restored, None
        if not state:
            return
        random.setstate(state["python"])
        kind, keys, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
        torch.set_rng_state(state["torch"])
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])


class ValidationHistory(pl.Callback):
    """The monitored metric after every validation of the fit (not the sanity check), in order: the run record's
    ``val_curve``. Kept in checkpoints, so a resumed run reports the whole curve."""

    def __init__(self, monitor: str) -> None:
        self.monitor = monitor
        self.values: list[float] = []

    @property
    def state_key(self) -> str:
        return self._generate_state_key(monitor=self.monitor)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        value = trainer.callback_metrics.get(self.monitor)
        if trainer.sanity_checking or value is None or trainer.state.fn != "fit":
            return
        self.values.append(float(value))

    def state_dict(self) -> dict:
        return {"values": list(self.values)}

    def load_state_dict(self, state_dict: dict) -> None:
        self.values = [float(v) for v in state_dict.get("values", [])]
