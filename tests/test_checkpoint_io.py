"""coda_exp.checkpoint_io: training checkpoints written whole beside their target, and a full disk as one message (the
log file's too: coda_exp.run_folder.LogFile)."""

from __future__ import annotations

import errno
import os

import pytest
import torch

from coda_exp.checkpoint_io import AtomicCheckpointIO, disk_full, peer_lost, write_failed
from coda_exp.run_folder import OutputDirError


def test_a_checkpoint_is_written_in_its_own_folder_and_loads(tmp_path, monkeypatch):
    """No temporary file in the system's temporary folder (Lightning's fsspec transaction puts one there and moves
    it across file systems, a copy that a kill or a full disk cuts short)."""
    import tempfile

    made = []
    real = tempfile.mkstemp
    monkeypatch.setattr(tempfile, "mkstemp", lambda *a, **k: made.append(k.get("dir")) or real(*a, **k))
    io = AtomicCheckpointIO()
    path = tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint({"step": 3, "w": torch.arange(4.0)}, path)
    assert made == [path.parent] and sorted(os.listdir(path.parent)) == ["last.ckpt"]
    assert io.load_checkpoint(path)["step"] == 3


def test_a_full_disk_leaves_the_previous_checkpoint_whole_and_names_the_file(tmp_path, monkeypatch):
    """torch reports the failed write as a RuntimeError whose context is the OSError: it comes back as that OSError,
    naming the checkpoint; the old checkpoint is untouched and no partial file is left."""
    io = AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint({"step": 1}, path)
    before = path.read_bytes()

    def full(obj, f):
        f.write(b"partial")
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")  # as torch: context

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(OSError) as err:
        io.save_checkpoint({"step": 2}, path)
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["last.ckpt"]


def test_disk_full_is_a_users_error_naming_the_file_and_the_checkpoint_to_resume_from(tmp_path):
    (tmp_path / "last.ckpt").write_bytes(b"x")
    mine = disk_full(OSError(errno.EDQUOT, "Disk quota exceeded", "/runs/a/epoch3.ckpt"), tmp_path)
    assert isinstance(mine, OutputDirError)
    assert str(mine).startswith("Disk quota exceeded writing /runs/a/epoch3.ckpt: free space on that disk")
    assert str(mine).endswith(f"then resume with ckpt_path={tmp_path / 'last.ckpt'}")
    none_yet = disk_full(OSError(errno.ENOSPC, "No space left on device", "x"), tmp_path / "empty")
    assert str(none_yet).endswith("then run it again (it saved no checkpoint)")
    too_big = disk_full(OSError(errno.EFBIG, "File too large", "/runs/a/last.ckpt"), tmp_path)  # ulimit -f
    assert str(too_big).startswith("File too large writing /runs/a/last.ckpt: raise the file-size limit (ulimit -f)")
    assert disk_full(OSError(errno.EACCES, "Permission denied", "x"), tmp_path) is None  # not a full disk
    assert disk_full(RuntimeError("a bug"), tmp_path) is None


def _log_three_lines(handler, name: str) -> None:
    """Three warnings through a logger of its own whose one handler is ``handler``, closed after."""
    import logging

    logger = logging.getLogger(name)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        for i in range(3):
            logger.warning("line %d", i)
    finally:
        logger.removeHandler(handler)
        handler.close()


def test_a_full_disk_under_the_log_file_is_one_line_not_a_traceback_per_log_line(tmp_path, capsys):
    """train.log (Hydra's job log file and the relocated run's): Python's logging printed "--- Logging error ---" and
    a traceback for every line it could not write; the run's own handler says it once and the console goes on."""
    from coda_exp.run_folder import LogFile

    handler = LogFile(tmp_path / "train.log", mode="a", encoding="utf-8")

    def full(text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    handler.stream.write = full
    _log_three_lines(handler, "coda_exp.test_full_log")
    err = capsys.readouterr().err
    assert err.strip() == (f"log file {tmp_path / 'train.log'}: cannot write ({os.strerror(errno.ENOSPC)}); its "
                           "lines stop here, the console goes on")


def test_a_log_file_that_cannot_be_opened_any_more_is_one_line_not_a_traceback(tmp_path, capsys):
    """The run folder made read-only mid-run: FileHandler.emit (re)opening train.log raised the OSError through
    the logging call itself (a traceback out of log.exception / Hydra's job end)."""
    from coda_exp.run_folder import LogFile

    handler = LogFile(tmp_path / "gone" / "train.log", mode="a", encoding="utf-8", delay=True)  # opened at emit
    _log_three_lines(handler, "coda_exp.test_ro_log")
    assert capsys.readouterr().err.count("its lines stop here, the console goes on") == 1


def test_a_run_folder_made_read_only_mid_run_is_one_message_naming_the_file_and_what_was_saved(make_cfg, tmp_path,
                                                                                              monkeypatch):
    """A CSV logger's metrics.csv that could not be written any more ended the run with an OSError traceback
    (exit 1); it is one OutputDirError (exit 2) naming the file and the checkpoint to resume from, which stays."""
    from pytorch_lightning.loggers.csv_logs import ExperimentWriter

    from coda_exp.pipeline import run

    def read_only(self):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), self.metrics_file_path)

    monkeypatch.setattr(ExperimentWriter, "save", read_only)
    with pytest.raises(OutputDirError) as err:
        run(make_cfg("task=snli", "scale=fixture", "task.epochs=2", "logger=csv", "trainer.log_every_n_steps=1"))
    folder = tmp_path / "run"
    assert str(err.value).startswith(f"{os.strerror(errno.EROFS)} writing {folder}/csv/version_0/metrics.csv: the "
                                     f"run folder {folder} cannot be written any more; ")
    last = folder / "checkpoints" / "last.ckpt"
    assert (f"then resume with ckpt_path={last}" in str(err.value)) == last.is_file()
    elsewhere = OSError(errno.EROFS, os.strerror(errno.EROFS), str(tmp_path / "data" / "x"))
    assert write_failed(elsewhere, folder) is None  # not the run folder's: not this message
    assert write_failed(OSError(errno.EACCES, "Permission denied", str(folder / "x")), folder) is not None
    assert write_failed(RuntimeError("a bug"), folder) is None


