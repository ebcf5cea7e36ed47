"""Checkpoint averaging (CoDA paper Table 4: "checkpoint averaging", as T2T's ``avg_checkpoints.py``).

The ``state_dict`` of the last N Lightning checkpoints (ordered by the ``global_step`` stored in each, not by file
name) is averaged element-wise for floating-point tensors (accumulated in float64, cast back); other tensors and
every other key (optimizer state, loops, hyper-parameters...) are taken from the newest checkpoint, so Lightning
and ``offline.load_trained`` load the result as any checkpoint. The output is written atomically.

In a run (``task.average_last = N``): :func:`periodic_checkpoints` keeps the last N, :func:`average_last` averages
them after training (``checkpoints/averaged.ckpt``, tested instead of the best checkpoint).

Command: ``coda-exp average-checkpoints --dir RUN/checkpoints/periodic --last 5 --out RUN/checkpoints/avg.ckpt``
or ``--ckpts a.ckpt b.ckpt c.ckpt --out avg.ckpt`` (:func:`main`; ``python scripts/average_checkpoints.py`` in a
checkout). A run's ``checkpoints/`` itself holds its best checkpoint, ``last.ckpt`` and perhaps a stopped process's
``interrupted.ckpt`` (until the resumed run saves a later ``last.ckpt``: ``coda_exp.resume_tidy``), not the last N
of anything: ``--dir RUN/checkpoints`` (or ``--dir RUN``) averages its
``periodic/`` (and says so), and is refused, naming what it holds, where the run kept no periodic checkpoints
(:func:`averaging_folder`).
``--out`` is checked before any checkpoint is read (a path under a file, a folder); inside ``--dir``'s folder it may
replace an earlier average, never one of the checkpoints averaged (refused, naming it); a failed write (a full disk)
is one message naming ``--out``, nothing replaced.
"""

from __future__ import annotations

import argparse
import logging
import os
import pickle
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from coda_exp.errors import UserError
from coda_exp.io import atomic_write, output_problem, write_problem

if TYPE_CHECKING:
    import pytorch_lightning as pl
    from omegaconf import DictConfig

log = logging.getLogger(__name__)

PERIODIC = Path("checkpoints") / "periodic"  # a run's periodic checkpoints (task.average_last), under its folder


class CheckpointError(UserError, ValueError):
    """A checkpoint file that is missing, empty, unreadable or not a Lightning checkpoint; one line naming it."""


