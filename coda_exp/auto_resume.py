"""``resume=auto``: a run goes on where the same run stopped, without the user finding its checkpoint.

Before any data loads, the run looks for its earlier runs: the run folders (``config_resolved.yaml`` beside
``checkpoints/``; where it was deleted or cannot be read, the config the checkpoint carries) under ``paths.log_dir``'s
``runs/<task>-<model>/`` and ``multiruns/*/`` and beside this run's own Hydra folder, whose resolved config equals this run's once each folder's own path is set aside (and ``ckpt_path``,
``resume``, ``verbose``, which change no result). Then:

- one of them **finished** (its run record, in ``paths.results_dir/runs/`` or the folder's fallback record, says
  ``finished`` or ``diverged``): nothing runs; the message names the folder and record;
- else the one whose latest complete checkpoint (``last.ckpt`` or ``interrupted.ckpt``; where a kill cut the write
  of ``last.ckpt`` short, the best one beside it: ``coda_exp.resume_points``) is at the latest step is **resumed**
  from it, in its folder, as ``ckpt_path=`` would; one still running (its owner process alive on this host) is one
  error, not a second copy of the run;
- else the run starts afresh.

So a sweep or ``make reproduce-table-N RUN_ARGS=resume=auto`` run again after a crash, a Ctrl-C or a cluster's time
limit runs only what is left, and a SLURM job requeued with the same command resumes. Under DDP rank 0 decides and
the ranks it launches read its decision from the environment (:data:`DECISION_ENV`), so every rank resumes from
the same checkpoint.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from coda_exp.config_diff import IGNORED, normalised  # noqa: F401 (IGNORED: part of this module's API)
from coda_exp.resume_points import latest_complete, resume_checkpoint, resume_files  # noqa: F401
from coda_exp.run_folder import FINISHED_IN, RESOLVED_CONFIG, OutputDirError, live_owner

log = logging.getLogger(__name__)

DONE = ("finished", "diverged")  # a record's status that ends a run (a diverged run would diverge again)
DECISION_ENV = "CODA_EXP_AUTO_RESUME"  # rank 0's choice for the ranks it launches: a checkpoint, or "" (afresh)
# the folder of the run that had finished already when this process's last ``apply`` ran nothing (None: it ran;
# each call resets it); a sweep's summary counts such jobs apart (hydra_callbacks.JobReport)
finished_already: Path | None = None


@dataclass
class Decision:
    """What ``resume=auto`` found: ``checkpoint`` (and its ``step``) to resume from, or ``finished`` (the folder
    and its record's path) when the run is done; all None: start afresh. ``why``: why ``checkpoint`` is the one,
    where it is not the run's ``last.ckpt`` or ``interrupted.ckpt`` or files were passed over."""

    checkpoint: Path | None = None
    step: int | None = None
    why: str | None = None
    finished: Path | None = None
    record: dict | None = None
    without_checkpoint: list[Path] | None = None  # earlier runs of this configuration that saved none (afresh)


def candidates(cfg: DictConfig, own: Path) -> list[Path]:
    """Run folders that may hold an earlier run of this configuration (each has a ``config_resolved.yaml``)."""
    log_dir = Path(cfg.paths.log_dir)
    patterns = [(log_dir / "runs" / f"{cfg.task.name}-{cfg.model.name}", f"*-s{cfg.seed}*"),
                (log_dir / "multiruns", f"*/*-{cfg.task.name}-{cfg.model.name}-s{cfg.seed}*"),
                (own.parent, "*")]
    found: dict[Path, None] = {}
    for root, pattern in patterns:
        if root.is_dir():
            for folder in sorted(root.glob(pattern)):
                if (folder / RESOLVED_CONFIG).is_file() or (folder / "checkpoints").is_dir():
                    found[folder.resolve()] = None
    return list(found)


def run_config(folder: Path, warn: bool = True) -> tuple[dict | None, Path | None]:
    """(the resolved config of ``folder``'s run, the file it was read from): its latest resume's (a raised budget:
    the run's now), its ``config_resolved.yaml``, or where that was deleted or cannot be read (cut short,
    hand-edited) the config its checkpoint carries (``last.ckpt``, ``interrupted.ckpt`` or another one,
    memory-mapped); (None, None) where neither can be read. ``warn``: say so in the log where the file cannot be read."""
    for later in sorted(folder.glob(RESOLVED_CONFIG.replace(".yaml", ".resumed-*.yaml")), reverse=True):
        with contextlib.suppress(Exception):  # unreadable: an earlier one, or the first, stands in for it
            if isinstance(theirs := OmegaConf.to_container(OmegaConf.load(later), resolve=True), dict):
                return theirs, later
    path = folder / RESOLVED_CONFIG
    unreadable = None
    if path.is_file():
        try:
            theirs = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        except Exception as err:  # noqa: BLE001 - its checkpoint's config stands in for it, as for a deleted one
            unreadable = str(err).splitlines()[0] if str(err) else type(err).__name__
        else:
            if isinstance(theirs, dict):
                return theirs, path
            unreadable = "not a mapping of config keys"
    from coda_exp.checkpoint_avg import CheckpointError, load_checkpoint
    from coda_exp.tasks.base import CHECKPOINT_CONFIG

    for ckpt in resume_files(folder):
        try:
            theirs = load_checkpoint(ckpt, mmap=True, need=(CHECKPOINT_CONFIG,))[CHECKPOINT_CONFIG]
        except CheckpointError:
            continue
        if isinstance(theirs, dict):
            if unreadable is not None and warn:
                log.warning("resume=auto: %s cannot be read (%s); the config its checkpoint %s carries is read "
                            "instead", path, unreadable, ckpt)
            return theirs, ckpt
    if unreadable is not None and warn:
        log.warning("resume=auto: %s cannot be read (%s) and no checkpoint beside it carries its config; skipped",
                    path, unreadable)
    return None, None


def same_run(mine: dict, folder: Path) -> bool:
    """Whether ``folder``'s run had the resolved config ``mine`` (each run's own folder set aside)."""
    theirs, source = run_config(folder)
    if theirs is None or normalised(theirs) != normalised(mine):
        return False
    if source.name != RESOLVED_CONFIG and not (folder / RESOLVED_CONFIG).is_file():  # (unreadable: said above)
        log.warning("resume=auto: %s has no %s (deleted?); the config its checkpoint %s carries is this run's",
                    folder, RESOLVED_CONFIG, source)
    return True


def finished_records(results_dirs, folders: list[Path], run_ids=()) -> dict[Path, tuple[Path, dict]]:
    """folder -> (record file, record) of the runs among ``folders`` (resolved paths), or whose run id is among
    ``run_ids``, whose training record says they ended, read from ``<results_dir>/runs/`` of each of
    ``results_dirs`` and the folders' fallback records."""
    from coda_exp import results
    from coda_exp.run_folder import FALLBACK_RECORD

    wanted, ids = set(folders), set(run_ids) - {None}
    out: dict[Path, tuple[Path, dict]] = {}
    if not wanted and not ids:  # no earlier run of this configuration: no record to read
        return out
    files = [p for d in map(Path, results_dirs) if (d / "runs").is_dir() for p in sorted((d / "runs").glob("*.json"))]
    files += [f / FALLBACK_RECORD for f in folders if (f / FALLBACK_RECORD).is_file()]
    for path in files:
        if path.name.startswith("."):
            continue
        try:
            record = results.read_record(path, checksum=False)  # a hand-edited record still says the run ended
        except ValueError:
            continue
        folder = Path(record.get("output_dir") or "/nonexistent").resolve()
        if ((folder in wanted or record.get("run_id") in ids) and record.get("mode", "train") == "train"
                and record.get("status") in DONE):
            out[folder] = (path, record)
    return out


STEP_BUDGET = ("task.max_steps", "task.epochs", "task.max_epochs", "trainer.max_steps", "trainer.max_epochs")


def _raised(mine, theirs) -> bool:
    """Whether a step budget ``mine`` (this run's value of a ``STEP_BUDGET`` key) is longer than ``theirs``."""
    unlimited = (None, -1)
    if mine == theirs or theirs in unlimited:
        return False
    if mine in unlimited:
        return True
    try:
        return float(mine) > float(theirs)
    except (TypeError, ValueError):
        return mine != theirs


def _record_of(results_dirs, folder: Path | None, ckpt: dict, theirs) -> tuple[Path, dict] | None:
    """(record file, record) of the finished run a checkpoint is of: looked up by its run folder ``folder`` and, so
    that a checkpoint copied out of that folder is the same run's, by the run folder and run id it carries
    (``paths.output_dir`` of its config, ``run_id`` of ``coda_exp.run``); None where no record says it ended."""
    from coda_exp.tasks.base import CHECKPOINT_RUN

    folders = [folder.resolve()] if folder is not None else []
    if theirs is not None and OmegaConf.select(theirs, "paths.output_dir", default=None):
        folders.append(Path(str(theirs.paths.output_dir)).resolve())
    identity = ckpt.get(CHECKPOINT_RUN)
    run_id = identity.get("run_id") if isinstance(identity, dict) else None
    done = finished_records(results_dirs, folders, [run_id])
    if not done:
        return None
    return max(done.values(), key=lambda item: str(item[1].get("created")))


def check_not_finished(cfg: DictConfig, folder: Path | None, ckpt: dict) -> tuple[Path, dict] | None:
    """``ckpt_path=`` a checkpoint of a run that finished (its record, in this run's or the checkpoint's
    ``paths.results_dir``, says ``finished`` or ``diverged``): (record file, record) of that run, whose folder and
    files this run must leave as they are (the caller trains in a new run folder); None for a run that did not
    finish (resumed in its own folder). With the budget and configuration that run finished with, training from any
    of its checkpoints would train that same run again, test it again and write a second record of it (which plots
    and tables would pool): a CheckpointError naming the record and what to do instead. A raised budget
    (``task.epochs``, ``task.max_steps``) or another configuration (``resume=force``; another ``data.dir`` counts
    where it holds other files, ``coda_exp.resume_data``, not where the same files lie elsewhere) from a checkpoint
    before its end trains on, as a new run; from its last step under another configuration nothing is left to train."""
    from coda_exp.checkpoint_avg import CheckpointError
    from coda_exp.config_diff import configuration_changes
    from coda_exp.resume_data import data_change
    from coda_exp.tasks.base import CHECKPOINT_CONFIG

    trained = ckpt.get(CHECKPOINT_CONFIG)
    theirs = OmegaConf.create(trained) if isinstance(trained, dict) else None
    results_dirs = {str(cfg.paths.results_dir), str(OmegaConf.select(theirs, "paths.results_dir", default=None)
                                                    if theirs is not None else None)}
    done = _record_of(results_dirs - {"None"}, folder, ckpt, theirs)
    if done is None or not cfg.get("save_record", True) or theirs is None:
        return done  # (save_record=false writes no record; a checkpoint without its config: no budget to compare)
    if any(_raised(OmegaConf.select(cfg, k, default=None), OmegaConf.select(theirs, k, default=None))
           for k in STEP_BUDGET):
        return done
    path, record = done
    ended, step = int(record.get("steps") or 0), int(ckpt.get("global_step") or 0)
    if ended <= step:
        raise CheckpointError(f"ckpt_path={cfg.ckpt_path}: its run {record['status']} already at step "
                              f"{record['steps']} (record {path}) with this budget, so nothing is left to train: to "
                              f"test it again, coda-exp eval ckpt_path={cfg.ckpt_path}; to train longer, raise "
                              "task.epochs or task.max_steps")
    if configuration_changes(cfg, trained):  # resume=force (check_same_configuration refused it otherwise)
        return done
    # another data.dir counts by its files, not its path (a moved copy of the same data is that run; said once, at
    # check_same_configuration, where the files cannot be compared)
    if (other := data_change(cfg, ckpt, trained, warn=False)) is not None:
        raise CheckpointError(f"ckpt_path={cfg.ckpt_path}: a checkpoint at step {step} of a run that "
                              f"{record['status']} already at step {ended} (record {path}), trained on from it on other "
                              f"data ({other}) with the same configuration: data.dir is not part of a configuration's "
                              "fingerprint, so its record would take that run's place in the tables. To test this "
                              f"checkpoint on that data, coda-exp eval ckpt_path={cfg.ckpt_path} "
                              f"data.dir={OmegaConf.select(cfg, 'data.dir', default=None)}")
    raise CheckpointError(f"ckpt_path={cfg.ckpt_path}: a checkpoint at step {step} of a run that {record['status']} "
                          f"already at step {ended} (record {path}) with this configuration and budget: training on "
                          "from it would train that run again and write a second record of it. To test this "
                          f"checkpoint, coda-exp eval ckpt_path={cfg.ckpt_path}; to train on from it as a new run "
                          "(in a new run folder), raise task.epochs or task.max_steps, or change the configuration "
                          "and add resume=force")


def _budget_key(cfg: DictConfig, name: str) -> str:
    """The key a user sets for ``trainer.<name>``: the ``task.*`` key it follows (``task.epochs``), else itself."""
    raw = OmegaConf.to_container(cfg.trainer, resolve=False).get(name)
    if isinstance(raw, str) and raw.startswith("${"):
        inner = raw[2:-1].split(":", 1)[-1].split(",")[0]
        return inner if inner.startswith("task.") else f"trainer.{name}"
    return f"trainer.{name}"


def check_budget(cfg: DictConfig, ckpt: dict) -> None:
    """``ckpt_path=`` under a budget the checkpoint has reached already (``task.epochs`` at or below its epoch,
    ``task.max_steps`` at or below its step): a CheckpointError naming the key, the checkpoint's epoch or step and
    the smallest value that trains on, before any data loads (Lightning refused a lower epoch budget with a
    traceback after the data loaded, and a lower step budget trained nothing and wrote a record that states it)."""
    from coda_exp.checkpoint_avg import CheckpointError
    from coda_exp.tasks.base import CHECKPOINT_CONFIG

    trained = ckpt.get(CHECKPOINT_CONFIG)
    theirs = OmegaConf.create(trained) if isinstance(trained, dict) else None
    reached = {"max_epochs": (int(ckpt.get("epoch") or 0), "epoch", " (counting from 0)"),
               "max_steps": (int(ckpt.get("global_step") or 0), "step", "")}
    for name, (done, what, note) in reached.items():
        limit = OmegaConf.select(cfg, f"trainer.{name}", default=None)
        if limit in (None, -1) or int(limit) > done:
            continue
        # its own run's budget reached (a run stopped while it tested): it tests and writes its record, as before
        if theirs is not None and not _raised(OmegaConf.select(theirs, f"trainer.{name}", default=None), limit):
            continue
        if theirs is None and int(limit) == done:
            continue
        key = _budget_key(cfg, name)
        raise CheckpointError(f"{key} = {limit}: ckpt_path={cfg.ckpt_path} is at {what} {done}{note} already, so "
                              f"nothing is left to train under it; set {key}={done + 1} or more to train on from "
                              f"it, or test it with coda-exp eval ckpt_path={cfg.ckpt_path}")


def _without_budget(config: dict) -> dict:
    """``normalised(config)`` without the ``STEP_BUDGET`` keys."""
    out = normalised(config)
    for key in STEP_BUDGET:
        section, name = key.split(".")
        if isinstance(out.get(section), dict):
            out[section] = {k: v for k, v in out[section].items() if k != name}
    return out


def other_budget(cfg: DictConfig, own: Path) -> tuple[Path, str] | None:
    """(folder, the budget keys that differ) of an earlier run (:func:`candidates`) whose configuration is this run's
    but for its budget (``STEP_BUDGET``), which ``resume=auto`` does not go on from; None where there is none."""
    mine = OmegaConf.to_container(cfg, resolve=True)
    for folder in candidates(cfg, own.resolve()):
        theirs, _ = run_config(folder, warn=False)
        if theirs is not None and _without_budget(theirs) == _without_budget(mine):
            there = OmegaConf.create(theirs)
            keys = [f"{k}: {OmegaConf.select(there, k, default=None)} there, {OmegaConf.select(cfg, k, default=None)} "
                    "here" for k in STEP_BUDGET
                    if OmegaConf.select(there, k, default=None) != OmegaConf.select(cfg, k, default=None)]
            if keys:
                return folder, "; ".join(keys)
    return None


def decide(cfg: DictConfig, own: Path) -> Decision:
    """The earlier run of this configuration to go on from (module docstring); ``own``: this run's Hydra folder."""
    import pytorch_lightning as pl  # here, not at the top: coda-exp runs reads this module without Lightning

    if pl.utilities.rank_zero_only.rank != 0 and DECISION_ENV in os.environ:  # a rank rank 0 launched
        chosen = os.environ[DECISION_ENV]
        return Decision(checkpoint=Path(chosen)) if chosen else Decision()
    own = own.resolve()  # its own folder too: a requeued job (SLURM) may start in its earlier run's folder
    mine = OmegaConf.to_container(cfg, resolve=True)
    matches = [f for f in candidates(cfg, own) if same_run(mine, f)]
    done = finished_records([cfg.paths.results_dir], matches)
    decision = Decision()
    if done:
        folder, (path, record) = max(done.items(), key=lambda item: str(item[1][1].get("created")))
        decision = Decision(finished=folder, record={"path": str(path), **record})
    else:
        for folder in matches:
            if owner := live_owner(folder):
                raise OutputDirError(f"resume=auto: the same run is running now in {folder} (process "
                                     f"{owner['pid']}): wait for it or stop it, then run this again")
        point, why = latest_complete(matches)
        if point is not None:
            decision = Decision(checkpoint=point[0], step=point[1], why=why)
        elif matches:  # stopped before their first checkpoint (a kill during its write included)
            decision = Decision(without_checkpoint=sorted(matches))
    os.environ[DECISION_ENV] = str(decision.checkpoint or "")
    return decision


def apply(cfg: DictConfig) -> dict | None:
    """``resume=auto`` before the run folder is chosen: set ``ckpt_path`` to the checkpoint to go on from and say
    so, or return the record of the run that already finished (the caller runs nothing); None otherwise (no
    ``resume=auto``, an explicit ``ckpt_path``, or nothing found: a fresh run)."""
    import pytorch_lightning as pl

    global finished_already
    finished_already = None
    if cfg.get("resume") != "auto" or cfg.get("ckpt_path"):  # its value: config_checks.check_config
        return None
    decision = decide(cfg, Path(cfg.paths.output_dir))
    if decision.finished is not None:
        finished_already = decision.finished
        log.info("resume=auto: %s %s (record %s): nothing to run", FINISHED_IN, decision.finished,
                    decision.record["path"])
        return decision.record
    if decision.checkpoint is not None:
        cfg.ckpt_path = str(decision.checkpoint)
        if decision.step is not None:
            log.warning("resume=auto: resuming the same run from %s (step %d)%s", decision.checkpoint, decision.step,
                        f", {decision.why}" if decision.why else "")
    elif pl.utilities.rank_zero_only.rank == 0:  # the ranks rank 0 launched took its choice silently
        other = other_budget(cfg, Path(cfg.paths.output_dir))
        if decision.without_checkpoint:
            log.warning("resume=auto: the earlier run of this configuration (%s) saved no checkpoint to go on from "
                        "(stopped before its first was written); a fresh run",
                        ", ".join(str(f) for f in decision.without_checkpoint))
        elif other is None:
            log.info("resume=auto: no earlier run of this configuration to go on from; a fresh run")
        else:
            log.warning("resume=auto: no earlier run of this configuration to go on from; a fresh run. %s holds a "
                        "run of it under another budget (%s): to go on from that run instead, run with "
                        "ckpt_path=<its checkpoint> and a budget above its epoch and step", *other)
    return None
