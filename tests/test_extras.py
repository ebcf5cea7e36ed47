"""coda_exp.extras: a feature whose optional package is missing says which extra to install, before it starts."""

from __future__ import annotations

import pytest

from coda_exp import cli, extras
from coda_exp.errors import UserError
from coda_exp.run_checks import check_extras


@pytest.fixture
def missing(monkeypatch):
    """``missing("wandb", ...)``: those packages are not installed, as far as coda_exp can tell."""
    absent: set[str] = set()
    real = extras.installed
    monkeypatch.setattr(extras, "installed", lambda module: module not in absent and real(module))
    return absent.update


def test_a_missing_extra_names_what_to_install(missing):
    missing({"wandb"})
    with pytest.raises(extras.MissingExtraError, match=r"logger=wandb needs wandb.*pip install 'coda-exp\[wandb\]'"):
        extras.require("wandb", "logger=wandb")
    assert issubclass(extras.MissingExtraError, UserError) and issubclass(extras.MissingExtraError, ImportError)


def test_an_alternative_package_serves(monkeypatch):
    """Lightning's TensorBoardLogger writes with tensorboard or tensorboardX."""
    present = {"tensorboardX"}
    monkeypatch.setattr(extras, "installed", lambda module: module in present)
    extras.require("tensorboard", "logger=tensorboard")
    present.clear()
    with pytest.raises(extras.MissingExtraError, match=r"coda-exp\[tensorboard\]"):
        extras.require("tensorboard", "logger=tensorboard")


@pytest.mark.parametrize("logger,module", [("wandb", "wandb"), ("tensorboard", "tensorboard")])
def test_a_run_checks_its_loggers_before_any_data_loads(make_cfg, missing, logger, module):
    cfg = make_cfg("task=wikiqa", "scale=fixture", f"logger={logger}")
    check_extras(cfg)  # installed here ([dev] pulls [all])
    missing({module, "tensorboardX"})
    with pytest.raises(extras.MissingExtraError, match=rf"coda-exp\[{module}\]"):
        check_extras(cfg)
    check_extras(make_cfg("task=wikiqa", "scale=fixture", "logger=csv"))


@pytest.mark.parametrize("command,args", [
    ("plot-curves", ["--runs", "r", "--out", "x.png"]), ("plot-coda", ["--ckpt", "x.ckpt"]),
    ("plot-attconv", ["--figure", "5", "--records", "r.json"]), ("fever-index", ["--data", "d"]),
])
def test_a_command_without_its_extra_is_one_line_and_status_2(missing, capsys, command, args):
    missing({"matplotlib", "sklearn"})
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, *args])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and "pip install 'coda-exp[" in err


def test_fever_retrieval_needs_its_extra(missing):
    from coda_exp.data.evidence.retrieval import RetrievalOptions

    missing({"sklearn"})
    with pytest.raises(extras.MissingExtraError, match=r"coda-exp\[fever\]"):
        RetrievalOptions().vectorizer()
