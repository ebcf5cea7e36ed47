"""AlgoLisp: the metaset3 reader (examples, errors naming file and line); gold programs pass their tests."""

from __future__ import annotations

import json

import pytest

from coda_exp.algolisp import parse_program, passes_tests
from coda_exp.data.common.errors import DataError
from coda_exp.data.seq2seq.algolisp import ALGOLISP
from tests import FIXTURES

FIX = FIXTURES / "algolisp"


def fixture_examples(split: str) -> list[dict]:
    return list(ALGOLISP.read_file(FIX / f"metaset3.{split}.jsonl"))


def test_reader_on_fixture():
    sizes = {s: len(fixture_examples(s)) for s in ("train", "dev", "test")}
    assert sizes == {"train": 12, "dev": 4, "test": 4}
    first = fixture_examples("train")[0]
    assert first["src"].startswith("given an array of numbers a , compute the sum")
    assert first["tgt"] == "( reduce ( slice a 1 ( len a ) ) 0 + )"
    assert first["args"] == {"a": "int[]"} and first["return_type"] == "int" and first["index"] == 0
    assert len(first["tests"]) == 10 and set(first["tests"][0]) == {"input", "output"}
    assert ALGOLISP.local_files(FIX, "validation")[0].name == "metaset3.dev.jsonl"


def test_gold_programs_pass_their_own_tests():
    for split in ("train", "dev", "test"):
        for ex in fixture_examples(split):
            assert passes_tests(parse_program(ex["tgt"]), ex["tests"]), ex["tgt"]


def write_lines(tmp_path, *rows) -> str:
    path = tmp_path / "metaset3.train.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


GOOD = {"text": "given a number a , return a", "short_tree": "a", "args": {"a": "int"}, "return_type": "int",
        "tests": [{"input": {"a": 1}, "output": 1}], "tags": ["x"]}


def test_reader_accepts_string_text(tmp_path):
    (ex,) = ALGOLISP.read_file(write_lines(tmp_path, GOOD))
    assert ex["src"] == GOOD["text"] and ex["tgt"] == "a"


@pytest.mark.parametrize("bad, message", [
    ("{not json", "malformed JSON"),
    ("[1, 2]", "expected a JSON object"),
    ({k: v for k, v in GOOD.items() if k != "short_tree"}, r"missing field\(s\) \['short_tree'\]"),
    ({**GOOD, "text": 3}, "'text'"),
    ({**GOOD, "args": []}, "'args'"),
    ({**GOOD, "short_tree": ["+", []]}, "'short_tree' is not a program"),
    ({**GOOD, "tests": [{"input": {"a": 1}}]}, r"tests\[0\]"),
    ({**GOOD, "tests": [{"input": {"b": 1}, "output": 1}]}, r"tests\[0\]'s input names \['b'\], the arguments"),
    ({**GOOD, "return_type": 3}, "'return_type' must be a type name"),
    ({**GOOD, "text": []}, "'text' is empty"),
])
def test_reader_errors_name_file_and_line(tmp_path, bad, message):
    path = write_lines(tmp_path, GOOD, bad)
    with pytest.raises(DataError, match=rf"metaset3\.train\.jsonl:2: .*{message}"):
        list(ALGOLISP.read_file(path))


def test_gold_programs_with_symbols_the_interpreter_lacks_are_a_warning(tmp_path):
    """A gold program calling an unknown function failed every test silently: execution accuracy below 100 % for
    the data's sake, not the model's."""
    from coda_exp.data.seq2seq.sources import AlgoLispDataModule

    for split in ("dev", "test", "train"):  # train last: write_lines writes the train file
        bad = {**GOOD, "short_tree": ["frobnicate", "a"]} if split == "test" else GOOD
        write_lines(tmp_path, GOOD, bad).rename(tmp_path / f"metaset3.{split}.jsonl")
    (ex, odd) = ALGOLISP.read_file(tmp_path / "metaset3.test.jsonl")
    assert ex["unknown"] == [] and odd["unknown"] == ["frobnicate"]
    dm = AlgoLispDataModule(dir=str(tmp_path), cache_dir=str(tmp_path / "cache"), batch_size=2)
    dm.setup("fit")
    assert dm.warnings == [(f"algolisp test: 1 of 2 gold programs use symbols the interpreter does not know (first: "
                           f"{tmp_path / 'metaset3.test.jsonl'}:2: ['frobnicate']): their tests fail whatever the "
                           "model decodes")]


def test_missing_files_are_clear(tmp_path):
    with pytest.raises(DataError, match=r"lacks metaset3.train.jsonl \(and .*, which other splits read\). Expected the official files metaset3.train.jsonl, metaset3.dev.jsonl, "
                                        "metaset3.test.jsonl"):
        list(ALGOLISP.read("train", tmp_path))
    with pytest.raises(DataError, match="no such file"):
        list(ALGOLISP.read_file(tmp_path / "nope.jsonl"))
