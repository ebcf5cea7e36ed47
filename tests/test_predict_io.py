"""The files of coda-exp predict: inputs read with file:line errors, one output row per input in input order."""

from __future__ import annotations

import json

import pytest

from coda_exp.data.common.errors import DataError
from coda_exp.predict_io import (
    default_output,
    other_inputs_output,
    prediction_rows,
    read_inputs,
    unknown_inputs,
)
from coda_exp.tokens import BOS_ID, EOS_ID, UNK_ID


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
    with pytest.raises(DataError, match=r": a folder, not a file; expected JSON lines"):  # "no such input file" before
        read_inputs(tmp_path, ("text",), "text")
    with pytest.raises(DataError, match="not supported for the dummy family yet"):
        read_inputs(path, (), "dummy")


def test_an_output_folder_under_a_file_is_named_as_a_file(tmp_path):
    """predict output=/etc/passwd/x.jsonl said "/etc/passwd is not writable (File exists)"."""
    from coda_exp.run_folder import OutputDirError, check_writable

    (tmp_path / "afile").write_text("x")
    with pytest.raises(OutputDirError, match=rf"output: {tmp_path / 'afile'} is a file, not a folder"):
        check_writable({"output": tmp_path / "afile"})
    with pytest.raises(OutputDirError, match=rf"runs: {tmp_path / 'afile' / 'a'} cannot be made: "
                                             rf"{tmp_path / 'afile'} is a file, not a folder"):
        check_writable({"runs": tmp_path / "afile" / "a"})


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


@pytest.mark.parametrize("content,fields,message", [
    ('{"src": "a=1;a"}\n{"src": ""}\n', ("src",), "in.jsonl:2: field 'src' is empty; expected a non-empty text"),
    ('{"src": "  "}\n', ("src",), "in.jsonl:1: field 'src' is empty"),
    ('{"question": "what", "passages": []}\n', ("question", "passages"),
     "in.jsonl:1: field 'passages' is an empty list; expected at least one non-empty text"),
    ('{"question": "what", "passages": ["a", ""]}\n', ("question", "passages"),
     "in.jsonl:1: field 'passages': item 2 of 2 is empty"),
    ('{"question": "", "passages": "a"}\n', ("question", "passages"), "in.jsonl:1: field 'question' is empty"),
])
def test_an_empty_input_is_refused_naming_its_line_and_field(tmp_path, content, fields, message):
    """An empty source was decoded into a made-up hypothesis; an empty list of passages gave the score -Infinity."""
    path = tmp_path / "in.jsonl"
    path.write_text(content)
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        read_inputs(path, fields, "x")
    tsv = tmp_path / "in.tsv"
    tsv.write_text("text_a\ttext_b\nx\t\n")
    with pytest.raises(DataError, match="in.tsv:2: field 'text_b' is empty"):
        read_inputs(tsv, ("text_a", "text_b"), "pair")


def test_a_comma_separated_tsv_is_said_to_be_one(tmp_path):
    """It was reported as ``:2: missing field(s) text_a, text_b``, pointing at neither the header nor the commas."""
    path = tmp_path / "in.tsv"
    path.write_text("text_a,text_b\nA man.,A person.\n")
    with pytest.raises(DataError, match=r"in.tsv:1: the header line 'text_a,text_b' has no tab but has commas: a "
                                        r"\.tsv input must be tab-separated"):
        read_inputs(path, ("text_a", "text_b"), "pair")
    path.write_text("text_a\ttext_b\nA man.,A person.\n")
    with pytest.raises(DataError, match=r"in.tsv:2: malformed row with 1 fields; expected 2 \(text_a, text_b\) \(the "
                                        r"row has no tab: the file must be tab-separated"):
        read_inputs(path, ("text_a", "text_b"), "pair")


