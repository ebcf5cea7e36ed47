"""Callbacks the fault tests add to a run (``+callbacks.kill._target_=tests.e2e.kill_hook.KillAfterEpoch``): the
process SIGKILLs itself or sends itself a signal at a chosen point."""

import os
import signal

import pytorch_lightning as pl


class KillAfterEpoch(pl.Callback):
    def __init__(self, epoch: int):
        self.epoch = int(epoch)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # after the epoch's validation, before its checkpoints: with a validation at each epoch's end Lightning's
        # ModelCheckpoints save in this hook, run after every other callback's, so last.ckpt is the epoch before's
        if trainer.current_epoch == self.epoch:
            os.kill(os.getpid(), signal.SIGKILL)


class KillAtStep(pl.Callback):
    """SIGKILL before the training batch after optimizer step ``step`` (its validation and checkpoints are written)."""

    def __init__(self, step: int):
        self.step = int(step)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch, batch_idx: int) -> None:
        if trainer.global_step >= self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class KillAtTestStart(pl.Callback):
    """SIGKILL as the test starts (training has ended, an early stop included; its checkpoints are written), once:
    where ``marker`` exists nothing happens, so the resumed run can keep the same config (``resume=auto``)."""

    def __init__(self, marker: str):
        self.marker = marker

    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)


class Boom(pl.Callback):
    """A crash (not a user's mistake) at the start of training."""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        raise RuntimeError("boom: a bug, not a bad input")


class SignalAtStep(pl.Callback):
    """Send this process signal ``signum`` at the end of optimizer step ``step``, as a Ctrl-C (2) or a cluster's
    SIGTERM (15) would arrive during training."""

    def __init__(self, step: int, signum: int):
        self.step, self.signum = int(step), int(signum)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        if trainer.global_step == self.step:
            signal.raise_signal(self.signum)


class SignalAtSteps(pl.Callback):
    """:class:`SignalAtStep` at each of ``steps``: one config for a run stopped, resumed and stopped again (the
    resumed run's config must be the stopped one's)."""

    def __init__(self, steps, signum: int):
        self.steps, self.signum = {int(s) for s in steps}, int(signum)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        if trainer.global_step in self.steps:
            signal.raise_signal(self.signum)


class SigtermInValidation(pl.Callback):
    """A SIGTERM to this process as the validation after optimizer step ``step`` starts."""

    def __init__(self, step: int):
        self.step = int(step)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn == "fit" and trainer.global_step == self.step:
            signal.raise_signal(signal.SIGTERM)


class SigtermInTest(pl.Callback):
    """A SIGTERM to this process as the test's first batch ends (every DDP rank sends its own, as a cluster would)."""

    def on_test_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch, batch_idx: int,
                          dataloader_idx: int = 0) -> None:
        if batch_idx == 0:
            signal.raise_signal(signal.SIGTERM)


class CtrlCInSanityCheck(pl.Callback):
    """A KeyboardInterrupt as the sanity check starts, before GracefulStop is installed: Lightning's own handling."""

    def on_sanity_check_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        raise KeyboardInterrupt


class SignalAfterBatches(pl.Callback):
    """Send this process signal ``signum`` at the end of its ``batches``-th training batch (under gradient
    accumulation, a batch that may make no optimizer step)."""

    def __init__(self, batches: int, signum: int):
        self.batches, self.signum, self.seen = int(batches), int(signum), 0

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        self.seen += 1
        if self.seen == self.batches:
            signal.raise_signal(self.signum)


class SigtermBetweenSteps(pl.Callback):
    """A SIGTERM to this process after optimizer step ``step``'s batch-end hooks, as the step's learning-rate
    schedulers update (before Lightning's own check of the signal at the step's end)."""

    def __init__(self, step: int):
        self.step = int(step)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        if trainer.global_step != self.step:
            return
        loop = trainer.fit_loop.epoch_loop
        update = loop.update_lr_schedulers

        def update_then_signal(*args, **kwargs):
            del loop.update_lr_schedulers  # once: the class's method again
            signal.raise_signal(signal.SIGTERM)
            return update(*args, **kwargs)

        loop.update_lr_schedulers = update_then_signal


class HoldForSweepSignal(pl.Callback):
    """The choreography of a two-job sweep that a signal stops (``tests/e2e/test_joblib_stop.py``): job ``n`` of the
    sweep holds where ``roles[n]`` says until the signal reaches it, after touching ``<folder>/ready-<n>``, so the
    test signals when every job is where it should be.

    - ``setup``: as the training is set up (before any step: Ctrl-C there is a stop outside a training step);
    - ``validation``: as the second epoch's validation starts (SIGTERM there: Lightning's stop, at once, naming the
      first one's ``last.ckpt``);
    - ``step``: in the training step after step 1 (its batch loaded, before the step is made), and, once signalled,
      until every other job with a role has written its outcome (``<sweep dir>/.jobs/<num>.json``: it has stopped
      and exits) and ``linger`` seconds more: a step still going when the other jobs have ended theirs;
    - ``none``: nothing (a job after them, which the sweep's stop keeps from starting)."""

    def __init__(self, roles, folder: str, linger: float = 5.0):
        self.roles, self.folder, self.linger = list(roles), folder, float(linger)
        self.num = self.sweep_dir = None
        self.held = False

    def _role(self) -> str:
        from hydra.core.hydra_config import HydraConfig

        hydra = HydraConfig.get()
        self.num, self.sweep_dir = int(hydra.job.num), hydra.sweep.dir
        return self.roles[self.num]

    def _signalled(self, trainer: pl.Trainer) -> bool:
        stop = next((c for c in trainer.callbacks if type(c).__name__ == "GracefulStop"), None)
        return bool(trainer.received_sigterm or getattr(stop, "requested", None) or getattr(stop, "after_checkpoint",
                                                                                               None))

    def _hold(self, trainer: pl.Trainer, others: bool = False) -> None:
        import time

        self.held = True
        with open(os.path.join(self.folder, f"ready-{self.num}"), "w") as ready:
            ready.write(str(os.getpid()))  # the worker's process, for a signal to it alone
        deadline = time.time() + 120
        while not self._signalled(trainer) and time.time() < deadline:
            time.sleep(0.05)  # a Ctrl-C before the training's own handler: KeyboardInterrupt here
        if others:
            jobs = [os.path.join(self.sweep_dir, ".jobs", f"{n}.json") for n, role in enumerate(self.roles)
                    if n != self.num and role != "none"]
            while not all(os.path.exists(j) for j in jobs) and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(self.linger)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit" and self._role() == "setup":
            self._hold(trainer)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn == "fit" and not trainer.sanity_checking and trainer.current_epoch >= 1 and \
                self._role() == "validation" and not self.held:  # a validation after the first one: last.ckpt
            self._hold(trainer)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch, batch_idx: int) -> None:
        if trainer.global_step >= 1 and self._role() == "step" and not self.held:
            self._hold(trainer, others=True)
