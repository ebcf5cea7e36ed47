"""Yelp (AttConv Table 3): the split files' reader, review.json, and the split script."""

import json
import random
import shutil
from pathlib import Path

import pytest

from coda_exp.data.common.errors import DataError
from coda_exp.data.text.readers import get_text_reader
from coda_exp.data.text.yelp import SPLIT_FILES, choose, read_reviews, split_line, write_split
from tests import FIXTURES

YELP = FIXTURES / "yelp"
SPLITS = ("train", "validation", "test")


def copy(tmp_path):
    return shutil.copytree(YELP, tmp_path / "yelp")


def read(split, d=YELP):
    return list(get_text_reader("yelp").read(split, d))


# -- the split files ----------------------------------------------------------------------------------------
def test_reads_the_split_files_stars_to_labels():
    rows = {s: read(s) for s in SPLITS}
    assert [len(rows[s]) for s in SPLITS] == [60, 20, 20]  # every line; short ones are the data module's business
    assert {r["label"] for r in rows["train"]} == {0, 1, 2, 3, 4}
    for split, name in zip(SPLITS, SPLIT_FILES):
        lines = (YELP / name).read_text(encoding="utf-8").splitlines()
        assert [f"{r['label'] + 1} {r['text']}" for r in rows[split]] == lines
        assert [r["index"] for r in rows[split]] == list(range(len(lines)))
    assert get_text_reader("yelp").label_names[0] == "1 star" and len(get_text_reader("yelp").label_names) == 5


def test_tabs_and_blank_lines(tmp_path):
    d = copy(tmp_path)
    (d / "yelp_test_2000").write_text("5\tGreat food and friendly staff .\n\n  \n1 Cold fries , rude staff .\n",
                                      encoding="utf-8")
    assert [(r["label"], r["text"]) for r in read("test", d)] == [
        (4, "Great food and friendly staff ."), (0, "Cold fries , rude staff .")]


@pytest.mark.parametrize("line,message", [
    ("4", r"yelp_valid_2000:3: no text after the label '4'; expected '<stars> <tokens \.\.\.>'"),
    ("good", r"yelp_valid_2000:3: malformed line 'good'; expected '<stars> <tokens \.\.\.>'"),
    ("0 no stars at all here", r"yelp_valid_2000:3: unknown label '0' for yelp; expected an integer 1-5"),
    ("6 six stars is too many", r"yelp_valid_2000:3: unknown label '6'.*1-5 \(1 star, 2 stars"),
    ("4.5 half a star more", r"yelp_valid_2000:3: unknown label '4.5'"),
    ("five very good food indeed", r"yelp_valid_2000:3: unknown label 'five'"),
    ("⁵ a superscript five", r"yelp_valid_2000:3: unknown label '⁵'"),  # str.isdigit() is true, int() fails
    ("٥ an Arabic-Indic five", r"yelp_valid_2000:3: unknown label '٥'"),  # int() would read it as 5
])
def test_malformed_line_and_unknown_stars(tmp_path, line, message):
    d = copy(tmp_path)
    lines = (d / "yelp_valid_2000").read_text(encoding="utf-8").splitlines()
    (d / "yelp_valid_2000").write_text("\n".join(lines[:2] + [line] + lines[2:]) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=message):
        read("validation", d)


def test_missing_files_say_they_are_not_public(tmp_path):
    with pytest.raises(DataError, match=r"lacks yelp_train_500k \(and .*, which other splits read\). Expected .*yelp_valid_2000, yelp_test_2000.*not public.*"
                                        r"make_yelp_split\.py"):
        read("train", tmp_path)
    with pytest.raises(DataError, match="no Hugging Face hub copy"):
        list(get_text_reader("yelp").read("train"))


def test_empty_file_is_named(tmp_path):
    d = copy(tmp_path)
    (d / "yelp_test_2000").write_text("\n \n", encoding="utf-8")
    with pytest.raises(DataError, match=r"yelp_test_2000: empty file \(read for the test split\); expected one "
                                        r"'<stars> <tokens \.\.\.>' per line"):
        read("test", d)


