"""The checkpoint a stopped run goes on from (``resume=auto``, ``coda-exp runs``): the latest complete one in its
``checkpoints/``.

That is ``last.ckpt`` (rewritten at every validation) or ``interrupted.ckpt`` (a Ctrl-C's or SIGTERM's) as a rule,
but not always: a run killed (SIGKILL, the OOM killer, a time limit) while it wrote its first ``last.ckpt`` has
none, only the best checkpoint written just before it at the same validation (``epoch000-step5.ckpt``) and perhaps
the write's temporary file (``.last.ckpt.<x>.tmp``); one killed while it wrote ``last.ckpt`` again may have a best
checkpoint at a later step than its ``last.ckpt``. Every ``*.ckpt`` of the folder that holds a training state
(``loops``, ``callbacks``, ``optimizer_states``: not an average, ``averaged.ckpt``, nor a weights-only one) is a
point to resume from, and the one at the latest step (``last.ckpt`` or ``interrupted.ckpt`` where the step is the
same) is taken once its archive passes the CRC check a resume makes (``load_checkpoint(verify=True)``, as
``run_checks.check_checkpoint_fits`` does); one that fails it, or cannot be read, is named and the next one taken.
The caller says which one it took and why (:func:`latest_complete`). Split from ``auto_resume.py`` at its size limit.
"""

from __future__ import annotations

from pathlib import Path

RESUME_FROM = ("last.ckpt", "interrupted.ckpt")  # a run folder's checkpoints to resume from, first among equals
TRAINING_STATE = ("global_step", "loops", "callbacks", "optimizer_states")  # what another *.ckpt needs to be one


def resume_files(folder: Path) -> list[Path]:
    """The ``*.ckpt`` files of ``<folder>/checkpoints``: ``RESUME_FROM``'s first, then the others by name (a
    write's temporary file, ``.last.ckpt.<x>.tmp``, is none of them)."""
    checkpoints = folder / "checkpoints"
    if not checkpoints.is_dir():
        return []
    first = [checkpoints / name for name in RESUME_FROM if (checkpoints / name).is_file()]
    return first + sorted(p for p in checkpoints.glob("*.ckpt") if p.name not in RESUME_FROM and p.is_file())


def checkpoints(folder: Path) -> tuple[list[tuple[Path, int]], list[tuple[Path, str]]]:
    """The points to resume from under ``<folder>/checkpoints`` (module docstring): (path, step) of those that can be
    read, and (path, why) of those that cannot (cut short, empty, foreign). Memory-mapped: no tensor is read."""
    readable, unreadable = [], []
    files = resume_files(folder)
    if not files:  # torch (checkpoint_avg) is imported only to read one: coda-exp runs lists folders without it
        return readable, unreadable
    from coda_exp.checkpoint_avg import CheckpointError, global_step, load_checkpoint

    for path in files:
        try:
            if path.name in RESUME_FROM:
                readable.append((path, global_step(path)))
                continue
            ckpt = load_checkpoint(path, mmap=True)
        except CheckpointError as err:
            unreadable.append((path, str(err)))
            continue
        if all(key in ckpt for key in TRAINING_STATE) and "averaged_checkpoints" not in ckpt:
            readable.append((path, int(ckpt["global_step"])))
    return readable, unreadable


def resume_checkpoint(folder: Path) -> tuple[Path, int] | None:
    """The point to resume from under ``<folder>/checkpoints`` at the latest step, with its step (None: none);
    not CRC-checked (``coda-exp runs`` lists many folders)."""
    readable, _ = checkpoints(folder)
    return max(readable, key=_order) if readable else None


def _order(point: tuple[Path, int]) -> tuple:
    """Latest step first; of one step, ``last.ckpt`` or ``interrupted.ckpt``, then the newest file."""
    path, step = point
    return step, path.name in RESUME_FROM, path.stat().st_mtime


def _missing_last(chosen: Path, points: list[tuple[Path, int]]) -> str:
    """Why ``chosen`` (not ``last.ckpt``) is its folder's latest checkpoint: its ``last.ckpt`` is missing (with the
    temporary files of a write cut short) or at an earlier step; "" where it cannot be read (said apart)."""
    last = chosen.parent / RESUME_FROM[0]
    earlier = [step for path, step in points if path == last]
    if earlier:
        return f"{last.name} is at step {earlier[0]}, an earlier one"
    if last.exists():
        return ""
    cut = sorted(p.name for p in chosen.parent.glob(f".{last.name}.*.tmp"))
    return f"no {last.name} beside it" + (f" (a kill cut its write short: {', '.join(cut)} left)" if cut else "")


