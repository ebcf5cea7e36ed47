"""coda_exp.commands: ``coda-exp <command> [args]`` runs the command's function with its arguments (imported only
then), ``eval`` and ``predict`` go to coda_exp.evaluate, and a user's mistake is one line and exit status 2."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import pytest

from coda_exp import cli, commands
from coda_exp.errors import UserError


def _coda_exp(*argv: str) -> int:
    with pytest.raises(SystemExit) as exit_:
        cli.main(list(argv))
    return exit_.value.code


@pytest.fixture
def fake_evaluate(monkeypatch):
    """A stand-in coda_exp.evaluate (its functions take the Hydra overrides and return an exit status)."""
    calls = []
    module = types.ModuleType("coda_exp.evaluate")
    module.eval_main = lambda overrides: calls.append(("eval", overrides)) or 0
    module.predict_main = lambda overrides: calls.append(("predict", overrides)) or 3
    monkeypatch.setitem(sys.modules, "coda_exp.evaluate", module)
    return calls


def test_eval_and_predict_go_to_coda_exp_evaluate(fake_evaluate):
    assert _coda_exp("eval", "ckpt_path=/runs/a/checkpoints/last.ckpt", "split=test") == 0
    assert _coda_exp("predict", "ckpt_path=x.ckpt") == 3  # the function's own exit status
    assert fake_evaluate == [("eval", ["ckpt_path=/runs/a/checkpoints/last.ckpt", "split=test"]),
                             ("predict", ["ckpt_path=x.ckpt"])]


def test_a_user_error_in_a_command_is_one_line_and_status_2(monkeypatch, capsys):
    module = types.ModuleType("coda_exp.evaluate")

    def eval_main(overrides):
        raise type("CheckpointError", (UserError, OSError), {})("no checkpoint at x.ckpt")

    module.eval_main = eval_main
    monkeypatch.setitem(sys.modules, "coda_exp.evaluate", module)
    assert _coda_exp("eval", "ckpt_path=x.ckpt") == 2
    assert capsys.readouterr().err == "error: no checkpoint at x.ckpt\n"


def test_an_unknown_command_names_the_commands(capsys):
    assert _coda_exp("tabels", "--print") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown command 'tabels'" in err and "tables" in err and "key=value" in err


def test_a_command_missing_from_the_installation_is_one_line(monkeypatch, capsys):
    monkeypatch.setitem(commands.COMMANDS, "ghost", commands.Command("coda_exp.no_such_module", "main", "-"))
    assert commands.run_command("ghost", []) == 1
    assert "coda_exp.no_such_module" in capsys.readouterr().err


@pytest.mark.parametrize("arg,word", [("tables", True), ("plot-coda", True), ("task=snli", False), ("-m", False),
                                      ("--cfg", False), ("+data.num_test=5", False), ("~logger", False),
                                      ("hydra/launcher=joblib", False)])
def test_a_command_is_a_bare_word(arg, word):
    assert commands.is_command_word(arg) is word


def test_every_command_names_a_function_with_its_own_program_name(fake_evaluate, capsys):
    for name, command in commands.COMMANDS.items():
        assert callable(getattr(importlib.import_module(command.module), command.function)), name
    assert _coda_exp("tables", "--help") == 0
    assert capsys.readouterr().out.startswith("usage: coda-exp tables ")
    assert _coda_exp("help", "plot-curves") == 0  # coda-exp help <command>
    assert "usage: coda-exp plot-curves" in capsys.readouterr().out


def test_a_command_that_returns_what_it_wrote_succeeded(monkeypatch, tmp_path):
    module = types.ModuleType("fake_tool")
    module.main = lambda argv: tmp_path / "written.png"
    monkeypatch.setitem(sys.modules, "fake_tool", module)
    monkeypatch.setitem(commands.COMMANDS, "fake", commands.Command("fake_tool", "main", "-"))
    assert commands.run_command("fake", []) == 0
    module.main = lambda argv: 1
    assert commands.run_command("fake", []) == 1


def test_tables_runs_from_the_entry_point(tmp_path, capsys):
    """coda-exp tables writes every table from a folder of records (none here: `no run` cells); a folder that does
    not exist is an error, and nothing is written."""
    assert _coda_exp("tables", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "tables")) == 2
    assert "--runs " + str(tmp_path / "runs") + ": no such folder" in capsys.readouterr().err
    assert not (tmp_path / "tables").exists()
    (tmp_path / "runs").mkdir()
    assert _coda_exp("tables", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "tables"),
                     "--tables", "table_2") == 0
    written = {Path(line) for line in capsys.readouterr().out.splitlines()}
    assert written == {tmp_path / "tables" / f"table_2.{ext}" for ext in ("md", "tex", "csv")}


def test_a_skipped_record_is_one_warning_line_without_pythons_source_line(tmp_path, capsys):
    """The tables' warning about a corrupt record printed Python's file:line, its category and the source line."""
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "bad.json").write_text("{not json", encoding="utf-8")
    assert _coda_exp("tables", "--runs", str(runs), "--out", str(tmp_path / "tables"), "--tables", "table_2") == 0
    err = capsys.readouterr().err
    assert f"warning: skipping run record: {runs / 'bad.json'}: cannot read run record" in err
    assert "RecordWarning" not in err and "warnings.warn" not in err


def test_tables_out_that_is_no_folder_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    """--out /etc/passwd used to be a FileExistsError's traceback; a write that fails (a full disk), an OSError's."""
    import errno

    (tmp_path / "runs").mkdir()
    (tmp_path / "file").write_text("a file, not a folder")
    runs = ["tables", "--runs", str(tmp_path / "runs"), "--tables", "table_2", "--out"]
    assert _coda_exp(*runs, str(tmp_path / "file")) == 2
    assert capsys.readouterr().err == (f"error: --out {tmp_path / 'file'}: a file, not a folder; expected a folder to "
                                       "write the tables (<id>.md, .tex, .csv) into\n")
    assert _coda_exp(*runs, str(tmp_path / "file" / "tables")) == 2
    assert f"{tmp_path / 'file'} is a file, not a folder" in capsys.readouterr().err

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "tables" / "table_2.md"))

    monkeypatch.setattr("coda_exp.tools.tables.write_table", full)
    assert _coda_exp(*runs, str(tmp_path / "tables")) == 2
    assert capsys.readouterr().err == (f"table_2: no run of its cells in {tmp_path / 'runs'}: every cell says `no run`\n"
                                       f"error: --out {tmp_path / 'tables'}: cannot write the tables: No space left on "
                                       "device: free space on that disk\n")


@pytest.mark.parametrize("argv,message", [
    (["make-mlu", "--out-dir", "{tmp}/mlu", "--num-train", "-5"], "argument --num-train: expected a number of examples"),
    (["make-mlu", "--out-dir", "{tmp}/file/mlu", "--num-train", "5"], "error: --out-dir {tmp}/file/mlu: "),
    (["yelp-split", "--review-json", "{tmp}/r.json", "--out-dir", "{tmp}/y", "--valid", "x"],
     "argument --valid: expected a number of examples (an int >= 1), got 'x'"),
])
def test_data_file_commands_refuse_bad_arguments_in_one_message(argv, message, tmp_path, capsys):
    """A negative size used to be a ValueError's traceback; a folder that cannot be made, an OSError's."""
    (tmp_path / "file").write_text("a file, not a folder")
    assert _coda_exp(*[a.format(tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert message.format(tmp=tmp_path) in err and "Traceback" not in err, err
    assert not (tmp_path / "mlu").exists()
