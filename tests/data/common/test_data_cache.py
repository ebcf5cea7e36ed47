"""coda_exp.data.common.data_cache: which errors are a damaged datasets cache, and which folder holds it."""

from __future__ import annotations

import errno

import pyarrow as pa
import pytest

from coda_exp.data.common.data_cache import arrow_error, damaged_folder


def read_cut_short(path):
    """pyarrow reading an IPC stream file cut short: a plain OSError raised inside pyarrow, as datasets reads it."""
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, pa.schema([("x", pa.int64())])) as writer:
        writer.write_table(pa.table({"x": list(range(1000))}))
    path.write_bytes(path.read_bytes()[:700])
    filename = str(path)  # a local the folder is found by, as datasets' own frames hold one
    with pa.memory_map(filename) as source:
        return pa.ipc.open_stream(source).read_all()


def test_a_cut_short_arrow_file_is_the_caches_error_and_names_its_folder(tmp_path):
    folder = tmp_path / "cache" / "datasets" / "generator" / "default-fingerprint=abc"
    (folder / "0.0.0").mkdir(parents=True)
    with pytest.raises(OSError) as e:
        read_cut_short(folder / "0.0.0" / "generator-train.arrow")
    assert arrow_error(e.value) is e.value
    assert damaged_folder(e.value, tmp_path / "cache") == folder
    assert damaged_folder(e.value, tmp_path / "elsewhere") is None  # not this cache's: the message, not a deletion


def test_an_oserror_of_the_data_files_is_not_the_caches():
    """A reader's PermissionError (translated into a DataError naming the file) is never taken for the cache's,
    which would delete the cache and try again."""
    try:
        raise PermissionError(errno.EACCES, "Permission denied", "/data/snli/snli_1.0_dev.jsonl")
    except PermissionError as err:
        assert arrow_error(err) is None