# -- review.json --------------------------------------------------------------------------------------------
def test_review_json_rows():
    rows = list(read_reviews(YELP / "review.json"))
    assert len(rows) == 110 and {s for _, s, _ in rows} == {1, 2, 3, 4, 5}
    first = json.loads((YELP / "review.json").read_text(encoding="utf-8").splitlines()[1])
    assert isinstance(first["stars"], float) and rows[1][1] == int(first["stars"]) and rows[1][2] == first["text"]
    assert rows[1][0].endswith("review.json:2")


@pytest.mark.parametrize("row,message", [
    ('{"review_id": "x", "stars": 4', "review.json:2: malformed JSON"),
    ('["not", "an", "object"]', "review.json:2: expected a JSON object"),
    ('{"review_id": "x", "text": "no rating"}', r"review.json:2: review lacks the field\(s\) stars"),
    ('{"review_id": "x", "stars": 6, "text": "six"}', "review.json:2: unknown star rating 6; expected an integer 1-5"),
    ('{"review_id": "x", "stars": 3.5, "text": "half"}', "review.json:2: unknown star rating 3.5"),
    ('{"review_id": "x", "stars": "5", "text": "a string"}', "review.json:2: unknown star rating '5'"),
    ('{"review_id": "x", "stars": true, "text": "a bool"}', "review.json:2: unknown star rating True"),
    ('{"review_id": "x", "stars": NaN, "text": "nan"}', "review.json:2: unknown star rating nan"),
    ('{"review_id": "x", "stars": Infinity, "text": "inf"}', "review.json:2: unknown star rating inf"),
    ('{"review_id": "x", "stars": -Infinity, "text": "inf"}', "review.json:2: unknown star rating -inf"),
    ('{"review_id": "x", "stars": 2, "text": "  "}', "review.json:2: empty or non-string review text"),
])
def test_review_json_errors_name_file_and_line(tmp_path, row, message):
    path = tmp_path / "review.json"
    path.write_text('{"review_id": "a", "stars": 5, "text": "Fine."}\n' + row + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=message):
        list(read_reviews(path))


def test_review_json_not_utf8_or_empty(tmp_path):
    path = tmp_path / "review.json"
    path.write_bytes(b'{"stars": 5, "text": "caf\xe9"}\n')
    with pytest.raises(DataError, match=r"review.json:1: byte b'\\xe9' .* not UTF-8"):
        list(read_reviews(path))
    path.write_bytes(b"")
    with pytest.raises(DataError, match="review.json: empty file; expected one JSON review per line"):
        list(read_reviews(path))


# -- the split ----------------------------------------------------------------------------------------------
def test_split_line_tokenizes_and_keeps_case():
    assert split_line(4, "Great tacos!\n\nWe'll be back (soon).") == "4 Great tacos ! We'll be back ( soon ) ."


def test_choose_draws_disjoint_splits_of_the_sizes():
    where = choose(50, (20, 5, 5), seed=3)
    assert [where.count(k) for k in (0, 1, 2, -1)] == [20, 5, 5, 20]
    assert choose(50, (20, 5, 5), seed=3) == where and choose(50, (20, 5, 5), seed=4) != where
    with pytest.raises(DataError, match="data.json holds 10 reviews, fewer than the 30 the split needs"):
        choose(10, (20, 5, 5), seed=3, source="data.json")


