"""The configs' resolvers: ``${fixture_dir:TASK}`` finds the fixtures of a checkout or of an installed package,
whatever the current folder and ``paths.root_dir``; ``${dir_if_exists:PATH}``."""

from __future__ import annotations

from omegaconf import OmegaConf

from coda_exp import environment, resolvers
from tests import FIXTURES, ROOT


def test_fixture_dir_is_the_checkouts_fixture_folder_in_a_checkout():
    assert environment.in_checkout()
    assert environment.fixtures_dir() == FIXTURES
    assert OmegaConf.create({"d": "${fixture_dir:wikiqa}"}).d == str(FIXTURES / "wikiqa")


def test_fixture_dir_is_the_packages_copy_when_installed(tmp_path, monkeypatch):
    """An installed wheel: no pyproject.toml beside the package, its fixtures shipped as coda_exp/fixtures/."""
    package = tmp_path / "site-packages" / "coda_exp"
    (package / "fixtures" / "wikiqa").mkdir(parents=True)
    monkeypatch.setattr(environment, "PACKAGE", package)
    monkeypatch.setattr(environment, "CHECKOUT", package.parent)
    assert not environment.in_checkout()
    assert resolvers.fixture_dir("wikiqa") == str(package / "fixtures" / "wikiqa")
    assert OmegaConf.create({"d": "${fixture_dir:snli}"}).d == str(package / "fixtures" / "snli")


def test_scale_fixture_reads_the_fixtures_from_any_folder(make_cfg, tmp_path, monkeypatch):
    """`cd /elsewhere && coda-exp task=wikiqa scale=fixture` used to look for ./tests/fixtures/wikiqa (the error then
    sent the user to the official download)."""
    monkeypatch.chdir(tmp_path)
    for root in (".", str(tmp_path)):
        cfg = make_cfg("task=wikiqa", "scale=fixture", f"paths.root_dir={root}")
        assert cfg.data.dir == str(FIXTURES / "wikiqa")
    assert make_cfg("task=wikiqa", "scale=fixture", "data.dir=/mine").data.dir == "/mine"


def test_every_task_with_a_fixture_config_has_its_fixture_folder():
    """What the wheel must ship: each task's fixture folder exists (and is not empty) where the resolver looks."""
    tasks = sorted(p.stem for p in (ROOT / "configs" / "task").glob("*.yaml"))
    missing = [t for t in tasks if not any((FIXTURES / t).glob("*"))]
    assert missing == []


def test_dir_if_exists(tmp_path):
    assert resolvers.dir_if_exists(str(tmp_path)) == str(tmp_path)
    assert resolvers.dir_if_exists(str(tmp_path / "absent")) is None
    assert resolvers.dir_if_exists(None) is None