def load_checkpoint(path: str | os.PathLike, mmap: bool = False, need: Sequence[str] = ("state_dict",),
                    verify: bool = False) -> dict:
    """``torch.load`` of a Lightning checkpoint, or :class:`CheckpointError`: one line naming the file and what was
    expected (a truncated, empty or foreign file, or one without the keys ``need``). ``verify``: every entry's CRC
    is checked first (the whole file is read): ``torch.load`` checks none, so a file damaged in place, its size
    unchanged, loaded damaged weights (a run resumed from one trained on them)."""
    path = Path(path)
    expected = f"expected a Lightning checkpoint (torch.save'd dict with {', '.join(map(repr, need))})"
    if path.is_dir():
        raise CheckpointError(f"{path}: a folder, not a checkpoint file (a run's checkpoints lie in "
                              f"<run>/checkpoints/: last.ckpt, the best one); {expected}")
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file; {expected}")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: the file is empty; {expected}")
    archive = zipfile.is_zipfile(path)  # torch.save's format; torch < 1.6 wrote a bare pickle, which cannot be mmapped
    if archive and verify:
        try:
            with zipfile.ZipFile(path) as z:
                bad = z.testzip()
        except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as err:
            bad = f"{type(err).__name__}: {_first_sentence(str(err))}"
        if bad is not None:
            raise CheckpointError(f"{path}: damaged (its entry {bad} fails the archive's CRC check); {expected}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False, mmap=mmap and archive)
    except (RuntimeError, OSError, EOFError, ValueError, ImportError, AttributeError, pickle.UnpicklingError,
            zipfile.BadZipFile) as err:  # what torch.load raises for a truncated, foreign or pickled-other file
        reason = _first_sentence(str(err)) or type(err).__name__
        if not archive:  # torch's own words (an invalid load key...) say nothing of that
            reason = f"not the zip archive torch.save writes: truncated, or another kind of file; {reason}"
        raise CheckpointError(f"{path}: cannot be read ({reason}); {expected}") from None
    missing = [key for key in need if not isinstance(ckpt, dict) or key not in ckpt]
    if missing:
        raise CheckpointError(f"{path}: no {', '.join(map(repr, missing))} in it; {expected}")
    return ckpt


def _first_sentence(text: str, limit: int = 200) -> str:
    """A library's error message, whitespace folded, cut after its first sentence, or at a word within ``limit``
    characters with an ellipsis: never mid-word."""
    text = " ".join(text.split())
    end = text.find(". ")
    if 0 <= end < limit:
        return text[:end + 1]
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."


def global_step(path: str | os.PathLike) -> int:
    """The ``global_step`` stored in a checkpoint (memory-mapped: the tensors are not read)."""
    return _step_of(load_checkpoint(Path(path), mmap=True), path)


def _step_of(ckpt: dict, path: str | os.PathLike) -> int:
    if "global_step" not in ckpt:
        raise CheckpointError(f"{path} has no 'global_step'; pass the checkpoints explicitly with --ckpts")
    return int(ckpt["global_step"])


def select_last(directory: str | os.PathLike, last: int, exclude: Sequence[str | os.PathLike] = ()) -> list[Path]:
    """The ``last`` *.ckpt files of ``directory`` with the highest global_step, oldest first.

    Files with the same global_step (e.g. Lightning's ``last.ckpt`` beside ``epoch=..-step=...ckpt``) count once;
    a file that is itself an average (it lists ``averaged_checkpoints``) is left out.
    """
    if last < 1:
        raise CheckpointError(f"--last must be >= 1, got {last}")
    if not Path(directory).is_dir():
        raise CheckpointError(f"--dir {directory}: no such folder of checkpoints")
    skip = {Path(p).resolve() for p in exclude}
    by_step: dict[int, Path] = {}
    for path in sorted(Path(directory).glob("*.ckpt")):
        if path.resolve() in skip:
            continue
        ckpt = load_checkpoint(path, mmap=True)
        if "averaged_checkpoints" in ckpt:  # an earlier average (averaged.ckpt): not one of the run's checkpoints
            log.info("%s is an average of %d checkpoints; left out", path, len(ckpt["averaged_checkpoints"]))
            continue
        step = _step_of(ckpt, path)
        if step in by_step:
            keep = by_step[step] if path.name == "last.ckpt" else path
            log.info("%s and %s share global_step %d; using %s", by_step[step], path, step, keep)
            path = keep
        by_step[step] = path
    if len(by_step) < last:
        raise CheckpointError(f"{directory} holds {len(by_step)} checkpoints with distinct global steps, fewer "
                              f"than --last {last}")
    return [by_step[s] for s in sorted(by_step)[-last:]]


def averaging_folder(directory: str | os.PathLike) -> Path:
    """The folder ``--dir`` averages: a folder with a ``periodic/`` of checkpoints (a run's ``checkpoints/``, or a
    run folder, whose ``checkpoints/`` is read) is averaged from it, said on the console; a run's ``checkpoints/``
    without one (its best, ``last.ckpt``, ``interrupted.ckpt``) is a CheckpointError naming them; any other folder
    is itself."""
    from coda_exp.run_folder import is_run_folder

    given = folder = Path(directory)
    run = is_run_folder(given)  # a run folder: its checkpoints/ (RUN/checkpoints/periodic)
    if run and not (given / PERIODIC.parent.name).is_dir():
        raise CheckpointError(f"--dir {given}: a run folder without {PERIODIC.parent.name}/ (a debug=fdr run keeps "
                              f"none): a run keeps the checkpoints to average with task.average_last=N, in "
                              f"{given / PERIODIC}")
    if run:
        folder = given / PERIODIC.parent.name
    what = "a run folder" if run else "a run's checkpoints folder"
    periodic = folder / PERIODIC.name
    if periodic.is_dir() and any(periodic.glob("*.ckpt")):
        print(f"--dir {given}: {what}; averaging its periodic checkpoints ({periodic}), not its "
              "best checkpoint, last.ckpt or interrupted.ckpt")
        return periodic
    if folder.name == PERIODIC.parent.name and folder.is_dir() and is_run_folder(folder.parent):
        held = ", ".join(sorted(p.name for p in folder.glob("*.ckpt"))) or "no checkpoint"
        holding = f"whose {folder.name}/ holds" if run else "holding"
        raise CheckpointError(f"--dir {given}: {what}, {holding} {held}: its best and latest "
                              f"checkpoints (and a stopped process's), not the last N of a run; a run keeps those "
                              f"with task.average_last=N (in {periodic}): average them with --dir {periodic}, or name "
                              "the files with --ckpts")
    return folder


def average_checkpoints(paths: Sequence[str | os.PathLike]) -> dict:
    """The newest (highest global_step) of ``paths`` with its float tensors replaced by the mean over all.

    Checkpoints are read one at a time (memory: the newest one plus one float64 accumulator).
    """
    from coda_exp.tasks.base import CHECKPOINT_CONFIG

    if not paths:
        raise CheckpointError("no checkpoints to average")
    given = [Path(p) for p in paths]
    twice = sorted({str(p) for p in given if sum(q.resolve() == p.resolve() for q in given) > 1})
    if twice:
        raise CheckpointError(f"{', '.join(twice)}: given more than once; give each checkpoint once (a mean over "
                              "repeated checkpoints weights them more)")
    heads = {p: load_checkpoint(p, mmap=True) for p in given}  # memory-mapped: the step and config, no tensors
    paths = sorted(given, key=lambda p: int(heads[p].get("global_step", 0)))
    same_run([(p, heads[p].get(CHECKPOINT_CONFIG)) for p in paths])
    base_path, base = paths[-1], load_checkpoint(paths[-1])
    keys = set(base["state_dict"])
    sums: dict[str, torch.Tensor] = {}
    for path in paths:
        state = base["state_dict"] if path == base_path else load_checkpoint(path)["state_dict"]
        if set(state) != keys:
            diff = sorted(set(state) ^ keys)
            raise CheckpointError(f"{path} and {base_path} have different parameters: {diff[:5]}")
        for key, value in state.items():
            if not torch.is_floating_point(value):
                continue
            if value.shape != base["state_dict"][key].shape:
                raise CheckpointError(f"{key}: shape {tuple(value.shape)} in {path} but "
                                      f"{tuple(base['state_dict'][key].shape)} in {base_path}")
            acc = value.detach().to(torch.float64)
            sums[key] = acc if key not in sums else sums[key] + acc
    out = dict(base)
    out["state_dict"] = {key: ((sums[key] / len(paths)).to(value.dtype) if key in sums else value)
                         for key, value in base["state_dict"].items()}
    out["averaged_checkpoints"] = [str(p) for p in paths]
    return out


def same_run(configs: Sequence[tuple[Path, dict | None]]) -> None:
    """The checkpoints (``configs``: each one's path and the config it carries, the newest last) are of one training
    run: the same configuration (a longer budget aside: ``config_diff.configuration_changes``) and seed; else a
    CheckpointError naming the first that differs and the keys (averaging two runs' weights is not T2T's averaging,
    and the result would pass as the newest one's)."""
    from omegaconf import OmegaConf

    from coda_exp.config_diff import configuration_changes

    base_path, base = configs[-1]
    for path, config in configs[:-1]:
        if not isinstance(config, dict) or not isinstance(base, dict):
            continue  # written before checkpoints carried their config: nothing to compare
        changed = configuration_changes(OmegaConf.create(base), config)
        if changed:
            raise CheckpointError(f"{path} is of another run than {base_path} (they differ in {', '.join(changed[:5])}"
                                  f"{' ...' if len(changed) > 5 else ''}): average the checkpoints of one run")


def save_atomic(ckpt: dict, path: str | os.PathLike) -> Path:
    """torch.save to a temporary file in the target folder, then rename over ``path``. A failed write (a full disk),
    which torch reports as a RuntimeError ("unexpected pos"), is the OSError behind it, naming ``path``."""
    from coda_exp.errors import cause_of

    try:
        with atomic_write(path, "wb") as f:
            torch.save(ckpt, f)
    except RuntimeError as err:
        if cause_of(err, KeyboardInterrupt) is not None:  # a Ctrl-C during the write: the stop it asked for
            raise KeyboardInterrupt from None
        failed = cause_of(err, OSError)
        if failed is None:
            raise
        raise OSError(failed.errno, failed.strerror, str(path)) from err
    return Path(path)


def periodic_checkpoints(cfg: DictConfig) -> pl.Callback | None:
    """With ``task.average_last = N > 0``: keep the last N checkpoints, one every ``task.val_check_interval``
    optimizer steps (a fraction of an epoch: one at each validation), as T2T saves by steps (a run's
    ModelCheckpoint into ``<run>/checkpoints/periodic``, which :func:`average_last` averages). Validation counts
    batches: under gradient accumulation the two intervals differ, and the checkpoints keep their spacing in steps
    (``docs/transformer.md``)."""
    import pytorch_lightning as pl

    n = int(cfg.task.get("average_last") or 0)
    if n <= 0:
        return None
    every = cfg.task.get("val_check_interval")
    return pl.callbacks.ModelCheckpoint(
        dirpath=Path(cfg.paths.output_dir) / PERIODIC, filename="step{step}",
        auto_insert_metric_name=False, every_n_train_steps=int(every) if isinstance(every, int) else None,
        save_top_k=n, monitor="step", mode="max",
        enable_version_counter=False)  # a file of its name: a killed process's of that step, replaced (no -v1)


def average_last(cfg: DictConfig, trainer: pl.Trainer) -> tuple[str, int] | None:
    """T2T's checkpoint averaging: the mean weights of the last ``task.average_last`` checkpoints, saved as
    ``checkpoints/averaged.ckpt`` (tested instead of the best checkpoint). Returns (path, number averaged), or
    None when it does not apply.

    Under DDP rank 0 writes the file and broadcasts its answer (``trainer.strategy.broadcast``, which every rank
    reaches: a synchronisation point after the file is written), so every rank tests the same averaged
    checkpoint. On one device the broadcast returns rank 0's own answer.
    """
    n = int(cfg.task.get("average_last") or 0)
    if n <= 0:  # the same config on every rank: no rank enters the broadcast
        return None
    result = None
    if trainer.is_global_zero:
        folder = Path(cfg.paths.output_dir) / PERIODIC
        available = len(list(folder.glob("*.ckpt"))) if folder.is_dir() else 0
        if 0 < available < n:
            log.warning("checkpoint averaging: only %d periodic checkpoints (task.average_last=%d)", available, n)
        if available:
            paths = select_last(folder, min(n, available))
            out = save_atomic(average_checkpoints(paths),
                                             folder.parent / "averaged.ckpt")
            log.info("averaged %d checkpoints into %s", len(paths), out)
            result = (str(out), len(paths))
    result = trainer.strategy.broadcast(result, src=0)
    return None if result is None else (str(result[0]), int(result[1]))


def _out_of_the_folder(out: Path, folder: Path) -> None:
    """``--out`` inside ``--dir``'s folder may replace an earlier average (which averaging leaves out) but not one
    of the checkpoints it averages: a CheckpointError naming it (it used to be left out of the average without a
    word, and the count of checkpoints came out one short)."""
    if out.suffix != ".ckpt" or not out.is_file() or out.resolve().parent != folder.resolve():
        return
    try:
        ckpt = load_checkpoint(out, mmap=True)
    except CheckpointError as err:
        raise CheckpointError(f"--out {out} lies in --dir {folder} and is not an earlier average ({err}): writing "
                              "there would replace it; name a file outside the folder") from None
    if "averaged_checkpoints" not in ckpt:
        step = f" (step {ckpt['global_step']})" if "global_step" in ckpt else ""
        raise CheckpointError(f"--out {out} is one of the checkpoints of --dir {folder}{step}: writing there would "
                              "replace it; name a file outside the folder")


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description="Average the weights of the last N Lightning checkpoints "
                                                 "(T2T avg_checkpoints).")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--dir", help="folder of *.ckpt files, e.g. RUN/checkpoints/periodic (a run's periodic "
                                      "checkpoints, task.average_last; a run folder or its checkpoints/ is read "
                                      "from that periodic/); the last N by global_step are averaged")
    source.add_argument("--ckpts", nargs="+", help="explicit checkpoint files")
    parser.add_argument("--last", type=int, default=5, help="with --dir: how many checkpoints (default 5)")
    parser.add_argument("--out", required=True, help="where to write the averaged checkpoint")
    args = parser.parse_args(argv)
    wrong = output_problem("--out", args.out, "the averaged checkpoint", folder=False, example="averaged.ckpt")
    if wrong:  # before any checkpoint is read
        raise CheckpointError(wrong)
    if args.dir:
        folder = averaging_folder(args.dir)
        _out_of_the_folder(Path(args.out), folder)
        paths = select_last(folder, args.last, exclude=[args.out])
    else:
        paths = [Path(p) for p in args.ckpts]
    if any(Path(args.out).resolve() == p.resolve() for p in paths):
        raise CheckpointError(f"--out {args.out} is one of the checkpoints averaged: writing there would replace it; "
                              "name another file")
    averaged = average_checkpoints(paths)
    try:
        out = save_atomic(averaged, args.out)
    except OSError as err:  # a full disk, no permission: the temporary file is gone, nothing was replaced
        raise CheckpointError(write_problem("--out", args.out, "the averaged checkpoint", err)) from err
    print(f"averaged {len(paths)} checkpoints -> {out}")
    for p in paths:
        print(f"  {p}")
    return out
