"""coda-exp eval stopped by a signal or missing a logger's package: one message and a status a script can act on
(130 or 143 with the command that runs it again, as training; 2 naming the extra), never a silent exit 0 or a
traceback, and no record of a partial evaluation."""

from __future__ import annotations

import os
import signal

import pytest
import pytorch_lightning as pl

from coda_exp import evaluate, extras
from coda_exp.errors import USER_ERROR_EXIT
from coda_exp.evaluate import eval_main
from tests.conftest import eval_paths

pytestmark = pytest.mark.usefixtures("one_thread")


class _Signal(pl.Callback):
    """Sends this process ``signum`` at the first batch end of ``stage`` (validation or test), as a user's Ctrl-C or a
    cluster's SIGTERM would arrive."""

    def __init__(self, signum: int, stage: str):
        self.signum, self.stage = signum, stage

    def _send(self) -> None:
        os.kill(os.getpid(), self.signum)

    def on_validation_batch_end(self, *args, **kwargs) -> None:
        if self.stage == "validation":
            self._send()

    def on_test_batch_end(self, *args, **kwargs) -> None:
        if self.stage == "test":
            self._send()

    def on_predict_batch_end(self, *args, **kwargs) -> None:
        if self.stage == "predict":
            self._send()


@pytest.fixture
def signalled(monkeypatch):
    """``signalled(signum, stage)``: the evaluation's trainer gets a :class:`_Signal` callback. SIGTERM starts at its
    default handler, as in a fresh ``coda-exp`` process (whatever an earlier test of this worker left)."""
    built = evaluate.trainer_for
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def arm(signum: int, stage: str) -> None:
        def trainer_for(*args, **kwargs):
            trainer = built(*args, **kwargs)
            trainer.callbacks.append(_Signal(signum, stage))
            return trainer

        monkeypatch.setattr(evaluate, "trainer_for", trainer_for)

    yield arm
    signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("signum,stage,status,name", [(signal.SIGTERM, "test", 143, "SIGTERM"),
                                                       (signal.SIGINT, "validation", 130, "Ctrl-C")])
def test_an_interrupted_evaluation_says_so_exits_with_the_signals_status_and_records_nothing(
        snli_model, tmp_path, signalled, caplog, signum, stage, status, name):
    """SIGTERM exited 0 in silence (Lightning's stop), Ctrl-C exited 1 in silence: a cluster job or a script took an
    evaluation that never ended for a result."""
    _, _, ckpt = snli_model
    signalled(signum, stage)
    args = [f"ckpt_path={ckpt}", *eval_paths(tmp_path)]
    assert eval_main(args) == status
    again = " ".join(["coda-exp", "eval", *args])
    assert (f"evaluation interrupted ({name}): nothing recorded (a partial evaluation is not a result); run it again "
            f"with: {again}") in caplog.text
    assert not list((tmp_path / "results").rglob("*.json"))
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # this process's own handler again


def test_an_interrupted_prediction_says_so_and_writes_nothing(snli_model, tmp_path, signalled, caplog):
    _, _, ckpt = snli_model
    inputs = tmp_path / "in.jsonl"
    inputs.write_text('{"text_a": "A man.", "text_b": "A person."}\n', encoding="utf-8")
    signalled(signal.SIGTERM, "predict")
    assert evaluate.predict_main([f"ckpt_path={ckpt}", f"input={inputs}"]) == 143
    assert "prediction interrupted (SIGTERM): no predictions written; run it again with: coda-exp predict" in caplog.text
    assert not (tmp_path / "in.predictions.jsonl").exists()


@pytest.mark.parametrize("logger,module", [("wandb", "wandb"), ("tensorboard", "tensorboard")])
def test_eval_without_a_loggers_package_names_the_extra_before_any_data_loads(snli_model, tmp_path, monkeypatch,
                                                                               capsys, logger, module):
    """It evaluated, then failed with Lightning's ModuleNotFoundError traceback (exit 1), as training does not."""
    _, _, ckpt = snli_model
    monkeypatch.setattr(extras, "installed", lambda name: name not in (module, "tensorboardX"))
    paths = [a for a in eval_paths(tmp_path) if not a.startswith("logger=")]
    assert eval_main([f"ckpt_path={ckpt}", *paths, f"logger={logger}"]) == USER_ERROR_EXIT
    err = capsys.readouterr().err
    assert err.startswith(f"error: logger={module} (") and f"pip install 'coda-exp[{module}]'" in err, err
    assert not (tmp_path / "outputs" / "evals").exists()  # refused before its folder, before any data
