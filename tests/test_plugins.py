"""A researcher's own readers and classes kept outside the package: ``imports=[...]`` and the ``coda_exp.plugins``
entry points (``coda_exp/plugins.py``), found before a run starts and imported wherever a run is built."""

from __future__ import annotations

import re
import sys
import textwrap
from importlib import metadata

import pytest
import torch
from omegaconf import OmegaConf

from coda_exp import plugins
from coda_exp.config_nodes import anchor_paths
from coda_exp.data.common.readers import READERS
from coda_exp.tasks.base import CHECKPOINT_CONFIG
from tests.conftest import eval_paths, train_fixture_model

READER_MODULE = '''
    import csv
    from dataclasses import dataclass

    from coda_exp.data.common.files import read_table
    from coda_exp.data.common.readers import register
    from coda_exp.data.pair.readers import PairReader


    @dataclass(frozen=True)
    class TsvPairs(PairReader):
        """premise<TAB>hypothesis<TAB>label, with a header line."""

        def read_file(self, path, split):
            _, rows = read_table(path, split, delimiter="\\t", quoting=csv.QUOTE_NONE)
            for line, (premise, hypothesis, label) in rows:
                yield {{"text_a": premise, "text_b": hypothesis, "label": self.label_id(label, f"{{path}}:{{line}}"),
                       "group": ""}}


    register(TsvPairs(name="{name}", hub_id=None, source_hint="", label_names=("entailment", "neutral", "contradiction"),
                      files={{"train": "train.tsv", "validation": "dev.tsv", "test": "test.tsv"}}))
'''


@pytest.fixture
def isolated(monkeypatch):
    """sys.path, sys.modules' new entries and the reader registry as they were before the test. The families'
    readers are registered first: one registered during the test (its module imported by a reader of the test's)
    would otherwise go with the test's, and stay gone, its module imported, for the worker's later tests."""
    import coda_exp.data

    coda_exp.data.get_reader  # noqa: B018 (imports every family, which registers its readers)
    monkeypatch.setattr(sys, "path", list(sys.path))
    modules, readers = set(sys.modules), dict(READERS)
    monkeypatch.setattr(plugins, "_entry_points_loaded", False)
    yield
    for name in set(sys.modules) - modules:
        if name.startswith(("lab", "broken_lab")):  # the test's own modules (a library imported meanwhile stays)
            del sys.modules[name]
    READERS.clear()
    READERS.update(readers)


def write_reader(folder, module: str, name: str):
    path = folder / f"{module}.py"
    path.write_text(textwrap.dedent(READER_MODULE.format(name=name)))
    return path


def test_a_module_of_the_current_folder_or_a_file_registers_its_reader(tmp_path, monkeypatch, isolated):
    write_reader(tmp_path, "lab_readers_a", "lab_pairs_a")
    monkeypatch.chdir(tmp_path)
    assert plugins.load({"imports": ["lab_readers_a"]}) == ["lab_readers_a"]
    assert "lab_pairs_a" in READERS
    other = tmp_path / "elsewhere"
    other.mkdir()
    write_reader(other, "lab_readers_b", "lab_pairs_b")
    cfg = OmegaConf.create({"imports": ["elsewhere/lab_readers_b.py", "lab_readers_a"]})
    assert plugins.load(cfg) == ["lab_readers_b", "lab_readers_a"] and "lab_pairs_b" in READERS
    anchor_paths(cfg)  # (check_config, before the run saves its config)
    assert list(cfg["imports"]) == [str(other / "lab_readers_b.py"), "lab_readers_a"]  # as the saved config keeps it
    package = tmp_path / "pkg" / "labpkg"
    package.mkdir(parents=True)
    write_reader(package, "__init__", "lab_pairs_c")
    assert plugins.load({"imports": ["pkg/labpkg"]}) == ["labpkg"] and "lab_pairs_c" in READERS