def test_a_prediction_that_is_not_a_finite_number_is_null_and_says_why(tmp_path, caplog):
    """A span with no token to choose was written as ``"score": -Infinity``, which is not JSON."""
    from coda_exp.predict_io import write_predictions

    rows, wheres = [{"question": "q", "passages": "p"}] * 2, ["f:1", "f:2"]
    span = prediction_rows([{"index": 0, "start": 0, "end": 0, "score": float("-inf")},
                            {"index": 1, "start": 0, "end": 0, "score": 1.5}], rows, wheres,
                           [{"context_tokens": ["a"]}] * 2, None)
    assert span[0]["answer"] is None and span[0]["score"] is None and "score=-inf" in span[0]["invalid"]
    assert span[1]["answer"] == "a" and "invalid" not in span[1]
    assert "1 of 2 predictions are not finite numbers" in caplog.text and "the first: f:1" in caplog.text
    nan = float("nan")
    classified = prediction_rows([{"index": 0, "prediction": 0, "probabilities": [nan, nan]}], rows[:1], wheres[:1],
                                 [{}], ["no", "yes"])
    assert classified[0]["label"] is None and classified[0]["probabilities"] is None
    ranked = prediction_rows([{"index": 0, "score": nan}, {"index": 1, "score": -3.0}], rows, wheres, [{}] * 2, None)
    assert [(r["score"], r["rank"]) for r in ranked] == [(None, None), (-3.0, 1)]
    out = write_predictions([*span, *classified, *ranked], tmp_path / "out.jsonl")
    parsed = [json.loads(line, parse_constant=lambda c: pytest.fail(f"not JSON: {c}")) for line in
              out.read_text(encoding="utf-8").splitlines()]
    assert len(parsed) == 5
    with pytest.raises(ValueError):  # never a NaN or an infinity in the file
        write_predictions([{"score": nan}], tmp_path / "bad.jsonl")


def test_a_csv_input_or_a_line_that_is_not_json_names_the_formats_read(tmp_path):
    """A .csv file was read as JSON lines: "malformed JSON line (Expecting value)", nothing of what is read."""
    csv_file = tmp_path / "in.csv"
    csv_file.write_text("text_a,text_b\nA man.,A person.\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"^{csv_file}: a comma-separated .csv file; coda-exp predict reads JSON "
                                        r"lines \(one object per line with text_a, text_b; any name but .tsv\) or a "
                                        r"tab-separated .tsv file"):
        read_inputs(csv_file, ("text_a", "text_b"), "pair")
    txt = tmp_path / "in.txt"
    txt.write_text("text_a,text_b\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"^{txt}:1: malformed JSON line \(Expecting value\); coda-exp predict "
                                        r"reads JSON lines .* or a tab-separated .tsv file"):
        read_inputs(txt, ("text_a", "text_b"), "pair")


def test_inputs_of_mostly_unknown_tokens_are_counted_with_the_first_line():
    """An MLU model given "zzzz qqq" predicted "-1" without a word of warning."""
    wheres = ["in.jsonl:1", "in.jsonl:2", "in.jsonl:3", "in.jsonl:4"]
    encoded = [{"src": [BOS_ID, 7, 8, EOS_ID]},  # known
               {"src": [UNK_ID, UNK_ID, UNK_ID]},  # entirely unknown
               {"src": [UNK_ID, UNK_ID, 9]},  # mostly
               {"src": [UNK_ID, 9]}]  # half: not mostly
    note = unknown_inputs(encoded, wheres, ("src",))
    assert note.startswith("2 of 4 inputs are mostly tokens the model does not know (1 entirely; the first: "
                           "in.jsonl:2)")
    assert unknown_inputs(encoded[:1], wheres[:1], ("src",)) is None
    nested = [{"claim_ids": [UNK_ID], "evidence_ids": [[UNK_ID, UNK_ID], [5]]}]  # FEVER: a list per sentence
    assert unknown_inputs(nested, wheres[:1], ("claim_ids", "evidence_ids")).startswith("1 of 1 inputs")
