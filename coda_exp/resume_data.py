"""Whether a run resumed with ``ckpt_path=`` reads the data its checkpoint was trained on.

``data.dir`` is where the data lies, not what it is (``coda_exp.fingerprint.OUTPUT_KEYS``): a moved checkout, or a
data folder copied or relocated elsewhere, resumes as before. So the folder's files, by name, size and a hash of
their first, middle and last 64 KiB (:func:`files_of`; never by modification time, which a copy changes: a
regenerated file of the same size differs in its bytes), ride in every checkpoint
(:data:`CHECKPOINT_DATA_FILES`), and a resumed run whose ``data.dir`` differs from the checkpoint's is compared by
them (:func:`data_change`): other files (another dev set, another dataset) are a configuration change, which
``run_checks.check_same_configuration`` refuses (``resume=force`` goes on), and from a finished run's checkpoint
refused even then (``auto_resume.check_not_finished``: its record would take that run's place in the tables). A checkpoint written before they rode
along is compared with its own ``data.dir`` where that folder still exists, else a warning says it cannot be checked.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

# {relative path: [size in bytes, sample hash]} of the files under data.dir (checkpoints before the hash: size alone)
CHECKPOINT_DATA_FILES = "coda_exp.data_files"
MAX_FILES = 10_000  # a folder with more files is not listed (a data folder holds a few; a wrong data.dir, many)
SAMPLE = 64 << 10  # bytes hashed at the start, the middle and the end of each file


def sample_hash(path: Path, size: int) -> str:
    """sha256 of a file's first, middle and last :data:`SAMPLE` bytes (the whole file when it is smaller than
    three of them): a few reads per file however large, so a 10 GB dump costs what a small file does."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= 3 * SAMPLE:
            digest.update(f.read())
        else:
            for offset in (0, (size - SAMPLE) // 2, size - SAMPLE):
                f.seek(offset)
                digest.update(f.read(SAMPLE))
    return digest.hexdigest()[:16]


def files_of(directory) -> dict[str, list] | None:
    """``{path relative to directory: [size, sample hash]}`` of the files under ``directory`` (hidden files and
    folders, such as a cache, left out); None where it is not a folder or holds more than :data:`MAX_FILES` files."""
    if directory is None or not Path(str(directory)).is_dir():
        return None
    root, sizes = Path(str(directory)), {}
    for top, dirs, names in os.walk(root):  # listed first, hashed after: a folder of too many files reads nothing
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in names:
            if name.startswith("."):
                continue
            path = Path(top) / name
            try:
                info = path.stat()
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):  # regular files (opening a FIFO would block)
                sizes[path] = info.st_size
            if len(sizes) > MAX_FILES:
                return None
    out = {}
    for path, size in sizes.items():
        try:
            out[path.relative_to(root).as_posix()] = [size, sample_hash(path, size)]
        except OSError:
            continue
    return out


def _differences(theirs: dict, mine: dict) -> list[str]:
    """The files that differ, in words; an entry of an older checkpoint (a size alone) is compared by size."""
    def size(entry):
        return entry[0] if isinstance(entry, list) else entry

    missing = sorted(set(theirs) - set(mine))
    both = sorted(set(theirs) & set(mine))
    resized = [k for k in both if size(theirs[k]) != size(mine[k])]
    rewritten = [k for k in both if k not in resized and isinstance(theirs[k], list) and theirs[k] != mine[k]]
    added = sorted(set(mine) - set(theirs))
    return ([f"{k}: {size(theirs[k])} bytes there, {size(mine[k])} here" for k in resized]
            + [f"{k}: other bytes of the same size" for k in rewritten]
            + [f"{k} missing here" for k in missing] + [f"{k} only here" for k in added])


def data_change(cfg, ckpt: dict, trained: dict, warn: bool = True) -> str | None:
    """How this run's ``data.dir`` differs from the one the checkpoint ``ckpt`` (with its resolved config ``trained``)
    was trained on, in words (None: the same folder, or the same files elsewhere, or nothing to compare; ``warn``:
    say so in the log where the files cannot be compared)."""
    from omegaconf import OmegaConf

    mine = OmegaConf.select(cfg, "data.dir", default=None)
    theirs = (trained.get("data") or {}).get("dir") if isinstance(trained.get("data"), dict) else None
    if mine == theirs:
        return None
    if mine is None or theirs is None:
        return f"data.dir: {theirs} there, {mine} here ({'the hub copy' if mine is None else 'a local folder'} here)"
    carried = ckpt.get(CHECKPOINT_DATA_FILES)
    reference = carried if isinstance(carried, dict) else files_of(theirs)
    here = files_of(mine)
    if reference is None or here is None:
        many = f"holds over {MAX_FILES} files, too many to list"
        why = ((f"this data.dir {'is not a folder' if not Path(str(mine)).is_dir() else many}") if here is None
               else "the checkpoint does not list them and that folder "
               + ("is gone" if not Path(str(theirs)).is_dir() else many))
        if warn:
            log.warning("ckpt_path=%s was trained on data.dir=%s; this run reads data.dir=%s, whose files cannot be "
                        "compared with those (%s): make sure they are the same data", cfg.ckpt_path, theirs, mine,
                        why)
        return None
    diff = _differences(reference, here)
    if not diff:
        return None
    more = f" and {len(diff) - 3} more" if len(diff) > 3 else ""
    return f"data.dir: {theirs} there, {mine} here, other files ({'; '.join(diff[:3])}{more})"