def latest_complete(folders: list[Path]) -> tuple[tuple[Path, int] | None, str | None]:
    """(the latest complete checkpoint among ``folders``' (runs of this configuration) with its step, or None where
    they have none; why it is the one: None where it is their ``last.ckpt`` or ``interrupted.ckpt`` with nothing
    left out, else the files passed over and why, for the line saying which was taken). Where none can be read,
    a :class:`~coda_exp.checkpoint_avg.CheckpointError` names them (never a silent fresh run beside a stopped one)."""
    from coda_exp.checkpoint_avg import CheckpointError, load_checkpoint

    points, bad = [], []
    for folder in folders:
        readable, unreadable = checkpoints(folder)
        points += readable
        bad += unreadable
    chosen = None
    for path, step in sorted(points, key=_order, reverse=True):
        try:
            load_checkpoint(path, mmap=True, verify=True)  # a file damaged in place is no point to resume from
        except CheckpointError as err:
            bad.append((path, str(err)))
            continue
        chosen = path, step
        break
    named = "; ".join(why for _, why in bad)
    if chosen is None and bad:
        files = " ".join(str(path) for path, _ in bad)
        raise CheckpointError(f"resume=auto: the stopped run of this configuration has no checkpoint that can be "
                              f"read: {named}. Restore them from a copy, or delete them (rm {files}) to start this "
                              "run afresh")
    if chosen is None:
        return None, None
    passed = {path for path, _ in bad}
    reasons = [] if chosen[0].name in RESUME_FROM else [_missing_last(chosen[0], [p for p in points
                                                                                if p[0] not in passed])]
    reasons = [r for r in [*reasons, named] if r]
    return chosen, (f"its latest complete checkpoint: {'; '.join(reasons)}" if reasons else None)


def beside(ckpt_path) -> str:
    """For a ``ckpt_path=`` that cannot be read (a ``last.ckpt`` a kill left missing or cut short) in a run's
    ``checkpoints/``, or that is a run's folder or its ``checkpoints/``: "; ..." naming the latest complete
    checkpoint beside it or in it (:func:`latest_complete`), the one ``resume=auto`` would take, to resume from
    instead; "" where there is none."""
    from coda_exp.checkpoint_avg import CheckpointError

    path = Path(ckpt_path)
    if path.is_dir():  # a run's folder or its checkpoints/: the checkpoint in it to resume from
        run = path.parent if path.name == "checkpoints" else path
        where = "in it"
    elif path.parent.name == "checkpoints":
        run, where = path.parent.parent, "beside it"
    else:
        return ""
    try:
        point, _ = latest_complete([run])
    except CheckpointError:
        return ""
    if point is None or point[0] == path:
        return ""
    return (f"; the latest complete checkpoint {where} is at step {point[1]}: resume with "
            f"ckpt_path={point[0]} (or resume=auto instead of ckpt_path)")


def check_best_checkpoints(ckpt_path) -> None:
    """Before a resumed run trains (after ``run_checks.check_checkpoint_fits`` checked ``ckpt_path`` itself): the
    best checkpoints the resumed one names (each monitored ModelCheckpoint's
    ``best_model_path`` and ``best_k_models``), which the run validates and tests at its end, can be read (CRC
    checked) and, in the run's own ``checkpoints/``, exist; else a
    :class:`~coda_exp.checkpoint_avg.CheckpointError` naming the file (it was an OSError's traceback after the whole
    resumed training). Files of another folder (a finished run's, trained on elsewhere) that are gone are
    ``callbacks.KeepBestAcrossFolders``' to leave out."""
    from coda_exp.checkpoint_avg import CheckpointError, load_checkpoint

    states = (load_checkpoint(ckpt_path, mmap=True, need=("callbacks",)).get("callbacks") or {}).values()
    resumed = Path(ckpt_path).resolve()  # CRC-checked already (run_checks.check_checkpoint_fits): not read again
    own = resumed.parent
    for state in states:
        if not isinstance(state, dict) or "best_k_models" not in state:
            continue
        files = {str(f) for f in [*(state.get("best_k_models") or {}), state.get("best_model_path")] if f}
        for name in sorted(files):
            path = Path(name)
            if path.resolve() == resumed:
                continue
            try:
                if path.is_file():
                    load_checkpoint(path, mmap=True, verify=True)
                elif path.resolve().parent == own:
                    raise CheckpointError(f"{path}: no such checkpoint file")
            except CheckpointError as err:
                raise CheckpointError(f"{err}. It is one of the best checkpoints {ckpt_path} names, which the run "
                                      "validates and tests at its end: restore it from a copy before resuming "
                                      "(or go on from a checkpoint saved after it)") from None
