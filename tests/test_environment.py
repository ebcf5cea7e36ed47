"""coda_exp.environment: where a run's folders go (``paths.root_dir``) from where the command is run."""

from __future__ import annotations

import os

from coda_exp import environment


def test_the_root_is_the_checkout_inside_it_and_the_current_folder_outside(tmp_path, monkeypatch):
    """A checkout installed with ``pip install -e`` and used from a project folder of one's own wrote its runs,
    records and caches into the checkout."""
    monkeypatch.delenv("CODA_EXP_ROOT")
    monkeypatch.chdir(environment.CHECKOUT / "scripts")
    assert environment.root_dir() == environment.CHECKOUT
    monkeypatch.chdir(tmp_path)
    assert environment.root_dir() == tmp_path
    environment.set_environment()
    assert os.environ["CODA_EXP_ROOT"] == str(tmp_path)  # absolute: the configs, records and checkpoints name it
    monkeypatch.setenv("CODA_EXP_ROOT", "/somewhere/else")
    assert str(environment.root_dir()) == "/somewhere/else"
