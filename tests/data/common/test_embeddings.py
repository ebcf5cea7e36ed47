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