def test_what_cannot_be_imported_is_one_message_naming_it(tmp_path, monkeypatch, isolated):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(plugins.PluginError, match=r"imports: no module named 'lab\.missing' on sys.path nor in the "
                                                  r"current folder .*\(imports=\[path/to/missing.py\]\)"):
        plugins.load({"imports": ["lab.missing"]})
    with pytest.raises(plugins.PluginError, match=r"imports: nowhere/x.py \(.*\) does not exist; .* \(from here\)$"):
        plugins.load({"imports": ["nowhere/x.py"]}, hint=" (from here)")
    (tmp_path / "broken_lab.py").write_text("import os\nraise RuntimeError('no GPU here')\n")
    assert plugins.problem(["broken_lab"]) is None  # found; a command line's check imports nothing
    with pytest.raises(plugins.PluginError, match=r"imports: importing 'broken_lab' failed: RuntimeError: no GPU here "
                                                  r"\(.*broken_lab.py:2\)"):
        plugins.load({"imports": ["broken_lab"]})
    with pytest.raises(plugins.PluginError, match=r"no module named 'brokn_lab' .*; did you mean broken_lab\?"):
        plugins.load({"imports": ["brokn_lab"]})
    assert "expected a list of module names" in plugins.problem(3)


def test_an_installed_plugin_is_imported_once_and_a_broken_one_named(tmp_path, monkeypatch, isolated):
    write_reader(tmp_path, "lab_entry", "lab_entry_pairs")
    monkeypatch.syspath_prepend(str(tmp_path))
    points = [metadata.EntryPoint(name="lab", value="lab_entry", group=plugins.GROUP)]
    monkeypatch.setattr(plugins.metadata, "entry_points", lambda group: points if group == plugins.GROUP else [])
    plugins.load(None)
    assert "lab_entry_pairs" in READERS
    points[:] = [metadata.EntryPoint(name="gone", value="lab_gone_module", group=plugins.GROUP)]
    plugins.load(None)  # once per process
    monkeypatch.setattr(plugins, "_entry_points_loaded", False)
    with pytest.raises(plugins.PluginError, match=r"the plugin gone = 'lab_gone_module' .* failed to import: "
                                                  r"ModuleNotFoundError"):
        plugins.load(None)


def test_an_unknown_dataset_says_how_a_reader_outside_the_package_registers():
    from coda_exp.data import get_reader
    from coda_exp.data.common.errors import DataError

    with pytest.raises(DataError, match=r"named in imports=\[your.module\]"):
        get_reader("zzzz_nothing_like_it")


def test_a_run_trains_and_evaluates_on_a_reader_of_its_own(tmp_path, compose, isolated, monkeypatch, capsys):
    """A run reads a benchmark through a reader in the user's file, named by a relative path; ``coda-exp eval`` of
    its checkpoint from another folder, in a process that has not imported that file, imports it again from the
    checkpoint's config (the path made absolute). A checkpoint naming a module by name only: ``imports=`` of the
    command replaces the checkpoint's."""
    from coda_exp.evaluate import eval_main

    data = tmp_path / "data"
    data.mkdir()
    rows = [("a man sleeps", "a person rests", "entailment"), ("a dog runs", "a cat sleeps", "contradiction"),
            ("kids play", "children play outside", "neutral")] * 4
    for split in ("train", "dev", "test"):
        (data / f"{split}.tsv").write_text("premise\thypothesis\tlabel\n" + "".join("\t".join(r) + "\n" for r in rows))
    module = write_reader(tmp_path, "lab_run_readers", "lab_run_pairs")
    monkeypatch.chdir(tmp_path)
    record, ckpt = train_fixture_model(compose, tmp_path / "run", "task=snli", "data.dataset=lab_run_pairs",
                                       "data.dir=data", "imports=[./lab_run_readers.py]", "task.epochs=1")
    assert record["data"]["train_examples"] == 12 and "test/acc" in record["metrics"], record["data"]
    saved = torch.load(ckpt, weights_only=False)
    assert saved[CHECKPOINT_CONFIG]["imports"] == [str(module)]  # anchored: read from anywhere
    assert saved[CHECKPOINT_CONFIG]["data"]["dir"] == str(data)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    del READERS["lab_run_pairs"], sys.modules["lab_run_readers"]
    assert eval_main([f"ckpt_path={ckpt}", "split=test", *eval_paths(tmp_path / "eval")]) == 0
    assert "lab_run_pairs" in READERS
    del READERS["lab_run_pairs"], sys.modules["lab_run_readers"]
    saved[CHECKPOINT_CONFIG]["imports"] = ["lab_run_readers"]  # a name found in the folder it was trained in
    torch.save(saved, tmp_path / "named.ckpt")
    sys.path[:] = [p for p in sys.path if p != str(tmp_path)]  # (the training put the file's folder there)
    assert eval_main([f"ckpt_path={tmp_path / 'named.ckpt'}", "split=test", *eval_paths(tmp_path / "eval")]) == 2
    assert re.search(r"error: imports: no module named 'lab_run_readers' .* \(the checkpoint's imports: coda-exp eval "
                     r"imports=\[\.\.\.\] gives others; or PYTHONPATH\)", capsys.readouterr().err)
    assert eval_main([f"ckpt_path={tmp_path / 'named.ckpt'}", "split=test", f"imports=[{module}]",
                      *eval_paths(tmp_path / "eval")]) == 0


