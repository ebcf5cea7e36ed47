"""Every reader names the file (and line) for an empty file and for bytes that are not UTF-8, for the training
file and for an evaluation file (whose message must not say "train"), through the data module, before training."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from coda_exp.data import (
    AlgoLispDataModule,
    DataError,
    IWSLTDataModule,
    MLUDataModule,
    PairDataModule,
    TextClassificationDataModule,
)
from tests import FIXTURES


def pair(name, **kw):
    return lambda d, cache: PairDataModule(name, dir=str(d), cache_dir=str(cache), **kw)


def text(name):
    return lambda d, cache: TextClassificationDataModule(name, dir=str(d), cache_dir=str(cache), bpe_vocab_size=100)


# reader: (fixture folder, data module factory, training file, evaluation split, its file)
CASES = {
    "snli": ("snli", pair("snli"), "snli_1.0_train.jsonl", "validation", "snli_1.0_dev.jsonl"),
    "mnli": ("mnli", pair("mnli", validation_from_train=0.2), "multinli_1.0_train.jsonl", "test_matched",
             "multinli_1.0_dev_matched.jsonl"),
    "scitail": ("scitail", pair("scitail"), "tsv_format/scitail_1.0_train.tsv", "validation",
                "tsv_format/scitail_1.0_dev.tsv"),
    "dnli": ("dnli", pair("dnli"), "dialogue_nli_train.jsonl", "validation", "dialogue_nli_dev.jsonl"),
    "wikiqa": ("wikiqa", pair("wikiqa", ranking=True), "WikiQA-train.tsv", "validation", "WikiQA-dev.tsv"),
    "trecqa": ("trecqa", pair("trecqa", ranking=True), "TRAIN-ALL.xml", "validation", "DEV.xml"),
    "udc": ("udc", pair("udc", ranking=True, eval_protocol="raw"), "train.csv", "validation", "valid.csv"),
    "imdb": ("imdb", text("imdb"), "aclImdb/train/neg/0_2.txt", "test", "aclImdb/test/neg/0_3.txt"),
    "sst": ("sst", text("sst2"), "stsa.binary.train", "validation", "stsa.binary.dev"),
    "yelp": ("yelp", text("yelp"), "yelp_train_500k", "test", "yelp_test_2000"),
    "iwslt": ("iwslt15_envi", lambda d, cache: IWSLTDataModule(dir=str(d), cache_dir=str(cache)), "train.vi",
              "validation", "tst2012.vi"),
    "algolisp": ("algolisp", lambda d, cache: AlgoLispDataModule(dir=str(d), cache_dir=str(cache)),
                 "metaset3.train.jsonl", "validation", "metaset3.dev.jsonl"),
    "mlu": ("mlu", lambda d, cache: MLUDataModule(10**6, 10**6, 10**6, dir=str(d), cache_dir=str(cache)),
            "train.txt", "validation", "dev.txt"),
}


def broken_copy(tmp_path: Path, reader: str, which: str, fault: str) -> tuple[Path, Path, int]:
    """A copy of the fixture whose training (``which="train"``) or evaluation file is emptied or given a latin-1
    byte; returns (folder, the broken file, the line of the byte)."""
    folder, _, train_file, _, eval_file = CASES[reader]
    d = tmp_path / "data"
    shutil.copytree(FIXTURES / folder, d)
    path = d / (train_file if which == "train" else eval_file)
    if fault == "empty":
        path.write_bytes(b"")
        return d, path, 0
    lines = path.read_bytes().split(b"\n")
    line = min(2, len(lines))  # the first data row (after a header) where there is one
    lines[line - 1] = b"caf\xe9 " + lines[line - 1]  # "café" in latin-1
    path.write_bytes(b"\n".join(lines))
    return d, path, line


@pytest.mark.parametrize("fault", ["empty", "latin1"])
@pytest.mark.parametrize("which", ["train", "eval"])
@pytest.mark.parametrize("reader", sorted(CASES))
def test_bad_files_are_named_with_line_and_split(tmp_path, reader, which, fault):
    d, path, line = broken_copy(tmp_path, reader, which, fault)
    split = "train" if which == "train" else CASES[reader][3]
    dm = CASES[reader][1](d, tmp_path / "cache")
    with pytest.raises(DataError) as e:
        dm.setup()
    msg = str(e.value)
    where = f"{path}:{line}: " if fault == "latin1" else f"{path}: empty file"
    assert where in msg, msg
    assert "not UTF-8" in msg if fault == "latin1" else "expected" in msg
    assert f"the {split} split" in msg
    if which == "eval":
        assert "train" not in msg.replace(str(tmp_path), "<tmp>"), msg


@pytest.mark.parametrize("fault", ["truncated", "not gzip"])
def test_a_broken_gzip_file_is_named(tmp_path, fault):
    """A truncated ``.json.gz`` (EOFError) or a plain file named ``.gz`` (BadGzipFile) used to surface as a bare
    exception naming no file (issue 20)."""
    from coda_exp.data.span.readers import get_span_reader

    d = tmp_path / "quasart"
    shutil.copytree(FIXTURES / "quasart", d)
    path = d / "questions" / "dev_questions.json.gz"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if fault == "truncated" else b'{"uid": 1}\n')
    with pytest.raises(DataError, match="cannot decompress") as err:
        list(get_span_reader("quasart").read("validation", d))
    assert str(path) in str(err.value) and "validation split" in str(err.value)


# imdb reads folders; trecqa and scitail have a second layout to fall back on
@pytest.mark.parametrize("reader", sorted(set(CASES) - {"imdb", "trecqa", "scitail"}))
def test_a_directory_in_place_of_a_split_file_says_so(tmp_path, reader):
    """It used to be reported as missing ("lacks snli_1.0_dev.jsonl")."""
    folder, factory, _, _, eval_file = CASES[reader]
    d = tmp_path / "data"
    shutil.copytree(FIXTURES / folder, d)
    (d / eval_file).unlink()
    (d / eval_file).mkdir()
    with pytest.raises(DataError, match=f"{d / eval_file}:? is a directory") as e:
        factory(d, tmp_path / "cache").setup()
    assert "lacks" not in str(e.value)


@pytest.mark.parametrize("reader", ["snli", "scitail", "trecqa", "imdb", "any"])
def test_a_data_dir_that_is_a_file_is_said_to_be_one(tmp_path, reader):
    """``data.dir=<a file>`` said the directory "does not exist"; a missing one still does."""
    from coda_exp.data.common.errors import require_files
    from coda_exp.data.pair.readers import get_pair_reader
    from coda_exp.data.text.readers import get_text_reader

    read = {"imdb": lambda d: get_text_reader("imdb").read("train", str(d)),
            "any": lambda d: [require_files("mlu", d, ["train.txt"], ["train.txt"])]}.get(
        reader, lambda d: list(get_pair_reader(reader).read("train", str(d))))
    a_file = tmp_path / "snli_1.0_train.jsonl"
    a_file.write_text("{}\n")
    with pytest.raises(DataError, match=rf"data directory '{a_file}' is a file, not a folder"):
        list(read(a_file))
    with pytest.raises(DataError, match=rf"data directory '{tmp_path / 'nope'}' does not exist"):
        list(read(tmp_path / "nope"))


@pytest.mark.parametrize("reader", sorted(set(CASES) - {"imdb", "trecqa", "scitail"}))  # those look inside already
def test_files_one_folder_down_are_named_as_the_data_dir_meant(tmp_path, reader):
    """``data.dir=/tmp/parent`` where the files lie in ``/tmp/parent/snli_1.0/`` (the zip's folder) said only that it
    "lacks" them: now it names the folder that holds them."""
    folder, factory, _, _, _ = CASES[reader]
    parent = tmp_path / "parent"
    shutil.copytree(FIXTURES / folder, parent / "unzipped")
    (parent / "other").mkdir()
    with pytest.raises(DataError, match="lacks") as e:
        factory(parent, tmp_path / "cache").setup()
    assert f"(did you mean data.dir={parent / 'unzipped'}? it holds them)" in str(e.value)


def test_a_missing_file_is_named_with_the_other_splits_missing_files(tmp_path):
    """Each split checks its own file (an evaluation reads one): a training folder lacking all three named only the
    training file, and the user fixed the folder one file at a time."""
    from coda_exp.data.common.errors import DataError, require_files

    expected = ["train.txt", "dev.txt", "test.txt"]
    with pytest.raises(DataError, match=r"lacks train.txt \(and dev.txt, test.txt, which other splits read\)"):
        require_files("mlu", tmp_path, ["train.txt"], expected)
    (tmp_path / "dev.txt").write_text("x\n")
    with pytest.raises(DataError, match=r"lacks train.txt \(and test.txt, which other splits read\)"):
        require_files("mlu", tmp_path, ["train.txt"], expected)


@pytest.mark.parametrize("task, keep, other", [
    ("scitail", "tsv_format/scitail_1.0_train.tsv", "snli_format/scitail_1.0_dev.txt"),
    ("trecqa", "TRAIN-ALL.xml", "toks/raw-dev"),
])
def test_a_folder_of_mixed_layouts_is_refused_and_a_lone_split_is_read(tmp_path, task, keep, other):
    """SciTail / TrecQA come in two layouts: a complete set in one is read; a folder with the training file in one
    layout and the dev file only in the other was read in two formats; a folder holding one split alone (an
    evaluation's) is read in its layout."""
    from coda_exp.data.common.errors import DataError
    from coda_exp.data.common.readers import READERS

    mixed = tmp_path / "mixed"
    for rel in (keep, other):
        src = FIXTURES / task / rel
        dst = mixed / (Path(rel).name if task == "trecqa" else rel)
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    with pytest.raises(DataError):
        READERS[task].path(mixed, "train")
    alone = tmp_path / "alone"
    dst = alone / (Path(keep).name if task == "trecqa" else keep)
    dst.parent.mkdir(parents=True)
    shutil.copy(FIXTURES / task / keep, dst)
    assert READERS[task].path(alone, "train") == dst