def test_split_regenerates_the_fixture_and_depends_on_the_seed(tmp_path, load_script):
    mf = load_script("yelp_fixtures")
    for name, path in zip(SPLIT_FILES, write_split(YELP / "review.json", tmp_path / "a", **mf.YELP_SPLIT)):
        assert path.name == name and path.read_bytes() == (YELP / name).read_bytes()
    other = write_split(YELP / "review.json", tmp_path / "b", sizes=(60, 20, 20), seed=7)
    assert other[0].read_bytes() != (YELP / SPLIT_FILES[0]).read_bytes()
    texts = [set(p.read_text(encoding="utf-8").splitlines()) for p in other]
    assert sum(len(t) for t in texts) == 100 and all(line[0] in "12345" for t in texts for line in t)
    written = "".join(json.dumps(r) + "\n" for r in mf.yelp_reviews(random.Random(2017)))
    assert written == (YELP / "review.json").read_text(encoding="utf-8")  # yelp_fixtures.py (make fixtures) wrote the fixture


def test_the_command_writes_nothing_on_a_bad_review(tmp_path, capsys):
    """coda-exp yelp-split (scripts/make_yelp_split.py)."""
    from coda_exp.tools.data_files import yelp_main

    out = tmp_path / "out"
    assert yelp_main(["--review-json", str(YELP / "review.json"), "--out-dir", str(out), "--train", "30",
                        "--valid", "5", "--test", "5", "--seed", "9"]) == 0
    assert [len(p.read_text(encoding="utf-8").splitlines()) for p in (out / n for n in SPLIT_FILES)] == [30, 5, 5]
    assert "counting" in capsys.readouterr().err  # the progress bar
    bad = tmp_path / "review.json"
    bad.write_text((YELP / "review.json").read_text(encoding="utf-8") + '{"stars": 9, "text": "x"}\n',
                   encoding="utf-8")
    fresh = tmp_path / "fresh"
    assert yelp_main(["--review-json", str(bad), "--out-dir", str(fresh), "--no-progress"]) == 2
    assert "review.json:111: unknown star rating 9" in capsys.readouterr().err
    assert not fresh.exists() or not any(fresh.iterdir())
    assert yelp_main(["--review-json", str(YELP / "review.json"), "--out-dir", str(fresh), "--no-progress"]) == 2
    assert "fewer than the 504000 the split needs (500000 + 2000 + 2000)" in capsys.readouterr().err
    assert yelp_main(["--review-json", str(tmp_path / "none.json"), "--out-dir", str(fresh)]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'none.json'}: no such file (the Yelp Dataset Challenge's " \
                                      "review.json)\n"  # one line: no progress bar counting nothing first


@pytest.mark.parametrize("args,message", [
    (["--out-dir", "{tmp}/file"], "error: --out-dir {tmp}/file: exists and is not a folder"),
    (["--out-dir", "{tmp}/file/sub"], "error: --out-dir {tmp}/file/sub: cannot make the folder: Not a directory"),
    (["--out-dir", "{tmp}/out", "--review-json", "{tmp}"], "{tmp}: is a directory; expected the Yelp Dataset"),
    (["--out-dir", "{tmp}/out", "--train", "0"], "argument --train: expected a number of examples (an int >= 1)"),
    (["--out-dir", "{tmp}/out", "--valid", "0"], "argument --valid: expected a number of examples (an int >= 1)"),
])
def test_the_command_names_a_bad_output_folder_or_size(args, message, tmp_path, capsys):
    from coda_exp.commands import run_command

    (tmp_path / "file").write_text("a file")
    argv = ["--review-json", str(YELP / "review.json"), *[a.format(tmp=tmp_path) for a in args], "--no-progress"]
    try:
        status = run_command("yelp-split", argv)
    except SystemExit as stop:  # argparse's usage error
        status = stop.code
    assert status == 2
    err = capsys.readouterr().err
    assert message.format(tmp=tmp_path) in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs a /proc filesystem")
def test_the_command_names_a_folder_it_cannot_make(tmp_path, capsys):
    from coda_exp.commands import run_command

    assert run_command("yelp-split", ["--review-json", str(YELP / "review.json"), "--out-dir", "/proc/forbidden"]) == 2
    assert capsys.readouterr().err.startswith("error: --out-dir /proc/forbidden: cannot make the folder: ")
