"""What a vectors file is (the record's ``vectors``): its name, dimension, size and a hash of its head."""

from __future__ import annotations

import pytest

from coda_exp.data.common.embeddings import vectors_identity
from coda_exp.data.common.errors import DataError


def test_identity_of_glove_and_word2vec_text_files(tmp_path):
    glove = tmp_path / "glove.840B.300d.txt"
    glove.write_text("the " + " ".join(["0.1"] * 300) + "\n", encoding="utf-8")
    ident = vectors_identity(glove)
    assert ident["name"] == "glove.840B.300d" and ident["file"] == glove.name and ident["dim"] == 300
    assert ident["count"] is None and ident["bytes"] == glove.stat().st_size and len(ident["sha256_head"]) == 16
    moved = tmp_path / "elsewhere" / glove.name
    moved.parent.mkdir()
    moved.write_bytes(glove.read_bytes())
    assert vectors_identity(moved) == ident  # the same file anywhere
    w2v = tmp_path / "GoogleNews-vectors-negative300.txt"
    w2v.write_text("2 3\nthe 1 2 3\ncat 4 5 6\n", encoding="utf-8")
    assert vectors_identity(w2v) | {"sha256_head": "", "bytes": 0} == {
        "name": "GoogleNews-vectors-negative300", "file": w2v.name, "dim": 3, "count": 2, "bytes": 0,
        "sha256_head": ""}
    changed = tmp_path / "changed" / glove.name
    changed.parent.mkdir()
    changed.write_text("the " + " ".join(["0.2"] * 300) + "\n", encoding="utf-8")
    assert vectors_identity(changed)["sha256_head"] != ident["sha256_head"]


def test_no_path_and_a_missing_file():
    assert vectors_identity(None) is None and vectors_identity("") is None
    with pytest.raises(DataError, match="embeddings file '/no/such.txt' does not exist"):
        vectors_identity("/no/such.txt")


def _vocab():
    from coda_exp.data.common.vocab import Vocab

    return Vocab(["the", "cat", "sat", "2013"])


def test_vector_lines_are_checked_against_one_dimension(tmp_path):
    from coda_exp.data.common.embeddings import load_pretrained

    v = tmp_path / "v.txt"
    rows = ["the 0.1 0.2 0.3", "cat 1 2 3", "sat 4 5 6", "2013 7 8 9", ". . . 9 9 9", "at name@x.com 1 1 1"]
    v.write_text("\n".join(rows) + "\n")
    matrix, found = load_pretrained(v, _vocab())  # a numeric word and words with spaces are fine
    assert found == 4 and matrix.shape[1] == 3
    cases = {  # line -> (replacement, message)
        1: ("the 0.1 0.2", r"v.txt:1: 2 numbers after the word 'the', expected 3 \(the dimension most of lines 1-6"),
        3: ("sat 4 5 6 7", r"v.txt:3: 4 numbers after the word 'sat', expected 3"),
        2: ("cat 1 nan 3", r"v.txt:2: component 2 of the vector of 'cat' is nan \(expected a finite number"),
        5: (". . . 9 -inf 9", r"v.txt:5: component 2 of the vector of '. . .' is -inf"),  # a word not in the vocab
    }
    for lineno, (row, message) in cases.items():
        v.write_text("\n".join(rows[:lineno - 1] + [row] + rows[lineno:]) + "\n")
        with pytest.raises(DataError, match=message):
            load_pretrained(v, _vocab())
    v.write_text("4 3\n" + "\n".join(r + " 0 0" for r in rows[:4]) + "\n")  # the header's size is wrong
    with pytest.raises(DataError, match=r"v.txt:1: the word2vec header says 4 vectors of dimension 3, but most "
                                        r"of lines 2-5 have 5 numbers"):
        load_pretrained(v, _vocab())


def test_vectors_file_forms_and_their_messages(tmp_path, caplog):
    import gzip

    from coda_exp.data.common.embeddings import load_pretrained

    gz = tmp_path / "glove.txt.gz"
    with gzip.open(gz, "wt") as f:
        f.write("2 2\nthe 1 2\ncat 3 4\n")
    assert load_pretrained(gz, _vocab())[1] == 2 and vectors_identity(gz)["dim"] == 2
    messages = {
        "empty.txt": (b"\n\n", r"empty.txt: empty file; expected a GloVe or word2vec text file"),
        "tabs.txt": (b"the\t1\t2\ncat\t3\t4\n", r"tabs.txt:1: fields separated by tabs"),
        "w.bin": (b"2 2\n\x00\x01", r"w.bin: binary word2vec \(.bin\) is not supported"),
        "latin.txt": (b"caf\xe9 1 2\n", r"latin.txt:1: not UTF-8 text"),
        "header.txt": (b"2 3\n", r"header.txt: a word2vec header and no vector"),
    }
    for name, (data, message) in messages.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(DataError, match=message):
            load_pretrained(tmp_path / name, _vocab())
    with pytest.raises(DataError, match=r"embeddings file '.*' is a directory; set data.embeddings.path"):
        load_pretrained(tmp_path, _vocab())
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"the 1 2\ncaf\xe9 3 4\ncat 5 6\nna\xefve 7 8\n")
    assert load_pretrained(bad, _vocab())[1] == 2
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "UTF-8" in r.getMessage()]
    assert warning.startswith(f"{bad}:2: 2 line(s) of the embeddings file hold bytes that are not UTF-8")


def test_the_coverage_log_counts_the_words_over_the_same_words(tmp_path, caplog):
    """It printed "60 of 64 vocabulary words found (100.0%)": the count over the words, the total with the 4
    special tokens, the percentage over the words."""
    import logging

    from coda_exp.data.common.embeddings import load_pretrained

    v = tmp_path / "v.txt"
    v.write_text("the 1 2\ncat 3 4\nsat 5 6\n2013 7 8\n<unk> 9 9\n")  # every word, and <unk> (not counted)
    with caplog.at_level(logging.INFO, logger="coda_exp.data.common.embeddings"):
        assert load_pretrained(v, _vocab())[1] == 5
    assert f"embeddings {v}: 4 of 4 vocabulary words found (100.0%; the 4 special tokens apart), dim 2" in caplog.text
    v.write_text("the 1 2\nelse 3 4\n")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="coda_exp.data.common.embeddings"):
        load_pretrained(v, _vocab())
    assert "1 of 4 vocabulary words found (25.0%" in caplog.text
    assert "have a vector for only 1 of the 4 vocabulary words (25.0%)" in caplog.text
