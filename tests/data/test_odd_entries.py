"""Something in a data file's place that is not a regular file is named for what it is: a symlink loop or a named
pipe in place of ``snli_1.0_dev.jsonl`` said the folder "lacks snli_1.0_dev.jsonl" though the entry is there, and
``data.dir=<a regular file>`` said the folder "does not exist" though it does."""

from __future__ import annotations

import os
import shutil

import pytest

from coda_exp.data import DataError, PairDataModule, get_reader
from coda_exp.data.common import errors, files
from coda_exp.data.common.vectors_file import VectorsFile
from tests import FIXTURES

LOOP = ("is a symbolic link that loops (-> 'snli_1.0_dev.jsonl': to itself, or through a cycle of links), not a "
        "file")
ODD = {  # how to put the entry in place -> what the message says it is
    "loop": (lambda p: os.symlink(p.name, p), LOOP),
    "broken": (lambda p: os.symlink("gone.jsonl", p), "is a broken symbolic link (-> 'gone.jsonl', which does not exist)"),
    "fifo": (lambda p: os.mkfifo(p), "is a named pipe (FIFO), not a regular file"),
}


@pytest.mark.parametrize("kind", sorted(ODD))
def test_an_entry_that_is_not_a_file_is_named_for_what_it_is(tmp_path, kind):
    d = shutil.copytree(FIXTURES / "snli", tmp_path / "snli")
    dev = d / "snli_1.0_dev.jsonl"
    dev.unlink()
    make, what = ODD[kind]
    make(dev)
    with pytest.raises(DataError) as e:  # the check before the run starts (coda_exp.sweep_data.data_problem)
        get_reader("snli").local_files(d, "validation")
    assert str(e.value).startswith(f"snli: {dev} {what}; expected the official file snli_1.0_dev.jsonl there "
                                   "(replace it with the file itself). Expected the official files"), str(e.value)
    assert "lacks" not in str(e.value)
    with pytest.raises(DataError, match=f"^snli: {dev} is "):  # the data module (a FIFO is not opened: no hang)
        PairDataModule("snli", dir=str(d), cache_dir=str(tmp_path / "cache")).setup()
    with pytest.raises(DataError) as e:  # a file read without the folder check
        files.read_lines(dev, "validation")
    assert str(e.value) == f"{dev}: {what} (read for the validation split)"


def test_a_missing_file_still_says_the_folder_lacks_it(tmp_path):
    d = shutil.copytree(FIXTURES / "snli", tmp_path / "snli")
    (d / "snli_1.0_dev.jsonl").unlink()
    with pytest.raises(DataError, match=f"^snli: data directory '{d}' lacks snli_1.0_dev.jsonl. "):
        get_reader("snli").local_files(d, "validation")


def test_a_data_folder_that_is_a_file_or_a_broken_link_says_so(tmp_path):
    file, link = tmp_path / "notes.txt", tmp_path / "data"
    file.write_text("not a folder\n")
    os.symlink(tmp_path / "elsewhere", link)
    assert errors.not_a_folder(file) == "is a file, not a folder"
    assert errors.not_a_folder(link) == f"is a broken symbolic link (-> '{tmp_path / 'elsewhere'}', which does not " \
                                        "exist)"
    assert errors.not_a_folder(tmp_path / "nothing") == "does not exist"
    assert errors.not_a_folder(tmp_path) is None
    with pytest.raises(DataError, match=f"^snli: data directory '{file}' is a file, not a folder. "):
        get_reader("snli").local_files(file, "train")


def test_the_check_before_a_run_says_data_dir_is_a_file(tmp_path):
    """The probe's ``data.dir=<a regular file>``: refused before the run as "does not exist" (coda_exp.sweep_data)."""
    from hydra import compose, initialize_config_dir

    from coda_exp.environment import config_dir
    from coda_exp.sweep_data import data_problem

    file = tmp_path / "env.sh"
    file.write_text("export X=1\n")
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose("train", overrides=["task=snli", f"data.dir={file}"], return_hydra_config=True)
    assert data_problem(cfg).startswith(f"data.dir '{file}' is a file, not a folder: expected a folder holding the "
                                        "official files snli_1.0_train.jsonl, snli_1.0_dev.jsonl")


def test_an_embeddings_path_that_is_a_fifo_or_a_broken_link_says_so(tmp_path):
    fifo, link = tmp_path / "glove.txt", tmp_path / "vectors.txt"
    os.mkfifo(fifo)
    os.symlink("gone.txt", link)
    with pytest.raises(DataError, match=rf"^embeddings file '{fifo}' is a named pipe \(FIFO\), not a regular file; "):
        VectorsFile.open(fifo)
    with pytest.raises(DataError, match=rf"^embeddings file '{link}' is a broken symbolic link \(-> 'gone.txt'"):
        VectorsFile.open(link)


def test_a_symbolic_link_to_a_file_is_read_as_the_file(tmp_path):
    d = shutil.copytree(FIXTURES / "snli", tmp_path / "snli")
    dev = d / "snli_1.0_dev.jsonl"
    dev.rename(tmp_path / "dev.jsonl")
    os.symlink(tmp_path / "dev.jsonl", dev)
    assert errors.odd_entry(dev) is None
    assert get_reader("snli").local_files(d, "validation") == [dev]
