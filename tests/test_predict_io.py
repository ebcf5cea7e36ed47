"""The files of coda-exp predict: inputs read with file:line errors, one output row per input in input order."""

from __future__ import annotations

import json

import pytest

from coda_exp.data.common.errors import DataError
from coda_exp.predict_io import default_output, other_inputs_output, prediction_rows, read_inputs


def test_jsonl_and_tsv_inputs(tmp_path):
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text('{"question": "q?", "passages": ["a", "b"], "id": 1}\n\n{"question": "r", "passages": "c"}\n')
    rows, wheres = read_inputs(jsonl, ("question", "passages"), "span")
    assert rows[0]["passages"] == ["a", "b"] and wheres == [f"{jsonl}:1", f"{jsonl}:3"]
    tsv = tmp_path / "in.tsv"
    tsv.write_text("text\tid\nfirst text\tx1\n\nsecond\tx2\n")
    rows, wheres = read_inputs(tsv, ("text",), "text")
    assert rows == [{"text": "first text", "id": "x1"}, {"text": "second", "id": "x2"}]
    assert wheres == [f"{tsv}:2", f"{tsv}:4"]


@pytest.mark.parametrize("content,message", [
    ('{"src": "a"}\n[1, 2]\n', "in.jsonl:2: expected a JSON object, got list"),
    ('{"src": ["a"]}\n', "in.jsonl:1: field 'src' must be a string, got list"),
    ('{"src": "a", "id": {"x": 1}}\n', "in.jsonl:1: field 'id' must be a string"),
    ('{"source": "a"}\n', "in.jsonl:1: missing field(s) src; the seq2seq family's inputs have src"),
    ("\n\n", "in.jsonl: empty file"),
])
def test_bad_inputs_name_file_and_line(tmp_path, content, message):
    path = tmp_path / "in.jsonl"
    path.write_text(content)
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        read_inputs(path, ("src",), "seq2seq")


def test_a_list_field_names_its_element_that_is_not_a_string(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"question": "q", "passages": ["a", "b"]}\n{"question": "q", "passages": ["a", 3]}\n')
    with pytest.raises(DataError) as err:
        read_inputs(path, ("question", "passages"), "span")
    assert str(err.value) == (f"{path}:2: field 'passages' must be a string or a list of strings, got a list whose "
                              "element 1 (counting from 0) is 3, of type int")


def test_a_tsv_row_of_the_wrong_width_and_a_missing_file(tmp_path):
    path = tmp_path / "in.tsv"
    path.write_text("text_a\ttext_b\none\ttwo\nonly one\n")
    with pytest.raises(DataError, match=r"in.tsv:3: malformed row with 1 fields; expected 2"):
        read_inputs(path, ("text_a", "text_b"), "pair")
    with pytest.raises(DataError, match="no such input file"):
        read_inputs(tmp_path / "nope.jsonl", ("text",), "text")
    with pytest.raises(DataError, match="not supported for the dummy family yet"):
        read_inputs(path, (), "dummy")


def test_default_output_lies_beside_the_input(tmp_path):
    assert default_output(tmp_path / "q.jsonl") == tmp_path / "q.predictions.jsonl"
    assert default_output(tmp_path / "q.tsv.gz") == tmp_path / "q.predictions.jsonl"
    assert default_output(tmp_path / "inputs") == tmp_path / "inputs.predictions.jsonl"


def test_a_default_output_written_for_another_input_is_named(tmp_path):
    out = tmp_path / "q.predictions.jsonl"
    assert other_inputs_output(out, tmp_path / "q.jsonl.gz") is None  # none yet
    out.write_text(json.dumps({"line": f"{tmp_path}/q.jsonl:1", "label": "x"}) + "\n", encoding="utf-8")
    assert other_inputs_output(out, tmp_path / "q.jsonl.gz") == str(tmp_path / "q.jsonl")
    assert other_inputs_output(out, tmp_path / "q.jsonl") is None  # its own: a rerun overwrites it
    out.write_text("not predictions\n", encoding="utf-8")
    assert other_inputs_output(out, tmp_path / "q.jsonl.gz") is None


def test_prediction_rows_by_family():
    rows = [{"text_a": "q", "text_b": "a1", "group": "g", "id": "x"}, {"text_a": "q", "text_b": "a2", "group": "g"},
            {"text_a": "r", "text_b": "b", "group": "h"}]
    wheres = ["f:1", "f:2", "f:3"]
    ranked = prediction_rows([{"index": 2, "score": 0.1}, {"index": 0, "score": -1.0}, {"index": 1, "score": 2.0}],
                             rows, wheres, [{}] * 3, None)
    assert [(r["line"], r["rank"], r["group"]) for r in ranked] == [("f:1", 2, "g"), ("f:2", 1, "g"), ("f:3", 1, "h")]
    assert ranked[0]["id"] == "x" and "id" not in ranked[1]
    classified = prediction_rows([{"index": 0, "prediction": 1, "probabilities": [0.2, 0.8]}], rows[:1], wheres[:1],
                                 [{}], ["no", "yes"])
    assert classified == [{"line": "f:1", "id": "x", "label": "yes", "probabilities": {"no": 0.2, "yes": 0.8}}]
    span = prediction_rows([{"index": 0, "start": 1, "end": 2, "score": -0.5}], rows[:1], wheres[:1],
                           [{"context_tokens": ["The ", "blue ", "sky ", "."]}], None)
    assert span[0]["answer"] == "blue sky" and (span[0]["start"], span[0]["end"]) == (1, 2)
    decoded = prediction_rows([{"index": 0, "hypothesis": "x y"}], rows[:1], wheres[:1], [{}], None)
    assert decoded[0]["hypothesis"] == "x y"
    with pytest.raises(RuntimeError, match="1 predictions for 3 inputs"):
        prediction_rows([{"index": 0, "hypothesis": ""}], rows, wheres, [{}] * 3, None)
