"""The loggers' checks before any data loads (``coda_exp.logger_checks``): online W&B without an API key or a
reachable server; W&B's own errors as the run starts its W&B run, as one message."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from coda_exp import logger_checks, loggers
from coda_exp.config_checks import ConfigError
from coda_exp.errors import UserError, exit_status
from coda_exp.pipeline import run
from coda_exp.run_checks import check_loggers
from coda_exp.run_record import run_identity


@pytest.fixture
def no_data(monkeypatch):
    """Fail the test if the run gets as far as loading data or building anything."""
    monkeypatch.setattr("coda_exp.pipeline.instantiate", lambda *a, **k: pytest.fail("data loaded before the check"))


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    """No W&B API key anywhere wandb looks (the variables, ~/.netrc), and a server on this machine's closed port."""
    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{_closed_port()}")
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed once the socket is: nothing listens there


def test_online_wandb_without_an_api_key_is_refused_before_any_data(make_cfg, no_data, no_credentials):
    """It failed once the data had loaded, with wandb's "No API key configured" in two tracebacks (exit status 1)."""
    with pytest.raises(ConfigError) as err:
        run(make_cfg("task=snli", "scale=fixture", "logger=wandb", "logger.wandb.offline=false"))
    message = str(err.value)
    assert "online W&B (logger.wandb.offline=false) needs an API key" in message and "`wandb login`" in message
    assert "or log offline with logger.wandb.offline=true" in message
    check_loggers(make_cfg("task=snli", "logger=wandb"))  # offline (the default): nothing asked


def test_online_by_wandb_mode_says_so_and_how_to_go_offline(make_cfg, no_credentials, monkeypatch):
    """WANDB_MODE=online chose online (the default offline: true yields to it): logger.wandb.offline=true, the
    default, would not take the run offline."""
    monkeypatch.setenv("WANDB_MODE", "online")
    with pytest.raises(ConfigError) as err:
        check_loggers(make_cfg("task=snli", "logger=wandb"))
    assert "online W&B (WANDB_MODE=online) needs an API key" in str(err.value)
    assert "or log offline with WANDB_MODE=offline (or unset it)" in str(err.value)


def test_online_wandb_with_an_unreachable_server_is_refused_at_once(make_cfg, no_data, no_credentials,
                                                                   monkeypatch):
    """Without a network, wandb waited about 90 s, then failed after the data had loaded, in two tracebacks."""
    monkeypatch.setenv("WANDB_API_KEY", "a" * 40)
    url = logger_checks.base_url()
    start = time.monotonic()
    with pytest.raises(ConfigError) as err:
        run(make_cfg("task=snli", "scale=fixture", "logger=wandb", "logger.wandb.offline=false"))
    assert time.monotonic() - start < logger_checks.CONNECT_TIMEOUT_S <= 5
    assert f"cannot reach {url}" in str(err.value) and "logger.wandb.offline=true" in str(err.value)


def test_a_server_that_does_not_answer_is_given_the_connect_timeout(monkeypatch):
    """Name resolution and connection both wait at most the timeout (a host without a network hung for minutes)."""
    seen, release = [], threading.Event()

    def hang(address, timeout):
        seen.append(timeout)
        release.wait(30)
        raise OSError("released")  # (after the test: the thread ends quietly)

    monkeypatch.setattr(socket, "create_connection", hang)
    monkeypatch.delenv("https_proxy", raising=False)
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    start = time.monotonic()
    problem = logger_checks.connect_problem("https://api.example.org", timeout=0.3)
    release.set()
    assert time.monotonic() - start < 2 and problem == "no answer within 0.3 s" and seen == [0.3]


def test_a_wandb_error_as_the_run_starts_is_one_users_error(make_cfg, monkeypatch):
    """An error of wandb.init during the run (after the checks: a refused key, a network gone) was a crash's
    traceback, twice, exit status 1."""
    import wandb

    def refuse(**kwargs):
        raise wandb.errors.CommError("Failed to get resume status: dial tcp: lookup api.wandb.ai: no such host")

    monkeypatch.setattr(wandb, "init", refuse)
    cfg = make_cfg("task=snli", "logger=wandb")
    built = loggers.build_loggers(cfg, run_identity(cfg, []))
    with pytest.raises(logger_checks.LoggerError) as err:
        loggers.log_config(built, cfg, run_identity(cfg, []), None)
    assert isinstance(err.value, UserError) and exit_status(err.value) == 2
    assert "CommError: Failed to get resume status" in str(err.value) and "no such host" in str(err.value)
    with pytest.raises(ValueError), logger_checks.wandb_errors():  # anything else stays what it is
        raise ValueError("not wandb's")


