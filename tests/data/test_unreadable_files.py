"""A data or embeddings file this user cannot read is one DataError naming it (``<file>: cannot be read (permission
denied)``), found when the data folder's files are checked, before a run starts (``Reader.local_files``, what
``coda_exp.sweep_data.data_problem`` asks), and translated wherever a file is opened (also inside the datasets
library's generator, which wrapped the PermissionError in a DatasetGenerationError: four tracebacks, exit 1).

The tests run as root, who reads every file whatever its mode, so the refusal is the mocked ``open`` of one path."""

from __future__ import annotations

import builtins
import errno
import gzip
import shutil

import pytest

from coda_exp.data import DataError, PairDataModule, TextClassificationDataModule, get_reader
from coda_exp.data.common import base, errors, files
from coda_exp.data.common.vectors_file import VectorsFile
from tests import FIXTURES


@pytest.fixture
def refuse(monkeypatch):
    """``refuse(path)``: opening ``path`` (``open``, ``os.scandir`` for a folder) raises PermissionError from now on,
    as for a user without the read permission; every other path opens as before."""
    real_open, real_scandir = builtins.open, errors.os.scandir
    refused = set()

    def check(path):
        if str(path) in refused:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))

    def fake_open(path, *args, **kwargs):
        check(path)
        return real_open(path, *args, **kwargs)

    def fake_scandir(path="."):
        check(path)
        return real_scandir(path)

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(errors.os, "scandir", fake_scandir)
    return lambda path: refused.add(str(path))


def snli_copy(tmp_path):
    return shutil.copytree(FIXTURES / "snli", tmp_path / "snli")


def test_an_unreadable_data_file_is_refused_when_the_folder_is_checked(tmp_path, refuse):
    """The probe's case: ``chmod 000 snli_1.0_dev.jsonl``. The folder check before the run (every split's
    ``local_files``) names it; the data module, which reads it, too, before any training."""
    d = snli_copy(tmp_path)
    dev = d / "snli_1.0_dev.jsonl"
    refuse(dev)
    reader = get_reader("snli")
    reader.local_files(d, "train")  # the other files are read as before
    with pytest.raises(DataError) as e:
        reader.local_files(d, "validation")
    assert str(e.value) == f"{dev}: cannot be read (permission denied); snli reads it: make it readable to this user " \
                           f"(ls -l {dev})"
    with pytest.raises(DataError, match=rf"^{dev}: cannot be read \(permission denied\)"):
        PairDataModule("snli", dir=str(d), cache_dir=str(tmp_path / "cache")).setup()


@pytest.mark.parametrize("name, fixture, split, relative", [
    ("scitail", "scitail", "validation", "tsv_format/scitail_1.0_dev.tsv"),  # found by its own layout search
    ("trecqa", "trecqa", "test", "TEST.xml"),
    ("wikiqa", "wikiqa", "test", "WikiQA-test.tsv"),
])
def test_every_pair_readers_files_are_checked_before_the_run(tmp_path, refuse, name, fixture, split, relative):
    d = shutil.copytree(FIXTURES / fixture, tmp_path / fixture)
    refuse(d / relative)
    with pytest.raises(DataError, match=rf"^{d / relative}: cannot be read \(permission denied\); {name} reads it"):
        get_reader(name).local_files(d, split)


def test_an_unreadable_imdb_folder_is_refused_before_the_run(tmp_path, refuse):
    d = shutil.copytree(FIXTURES / "imdb", tmp_path / "imdb")
    folder = next(p for p in sorted(d.rglob("neg")) if p.parent.name == "test")
    refuse(folder)
    with pytest.raises(DataError, match=rf"^{folder}: cannot be read \(permission denied\); imdb reads it"):
        get_reader("imdb").local_files(d, "test")
    with pytest.raises(DataError, match=rf"^{folder}: cannot be read \(permission denied\)"):
        TextClassificationDataModule("imdb", dir=str(d), cache_dir=str(tmp_path / "cache"),
                                     bpe_vocab_size=100).setup()


def test_a_file_that_cannot_be_opened_where_it_is_read_is_a_data_error(tmp_path, refuse):
    """Where no folder check ran first (a file read directly): the open itself is translated."""
    path = tmp_path / "lines.txt"
    path.write_text("a\nb\n")
    refuse(path)
    with pytest.raises(DataError) as e:
        files.read_lines(path, "validation")
    assert str(e.value) == (f"{path}: cannot be read (permission denied) (read for the validation split); expected "
                            f"a file this user can read (ls -l {path})")


def test_a_disk_error_in_the_middle_of_a_file_names_it_and_the_line(tmp_path, monkeypatch):
    path = tmp_path / "lines.txt"
    path.write_text("a\nb\n")

    class Failing:
        def __init__(self):
            self.lines = iter([b"a\n"])

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def __iter__(self):
            return self

        def __next__(self):
            for line in self.lines:
                return line
            raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(files, "_open_binary", lambda path, split=None: Failing())
    with pytest.raises(DataError, match=rf"^{path}: cannot be read after line 1 \(input/output error\) \(read for the "
                                        "train split\\)$"):
        files.read_lines(path, "train")


def test_an_oserror_inside_the_datasets_generator_is_a_data_error_naming_the_file(tmp_path):
    """Whatever a reader opens itself: the PermissionError raised inside ``Dataset.from_generator`` came out as
    datasets' DatasetGenerationError and its traceback; it is a DataError naming the file and the split."""

    class Unreadable:
        name = "fake"

        def read(self, split, directory):
            yield {"text_a": "a", "text_b": "b", "label": 0, "group": ""}
            raise PermissionError(errno.EACCES, "Permission denied", "/data/fake/dev.txt")

        def source_key(self, split, directory):
            return "fake-unreadable"

    from coda_exp.data.pair.datamodule import FEATURES

    with pytest.raises(DataError) as e:
        base.cached_split(Unreadable(), "validation", str(tmp_path), tmp_path / "cache", FEATURES, "test-v1")
    assert str(e.value) == "/data/fake/dev.txt: cannot be read (permission denied) (read for the validation split)"


def test_an_unreadable_embeddings_file_is_a_data_error(tmp_path, refuse):
    """The probe's ``data.embeddings.path=<unreadable file>``: PermissionError in vectors_file._open, exit 1."""
    path = tmp_path / "vectors.txt"
    path.write_text("the 0.1 0.2\ncat 0.3 0.4\n")
    refuse(path)
    with pytest.raises(DataError) as e:
        VectorsFile.open(path)
    assert str(e.value).startswith(f"embeddings file '{path}' cannot be read (permission denied); set "
                                   "data.embeddings.path to a GloVe or word2vec text file")


def test_a_cut_short_gzip_embeddings_file_names_the_line_it_ends_after(tmp_path):
    path = tmp_path / "vectors.txt.gz"
    data = gzip.compress("".join(f"w{i} {i}.5 {i}.25\n" for i in range(2000)).encode())
    path.write_bytes(data[: len(data) // 2])
    vectors = VectorsFile.open(path)
    with pytest.raises(DataError, match=rf"^embeddings file '{path}' cannot be read after line \d+ \(EOFError: "):
        list(vectors.lines())


def test_the_reason_of_an_oserror_in_words():
    assert errors.os_reason(PermissionError(errno.EACCES, "Permission denied")) == "permission denied"
    assert errors.os_reason(PermissionError(errno.EPERM, "Operation not permitted")) == "permission denied"
    assert errors.os_reason(OSError(errno.EIO, "Input/output error")) == "input/output error"
