"""coda-exp fever-index / fever-retrieve: their options are checked by argparse, in the ranges task=fever's
data.retrieval.* allows, before anything is read or built."""

from __future__ import annotations

import pytest

from coda_exp.data.common.errors import DataError
from coda_exp.data.evidence import RetrievalOptions
from coda_exp.tools.fever import index_main, retrieve_main


@pytest.mark.parametrize("main,option,value,expected", [
    (index_main, "--ngram", "0", "an integer >= 1"),
    (index_main, "--ngram", "-2", "an integer >= 1"),
    (index_main, "--hash-bits", "64", "an integer 1-30"),
    (index_main, "--hash-bits", "-1", "an integer 1-30"),
    (index_main, "--hash-bits", "0", "an integer 1-30"),
    (index_main, "--hash-bits", "x", "an integer 1-30"),
    (retrieve_main, "--pages", "0", "an integer >= 1"),
    (retrieve_main, "--sentences", "-1", "an integer >= 1"),
    (retrieve_main, "--hash-bits", "31", "an integer 1-30"),
])
def test_retrieval_options_out_of_range_are_one_usage_error(main, option, value, expected, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--data", str(tmp_path), "--cache", str(tmp_path / "cache"), option, value])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: expected {expected}, got '{value}'" in err and "Traceback" not in err
    assert not (tmp_path / "cache").exists()  # nothing built


def test_retrieval_options_of_a_training_config_are_checked_too():
    with pytest.raises(DataError, match=r"data.retrieval.hash_bits=64: expected an integer 1-30"):
        RetrievalOptions(hash_bits=64)
    with pytest.raises(DataError, match=r"data.retrieval.ngram=0: expected an integer >= 1"):
        RetrievalOptions(ngram=0)
    assert RetrievalOptions(hash_bits=30, pages=1).hash_bits == 30


@pytest.mark.parametrize("command", ["fever-index", "fever-retrieve"])
def test_a_cache_that_is_a_file_is_one_message(command, tmp_path, capsys):
    from coda_exp.commands import run_command

    (tmp_path / "cache").write_text("a file")
    assert run_command(command, ["--data", str(tmp_path), "--cache", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --cache {tmp_path / 'cache'}: exists and is not a folder\n"