@pytest.mark.parametrize("overrides,message", [
    (["logger=wandb", "+logger.wandb.projet=x"],
     ("logger.wandb.projet is not a parameter of pytorch_lightning.loggers.WandbLogger nor of wandb.init, which it "
      "passes keys on to; did you mean logger.wandb.project?")),
    (["+logger.csv.flush_every=5"], "logger.csv.flush_every is not a parameter of pytorch_lightning.loggers.CSVLogger"),
    (["logger=tensorboard", "+logger.tensorboard.flush_sec=5"], "did you mean logger.tensorboard.flush_secs?"),
])
def test_a_logger_key_its_class_does_not_take_is_named_before_any_data(make_cfg, no_data, overrides, message):
    """It reached wandb.init or Hydra's instantiation after the data had loaded: a TypeError in two tracebacks."""
    with pytest.raises(ConfigError) as err:
        run(make_cfg("task=snli", "scale=fixture", *overrides))
    assert message in str(err.value) and "takes: " in str(err.value) and "\n" not in str(err.value)
    if "csv" in overrides[0]:
        assert "flush_logs_every_n_steps" in str(err.value)  # the keys it takes


def test_keys_a_logger_passes_on_are_accepted(make_cfg):
    check_loggers(make_cfg("task=snli", "logger=[csv,tensorboard,wandb]", "+logger.wandb.notes=n",
                           "+logger.wandb.mode=offline", "+logger.tensorboard.flush_secs=5",
                           "+logger.csv.flush_logs_every_n_steps=5"))
    with pytest.raises(ConfigError) as err:  # several: one message listing them
        check_loggers(make_cfg("task=snli", "logger=[csv,wandb]", "+logger.wandb.projet=x", "+logger.csv.nme=y"))
    assert str(err.value).count("\n") == 2 and "logger.csv.nme" in str(err.value)


def _mode(make_cfg, *overrides):
    (lg,) = loggers.build_loggers(make_cfg("task=snli", "logger=wandb", *overrides))
    return lg._wandb_init["mode"]


def test_wandb_mode_follows_the_config_then_wandb_mode_then_offline(make_cfg, monkeypatch, caplog):
    """WANDB_MODE=online was overridden by the config's default (offline) in silence, while wandb printed "set
    WANDB_MODE=online to enable cloud syncing". The rule: logger.wandb.mode, logger.wandb.offline=false, WANDB_MODE,
    offline."""
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert _mode(make_cfg) == "offline"
    monkeypatch.setenv("WANDB_MODE", "online")
    assert _mode(make_cfg) == "online" and not caplog.records
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert _mode(make_cfg) == "disabled"
    assert _mode(make_cfg, "+logger.wandb.mode=offline") == "offline"
    monkeypatch.setenv("WANDB_MODE", "offline")  # as `make` sets it
    assert _mode(make_cfg, "logger.wandb.offline=false") == "online"
    assert "logger.wandb.offline=false wins over WANDB_MODE=offline" in caplog.text  # one line says so


def test_a_wandb_mode_wandb_does_not_take_is_named_before_any_data(make_cfg, no_data, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "onlien")
    with pytest.raises(ConfigError) as err:
        run(make_cfg("task=snli", "scale=fixture", "logger=wandb"))
    assert "WANDB_MODE='onlien' is not a W&B mode (online, offline" in str(err.value)
    check_loggers(make_cfg("task=snli", "logger=csv"))  # no W&B logger: not W&B's business


def test_lightning_leaves_wandb_mode_alone(make_cfg, monkeypatch, tmp_path):
    """Lightning's offline logger set WANDB_MODE=dryrun for the rest of the process: a later job of a sweep that
    WANDB_MODE would have put online stayed offline."""
    import wandb

    monkeypatch.delenv("WANDB_MODE", raising=False)
    (lg,) = loggers.build_loggers(make_cfg("task=snli", "logger=wandb"))
    assert lg.experiment.settings.mode == "offline"  # the W&B run starts (offline)
    wandb.finish()
    assert "WANDB_MODE" not in os.environ
