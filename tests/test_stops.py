"""coda_exp.stops: Ctrl-C and SIGTERM during training (the stop at a step's end, the ranks' vote under DDP, SIGTERM's
handler without a collective). Whole runs stopped and resumed: tests/e2e/test_resume.py, tests/e2e/test_fast_path.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch


def test_ddp_sigterm_sets_lightnings_flag_forwards_once_and_makes_no_collective(monkeypatch):
    """Under DDP DistributedSigterm replaces Lightning's SIGTERM notifier, which broadcasts inside the signal
    handler: a rank signalled twice (by the cluster and by rank 0's forwarding) made one collective more than rank 0
    and the run hung (a real two-process run: tests/e2e/test_resume.py, -m slow). Ours sets the flag, forwards once,
    calls the other handlers Lightning composed, and takes over again in the test, where Lightning registers anew."""
    import signal

    import torch.distributed as dist
    from pytorch_lightning.trainer.connectors.signal_connector import _HandlersCompose, _SignalConnector

    from coda_exp.stops import DistributedSigterm

    kills, others = [], []
    trainer = SimpleNamespace(world_size=2, strategy=SimpleNamespace(launcher=SimpleNamespace(kill=kills.append),
                                                                     root_device=torch.device("cpu")))
    connector = _SignalConnector(trainer)
    trainer._signal_connector = connector
    monkeypatch.setattr(dist, "is_initialized", lambda: True)  # a process group, as under DDP
    monkeypatch.setattr(dist, "broadcast", lambda *a, **k: pytest.fail("a collective in the signal handler"))
    before = signal.getsignal(signal.SIGTERM)
    try:
        sigterm = DistributedSigterm()
        for stage in ("on_train_start", "on_test_start"):  # each registers Lightning's handler first
            connector.received_sigterm, kills[:], others[:] = False, [], []
            signal.signal(signal.SIGTERM, _HandlersCompose([connector._sigterm_notifier_fn,
                                                            lambda signum, frame: others.append(signum)]))
            getattr(sigterm, stage)(trainer, None)
            sigterm.received = False
            signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGTERM)  # the forwarded copy
            assert sigterm.received and kills == [signal.SIGTERM] and others == [signal.SIGTERM] * 2
            assert not connector.received_sigterm  # noted only: no rank stops alone
            sigterm.on_train_batch_end(trainer, None, None, None, 0)  # just before GracefulStop's vote
            assert connector.received_sigterm
        one = SimpleNamespace(world_size=1)  # one process: Lightning's handler stays
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        DistributedSigterm().on_train_start(one, None)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.parametrize("mine,others,expected", [(None, 15, "SIGTERM"), ("SIGINT", 15, "SIGTERM"),
                                                  ("SIGINT", 2, "SIGINT"), (None, 0, None)])
def test_the_ranks_vote_stops_every_rank_with_the_signal_one_of_them_got(tmp_path, mine, others, expected):
    """Under DDP a rank that got no signal stops too, and reports the signal another rank got (its exit status
    130 or 143, not 1); SIGTERM where ranks got both."""
    from coda_exp.stops import GracefulStop, RunInterrupted

    saved = []
    strategy = SimpleNamespace(reduce=lambda t, reduce_op: torch.maximum(t, torch.tensor(others)))
    trainer = SimpleNamespace(world_size=2, strategy=strategy, received_sigterm=False, callbacks=[],
                              default_root_dir=str(tmp_path), global_step=7, save_checkpoint=saved.append)
    stop = GracefulStop()
    stop.requested = mine
    if expected is None:
        stop.on_train_batch_end(trainer, SimpleNamespace(device=torch.device("cpu")), None, None, 0)
        assert not saved
        return
    with pytest.raises(RunInterrupted) as err:
        stop.on_train_batch_end(trainer, SimpleNamespace(device=torch.device("cpu")), None, None, 0)
    assert err.value.signal_name == expected and err.value.step == 7
    assert saved == [tmp_path / "checkpoints" / "interrupted.ckpt"]


def test_an_ignored_sigint_stays_ignored():
    """A job a script started in the background ignores SIGINT (so that Ctrl-C stops the script, not its jobs), as
    Python leaves it: GracefulStop does not turn it back on."""
    import signal

    from coda_exp.stops import GracefulStop

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        GracefulStop().on_train_start(SimpleNamespace(world_size=1), None)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize("mine,others", [(False, 1), (True, 0), (False, 0)])
def test_an_evaluation_batch_stops_every_rank_or_none(mine, others):
    """During a validation or the test the ranks vote on a SIGTERM after each batch: any rank's signal sets
    Lightning's flag on every rank, so Lightning's own check stops them all after the same batch; setting it in the
    handler stopped the signalled rank alone, and the others failed at their next collective."""
    from pytorch_lightning.trainer.connectors.signal_connector import _SignalConnector

    from coda_exp.stops import DistributedSigterm

    strategy = SimpleNamespace(reduce=lambda t, reduce_op: torch.maximum(t, torch.tensor(others)))
    trainer = SimpleNamespace(world_size=2, strategy=strategy)
    trainer._signal_connector = _SignalConnector(trainer)
    sigterm = DistributedSigterm()
    sigterm._trainer, sigterm.received = trainer, mine
    sigterm.on_validation_batch_end(trainer, SimpleNamespace(device=torch.device("cpu")), None, None, 0)
    assert trainer._signal_connector.received_sigterm == (mine or others == 1)


def test_submitits_preemption_signal_saves_the_step_then_hands_over_to_submitit(tmp_path, monkeypatch):
    """A submitit job (hydra/launcher=slurm, submitit_local): its handler of the preemption signal (USR2) requeues the
    job and exits at once. GracefulStop takes the signal over for the training, saves interrupted.ckpt at the
    step's end, then calls submitit's handler; the handler is put back after the run. A whole preempted and
    requeued submitit_local job: tests/e2e/test_auto_resume.py."""
    import signal

    from coda_exp.stops import GracefulStop, RunInterrupted, submitit_signal

    calls = []

    class SignalHandler:  # submitit's own class name, in a submitit module
        def checkpoint_and_try_requeue(self, signum, frame):
            calls.append(signum)

    SignalHandler.__module__ = "submitit.core.job_environment"
    submitits = SignalHandler().checkpoint_and_try_requeue
    before = signal.signal(signal.SIGUSR2, submitits)
    try:
        assert submitit_signal() is signal.SIGUSR2
        saved = []
        trainer = SimpleNamespace(world_size=1, received_sigterm=False, callbacks=[], global_step=7,
                                  default_root_dir=str(tmp_path), save_checkpoint=saved.append)
        stop = GracefulStop()
        stop.on_train_start(trainer, None)
        signal.raise_signal(signal.SIGUSR2)  # noted only: submitit's handler has not run yet
        assert stop.requested == "SIGUSR2" and not calls
        with pytest.raises(RunInterrupted) as err:
            stop.on_train_batch_end(trainer, None, None, None, 0)
        assert saved == [tmp_path / "checkpoints" / "interrupted.ckpt"] and calls == [signal.SIGUSR2]
        assert err.value.signal_name == "SIGUSR2" and signal.getsignal(signal.SIGUSR2) == submitits
        signal.signal(signal.SIGUSR2, signal.SIG_DFL)
        assert submitit_signal() is None  # not a submitit job: the signal is left alone
    finally:
        signal.signal(signal.SIGUSR2, before)


def test_a_stop_before_a_due_validation_saves_the_step_too_and_a_resume_from_it_says_what_it_lacks(
        tmp_path, monkeypatch, caplog):
    """The stop waits for the validation due after the step (tests/e2e/test_resume.py); it saves interrupted.ckpt
    first, in case the run is killed during that validation (a cluster's grace period), marked so that a run resumed
    from it says that the validation is not run. No other checkpoint carries the mark."""
    from coda_exp.stops import GracefulStop

    monkeypatch.setattr("coda_exp.stops._checkpoint_follows", lambda trainer: True)
    stop = GracefulStop()
    states = []
    trainer = SimpleNamespace(world_size=1, received_sigterm=False, callbacks=[], global_step=5,
                              default_root_dir=str(tmp_path), save_checkpoint=lambda path: states.append(
                                  (path, stop.state_dict())))
    stop.requested = "SIGTERM"
    stop.on_train_batch_end(trainer, None, None, None, 0)  # no stop yet: the validation first
    assert states == [(tmp_path / "checkpoints" / "interrupted.ckpt", {"before_validation": 5})]
    assert stop.after_checkpoint == "SIGTERM" and stop.state_dict() == {}
    GracefulStop().load_state_dict(states[0][1])
    assert "resumed from a checkpoint saved before the validation due after step 5" in caplog.text


def test_the_resume_command_can_be_pasted_into_a_shell(monkeypatch):
    """An override with a space (a data folder) was printed bare: pasted back, the shell split it."""
    import shlex
    from pathlib import Path

    from coda_exp import stops

    monkeypatch.setattr("sys.argv", ["train.py"])
    again = stops._resume_command(["task=snli", "data.dir=/my data/snli", "ckpt_path=old.ckpt"],
                                  Path("/runs/a b/checkpoints/interrupted.ckpt"))
    assert shlex.split(again) == ["python", "train.py", "task=snli", "data.dir=/my data/snli",
                                  "ckpt_path=/runs/a b/checkpoints/interrupted.ckpt"]
