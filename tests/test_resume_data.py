"""coda_exp.resume_data: a run resumed with another data.dir is compared by the folder's files (name, size, sampled
bytes), so a relocated data folder or checkout resumes and other data is refused (it resumed silently, mixing two datasets in
one curve and one choice of the best checkpoint)."""

from __future__ import annotations

import shutil

import pytest
from omegaconf import OmegaConf

from coda_exp.checkpoint_avg import CheckpointError
from coda_exp.resume_data import CHECKPOINT_DATA_FILES, files_of
from coda_exp.run_checks import check_same_configuration
from coda_exp.tasks.base import CHECKPOINT_CONFIG


def _checkpoint(cfg, data_dir, carried=True):
    trained = OmegaConf.to_container(cfg, resolve=True)
    trained["data"]["dir"] = str(data_dir)
    return {CHECKPOINT_CONFIG: trained, **({CHECKPOINT_DATA_FILES: files_of(data_dir)} if carried else {})}


def test_another_data_folder_is_refused_unless_it_holds_the_same_files(make_cfg, tmp_path, caplog):
    cfg = make_cfg("task=snli", "scale=fixture", "ckpt_path=x.ckpt")
    trained_on = tmp_path / "old" / "snli"
    shutil.copytree(cfg.data.dir, trained_on)
    ckpt = _checkpoint(cfg, trained_on)
    check_same_configuration(cfg, ckpt)  # the same files elsewhere (a moved checkout): resumes
    other = tmp_path / "other"
    shutil.copytree(cfg.data.dir, other)
    dev = next(p for p in sorted(other.rglob("*")) if p.is_file() and "dev" in p.name)
    original = dev.read_text()
    dev.write_text(original + original)  # a bigger dev set
    cfg.data.dir = str(other)
    with pytest.raises(CheckpointError, match=rf"another configuration than this run's \(data.dir: {trained_on} "
                                              rf"there, {other} here, other files \({dev.relative_to(other)}: \d+ "
                                              r"bytes there, \d+ here\)"):
        check_same_configuration(cfg, ckpt)
    dev.write_text(original[::-1])  # the same size, other bytes (a regenerated set)
    dev_name = dev.relative_to(other)
    with pytest.raises(CheckpointError, match=rf"other files \({dev_name}: other bytes of the same size"):
        check_same_configuration(cfg, ckpt)
    old_style = {**ckpt, CHECKPOINT_DATA_FILES: {k: v[0] for k, v in ckpt[CHECKPOINT_DATA_FILES].items()}}
    check_same_configuration(cfg, old_style)  # a checkpoint that carried sizes alone compares sizes
    dev.write_text(dev.read_text() + "x")
    with pytest.raises(CheckpointError, match=rf"{dev_name}: \d+ bytes there, \d+ here"):
        check_same_configuration(cfg, old_style)
    shutil.rmtree(trained_on)  # the data folder moved away: its files still ride in the checkpoint
    with pytest.raises(CheckpointError, match="other files"):
        check_same_configuration(cfg, ckpt)
    cfg.resume = "force"
    check_same_configuration(cfg, ckpt)
    assert "resume=force: resuming it under this run's" in caplog.text
    cfg.resume = None
    check_same_configuration(cfg, _checkpoint(cfg, trained_on, carried=False))  # older checkpoint, folder gone
    assert "cannot be compared with those" in caplog.text


def test_a_job_requeued_on_another_number_of_devices_resumes(make_cfg):
    """The fingerprint's world_size (several processes: another configuration for tables) is not a change of the run
    for a resume: a cluster job requeued on 2 GPUs instead of 4 goes on from its checkpoint."""
    cfg = make_cfg("task=snli", "scale=fixture", "ckpt_path=x.ckpt")
    trained = OmegaConf.to_container(cfg, resolve=True)
    trained["trainer"]["devices"], trained["trainer"]["num_nodes"] = 4, 2
    check_same_configuration(cfg, {CHECKPOINT_CONFIG: trained})


def test_a_large_file_is_sampled_at_its_start_middle_and_end(tmp_path):
    from coda_exp.resume_data import SAMPLE, sample_hash

    size = 10 * SAMPLE
    data = bytearray(b"a" * size)
    path = tmp_path / "big.txt"
    path.write_bytes(data)
    base = sample_hash(path, size)
    for offset in (0, size // 2, size - 1):  # a byte in each sampled range changes the hash
        changed = bytearray(data)
        changed[offset] = ord("b")
        path.write_bytes(changed)
        assert sample_hash(path, size) != base
    changed = bytearray(data)
    changed[2 * SAMPLE] = ord("b")  # between the samples: not read, as documented
    path.write_bytes(changed)
    assert sample_hash(path, size) == base


def test_only_regular_files_are_read(tmp_path):
    """A FIFO (or another special file) in the data folder is left out: opening it to hash would block."""
    import os

    (tmp_path / "train.txt").write_text("a b c\n")
    os.mkfifo(tmp_path / "pipe")
    assert list(files_of(tmp_path)) == ["train.txt"]


def test_a_resume_on_another_thread_count_says_so(make_cfg, caplog):
    """threads=2 on a threads=1 run's checkpoint resumed without a word, its record stating threads 2 for steps
    computed on one thread too (CPU results depend on the thread counts)."""
    cfg = make_cfg("task=snli", "scale=fixture", "ckpt_path=x.ckpt", "threads=2")
    trained = OmegaConf.to_container(make_cfg("task=snli", "scale=fixture", "threads=1"), resolve=True)
    trained["paths"] = OmegaConf.to_container(cfg.paths, resolve=True)
    check_same_configuration(cfg, {CHECKPOINT_CONFIG: trained})
    assert "x.ckpt was trained with threads=1, this run has threads=2" in caplog.text
    caplog.clear()
    check_same_configuration(cfg, {CHECKPOINT_CONFIG: {**trained, "threads": 2}})
    assert "threads" not in caplog.text