def test_hydras_log_file_is_the_runs_own_handler(make_cfg):
    from hydra.core.hydra_config import HydraConfig

    make_cfg("task=snli", "scale=fixture")
    assert HydraConfig.get().job_logging.handlers.file["class"] == "coda_exp.run_folder.LogFile"


def test_a_second_ctrl_c_during_the_write_stops_at_once_leaving_the_previous_checkpoint(tmp_path, monkeypatch):
    """A Ctrl-C inside torch's writer came out as RuntimeError "unexpected pos" (a traceback, exit 1): it is the
    KeyboardInterrupt it was (the pipeline's stop at once, exit 130), the old checkpoint untouched, no partial file."""
    import signal

    from tests.e2e.helpers import CtrlCMidWrite

    io = AtomicCheckpointIO()
    path = tmp_path / "interrupted.ckpt"
    io.save_checkpoint({"step": 1}, path)
    before = path.read_bytes()
    real_save = torch.save

    monkeypatch.setattr(torch, "save", lambda obj, f: real_save(obj, CtrlCMidWrite(f)))
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt) as err:
            io.save_checkpoint({"step": 2, "weights": torch.zeros(10_000)}, path)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert err.value.__suppress_context__  # no "unexpected pos" traceback behind it
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["interrupted.ckpt"]


def test_a_ddp_rank_that_died_gets_the_resume_line_its_surviving_checkpoint_allows(make_cfg, tmp_path, caplog,
                                                                                   monkeypatch):
    """A rank killed mid-run left the main process with gloo's traceback alone, although last.ckpt survived."""
    from coda_exp.pipeline import run

    folder = tmp_path / "run"
    lost = RuntimeError("[../gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:10667: Connection reset by peer")
    assert peer_lost(RuntimeError("shape mismatch"), folder) is None

    def train(cfg, start, left=None, made=None):
        import torch

        (folder / "checkpoints").mkdir(parents=True)
        torch.save({"global_step": 3, "state_dict": {}}, folder / "checkpoints" / "last.ckpt")
        raise lost

    monkeypatch.setattr("coda_exp.pipeline._train_and_record", train)
    with pytest.raises(RuntimeError):
        run(make_cfg("task=snli", "scale=fixture"))
    assert ("a process of this distributed run lost its peers (RuntimeError): another rank stopped (killed, out of "
            "memory? its log says why); the checkpoints written so far are kept: resume with "
            f"ckpt_path={folder / 'checkpoints' / 'last.ckpt'} (step 3)") in caplog.text
    # a last.ckpt cut short is no checkpoint to resume from: the latest one that can be read is named (resume_points)
    (folder / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert "it saved no checkpoint yet" in peer_lost(lost, folder)


def test_a_checkpoint_damaged_in_place_is_named_before_a_run_trains_on_it(tmp_path):
    """4 KB overwritten inside last.ckpt, its size unchanged: torch.load checks no CRC, so the resumed run trained on
    the damaged weights (and was recorded as diverged); the check before a resume reads every entry's CRC."""
    import torch

    from coda_exp.checkpoint_avg import CheckpointError, load_checkpoint
    from coda_exp.run_checks import check_checkpoint_fits

    model = torch.nn.Linear(64, 64)
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": model.state_dict(), "global_step": 7}, path)
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle: middle + 4096] = bytes(4096)
    path.write_bytes(bytes(data))
    load_checkpoint(path)  # torch.load reads it (the damage is in the weights)
    with pytest.raises(CheckpointError, match=r"last\.ckpt: damaged \(its entry .* fails the archive's CRC check\)"):
        load_checkpoint(path, verify=True)
    with pytest.raises(CheckpointError, match="damaged"):
        check_checkpoint_fits(str(path), model)