@pytest.mark.parametrize("argv", [["task=snli", "scale=fixture", "imports=[lab_nowhere.readers]"],
                                  ["-m", "task=snli", "scale=fixture", "seed=1,2", "imports=[lab_nowhere.readers]"]])
def test_a_module_not_found_is_one_message_before_any_folder(argv, tmp_path, monkeypatch, capsys):
    from coda_exp import cli

    monkeypatch.setattr(sys, "argv", ["train.py"])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "imports: no module named 'lab_nowhere.readers'" in err, err
    assert err.count("Traceback") == 0 and not list(tmp_path.iterdir())


@pytest.mark.parametrize("verbose", [False, True])
def test_a_module_that_raises_is_one_line_and_with_v_its_traceback_too(verbose, tmp_path, monkeypatch, capsys,
                                                                        isolated):
    """-v showed the same one line: the message names the last frame only, so a user's bug two calls deep was hard to
    find. The run leaves no folder either way (outputs/runs/ it made goes too)."""
    from coda_exp import cli

    (tmp_path / "lab_boom.py").write_text("def setup():\n    raise ValueError('no vocab here')\n\n\nsetup()\n")
    monkeypatch.setattr(sys, "argv", ["train.py"])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["task=snli", "scale=fixture", "imports=[./lab_boom.py]", *(["-v"] if verbose else [])])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("error: imports: importing") == 1, err
    assert ("Traceback" in err and 'lab_boom.py", line 5, in <module>' in err) == verbose, err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == ["lab_boom.py"]


@pytest.mark.parametrize("verbose", [False, True])
def test_a_sweep_with_a_module_that_raises_is_refused_before_its_first_job(verbose, tmp_path, monkeypatch, capsys,
                                                                          isolated):
    """The sweep's data check imports the modules as the sweep starts: Hydra turned the error into a warning naming
    our callback, then every job failed with it, no summary was printed and the sweep exited 0. One message, exit 2,
    no folder; -v adds the traceback into the user's module."""
    from coda_exp import cli

    (tmp_path / "lab_sweep_boom.py").write_text("def setup():\n    raise ValueError('no vocab here')\n\n\nsetup()\n")
    monkeypatch.setattr(sys, "argv", ["train.py"])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["-m", "task=snli", "scale=fixture", "seed=1,2", "imports=[./lab_sweep_boom.py]",
                  *(["-v"] if verbose else [])])
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert err.count("error: the sweep cannot start: imports: importing './lab_sweep_boom.py' failed: ValueError: "
                     "no vocab here (") == 1 and "no job has run" in err and "UserWarning" not in err, err
    assert ("Traceback" in err and 'lab_sweep_boom.py", line 5, in <module>' in err) == verbose, err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == ["lab_sweep_boom.py"]


def test_a_broken_installed_plugin_is_named_at_each_load_with_where_it_raised(tmp_path, monkeypatch, isolated):
    """A failed entry point counted as loaded: the next load in the process (a sweep's job after its check, an
    evaluation after a training) went on without it. Its message names the plugin's line, as imports= does."""
    (tmp_path / "lab_entry_boom.py").write_text("x = 1\nraise RuntimeError('no GPU here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    points = [metadata.EntryPoint(name="lab", value="lab_entry_boom", group=plugins.GROUP)]
    monkeypatch.setattr(plugins.metadata, "entry_points", lambda group: points if group == plugins.GROUP else [])
    where = re.escape(f"RuntimeError: no GPU here ({tmp_path / 'lab_entry_boom.py'}:2)")
    for _ in range(2):
        with pytest.raises(plugins.PluginError, match=rf"the plugin lab = 'lab_entry_boom' .* {where}$"):
            plugins.load(None)
    points[:] = [metadata.EntryPoint(name="gone", value="lab_entry_gone", group=plugins.GROUP)]
    with pytest.raises(plugins.PluginError, match=r"ModuleNotFoundError: No module named 'lab_entry_gone'$"):
        plugins.load(None)  # nothing of the user's raised it: no frame named
