"""``coda-exp runs``: the run folders under ``outputs/`` and where each one stands, so a researcher sees what a sweep
has left to do without opening folders.

    coda-exp runs                       # every run folder, newest first
    coda-exp runs --left                # only the runs not finished: stopped (with their step) or failed
    coda-exp runs --log-dir /scratch/me/outputs --json runs.json

A run folder is one with a ``config_resolved.yaml``, a ``checkpoints/`` folder or a ``train.log`` under
``<log-dir>/runs/*/`` or ``<log-dir>/multiruns/*/``; one without ``config_resolved.yaml`` (deleted, or never written:
the run failed before it, e.g. a config error) is listed with "no config_resolved.yaml" and the names its
checkpoint's config gives, if any; one whose ``config_resolved.yaml`` cannot be read (cut short, hand-edited) is read
as ``resume=auto`` reads it, by its checkpoint's config, noted "config_resolved.yaml cannot be read". Its state:

- ``finished`` / ``diverged``: its training record (in the ``paths.results_dir`` its own config names, or the
  fallback record in the folder) says so; the step is the record's;
- ``running``: its owner process (``.run_owner``) is alive on this host;
- ``stopped``: a checkpoint to resume from (``last.ckpt`` or ``interrupted.ckpt``, the later step's, or the best one
  beside them where it is later: a kill cut the write of ``last.ckpt`` short; ``coda_exp.resume_points``), no record;
  the same command with ``resume=auto`` (or ``ckpt_path=`` that checkpoint) goes on from it; the table names
  that checkpoint ("resumes from ...");
- ``debug`` / ``unrecorded``: a run with ``save_record=false`` whose ``train.log`` says it ended
  (:data:`~coda_exp.run_folder.RUN_ENDED`): ``debug`` where its config is a debug run's (``debug=fdr``,
  ``overfit``, ``limit``: ``trainer.fast_dev_run``, ``overfit_batches`` or ``limit_train_batches``), else
  ``unrecorded``; by design no record (and for ``debug=fdr`` no checkpoint); its ``last.ckpt`` does not make it
  ``stopped`` (only a checkpoint of a later step than its log's end, from a resume that stopped, does);
- ``resumed`` / ``skipped``: a job's own Hydra folder that holds only its ``train.log`` because its run went on
  elsewhere: resumed in its checkpoint's folder (``ckpt_path=``, ``resume=auto``; the note names that folder, which
  is listed on its own), or finished already there (``resume=auto`` ran nothing; the note names it, with its
  record): no failure, and not listed by ``--left``. Such a folder is a sweep job's, a DDP run's or one an older
  version left: a single run's own goes once its run went on elsewhere (``coda_exp.resume_tidy``);
- ``refused``: a single run that a user's error (a config value, ``trainer=gpu`` without one) stopped before it
  started, whose Hydra folder held more than Hydra's own files and so was kept with the error in its ``train.log``
  (an untouched one is removed); the note is that error; not listed by ``--left``: nothing of it is left to run;
- ``failed``: none of these (it stopped before its first checkpoint); the table shows the last error of its
  ``train.log`` (with the lines a user's error lists after its first: the bad keys of a ConfigError).

Evaluations' folders (``coda-exp eval``: ``<log-dir>/evals/``) are no run folders and are not listed: their records
are in the results folder (``mode: "eval"``); one that failed keeps its ``eval.log``, ending with ``evaluation
failed: <error>`` (``coda_exp.evaluate``).

A folder that left no resolved config (a job that failed before it) is named by its Hydra config
(``.hydra/config.yaml``, composed before the job started), else by its folder's name. The model column adds the
overrides that change a run's configuration (``attconv_light [model/attention=coda]``: its record's, else its job's
``.hydra/overrides.yaml``), so that two runs of one task and model that differ are told apart.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from coda_exp.environment import root_dir
from coda_exp.errors import UserError
from coda_exp.experiments import experiment_of
from coda_exp.fingerprint import configuration_label
from coda_exp.io import atomic_write_text, output_problem, write_problem
from coda_exp.run_tag import TAG_PATTERN


@dataclass
class RunState:
    folder: str
    task: str | None
    model: str | None
    seed: int | None
    scale: str | None
    state: str
    step: int | None
    checkpoint: str | None  # the checkpoint a stopped run resumes from
    record: str | None  # a finished run's record
    note: str | None = None  # what is amiss with the folder (its config_resolved.yaml deleted)
    config: str | None = None  # the overrides that change its configuration (coda_exp.fingerprint.configuration_label)


def run_folders(log_dir: Path) -> list[Path]:
    """The run folders under ``log_dir`` (single runs and sweep jobs; one whose ``config_resolved.yaml`` was deleted
    by its ``checkpoints/``), newest first."""
    found = {f.parent: None for top in ("runs", "multiruns")
             for name in ("config_resolved.yaml", "checkpoints", "train.log")
             for f in sorted(log_dir.glob(f"{top}/*/*/{name}"))}

    def made(folder: Path) -> float:
        mark = next((f for f in (folder / "config_resolved.yaml", folder / "train.log") if f.is_file()), folder)
        return mark.stat().st_mtime

    return sorted(found, key=made, reverse=True)


def states(log_dir: Path) -> list[RunState]:
    """Where each run folder under ``log_dir`` stands (module docstring), newest first."""
    from omegaconf import OmegaConf

    from coda_exp.auto_resume import finished_records, resume_checkpoint, run_config
    from coda_exp.run_folder import REFUSED, live_owner

    folders = run_folders(log_dir)
    configs, missing, unreadable = {}, set(), {}
    for folder in folders:
        if not (folder / "config_resolved.yaml").is_file():  # deleted or never written: its checkpoint's config
            missing.add(folder)
            configs[folder] = run_config(folder, warn=False)[0] or _job_names(folder)
            continue
        try:
            configs[folder] = OmegaConf.to_container(OmegaConf.load(folder / "config_resolved.yaml"), resolve=False)
        except Exception:  # noqa: BLE001 - unreadable: its checkpoint's config, as resume=auto reads it
            carried = run_config(folder, warn=False)[0]
            unreadable[folder] = carried is not None
            configs[folder] = carried or _job_names(folder)
    results_dirs = {Path(str(c["paths"]["results_dir"])) for c in configs.values()
                    if isinstance(c.get("paths"), dict) and c["paths"].get("results_dir")}
    records = finished_records(results_dirs, [f.resolve() for f in folders])
    out = []
    for folder in folders:
        cfg = configs[folder]
        task, model = (cfg.get("task") or {}).get("name"), (cfg.get("model") or {}).get("name")
        state, step, checkpoint, record, config = "failed", None, None, None, None
        log_end = _log_tail(folder)
        notes = ["no config_resolved.yaml"] if folder in missing else []
        if folder.resolve() in records:
            path, rec = records[folder.resolve()]
            state, step, record = rec["status"], rec.get("steps"), str(path)
            config = configuration_label([str(o) for o in rec.get("overrides") or []], rec.get("experiment"))
        elif live_owner(folder):
            state = "running"
        elif (point := resume_checkpoint(folder)) is not None:
            state, step, checkpoint = "stopped", point[1], str(point[0])
        if config is None:  # no record: the overrides of its job's command line
            config = _configuration(folder)
        ended = _ended(log_end) if state in ("failed", "stopped") and cfg.get("save_record") is False else None
        if ended is not None and (step is None or step <= ended):  # it ended (no later checkpoint): by design no record
            trainer = cfg.get("trainer") if isinstance(cfg.get("trainer"), dict) else {}
            state, step, checkpoint = ("debug" if _debug(trainer) else "unrecorded"), ended, None
            notes.append("ended; save_record=false: no record")
        if folder in unreadable:  # resume=auto compares its checkpoint's config instead, and writes the file again
            notes.append("config_resolved.yaml cannot be read" + ("; its checkpoint's config is used"
                                                                   if unreadable[folder] else ""))
        moved = _elsewhere(log_end, folder) if state == "failed" and folder in missing else None
        if moved is not None:  # its run went on in another folder: this one holds only the job's log
            state, notes, record = moved[0], [moved[1]], moved[2]
        elif state == "failed" and folder in missing and any(f" - {REFUSED} " in line for line in log_end):
            state, notes = "refused", [_last_error(log_end) or REFUSED]  # a user's error before it started
        elif state == "failed":
            notes.append(_last_error(log_end) or ("train.log names no error" if (folder / "train.log").is_file()
                                                  else "no train.log"))
        out.append(RunState(str(folder), task, model, cfg.get("seed"), cfg.get("scale_name"), state, step,
                            checkpoint, record, "; ".join(notes) or None, config or None))
    return out


def _configuration(folder: Path) -> str:
    """The overrides that change a run's configuration, by its job's command line (``.hydra/overrides.yaml``); ""
    where the folder has none readable."""
    import yaml

    try:
        overrides = yaml.safe_load((folder / ".hydra" / "overrides.yaml").read_text(encoding="utf-8")) or []
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return ""
    overrides = [str(o) for o in overrides]
    return configuration_label(overrides, experiment_of(overrides))


# a folder name's end: -s<seed>, its configuration tag where it has one, -<k> where it moved beside a taken folder
_SEED_AND_TAG = rf"-s(\d+)(?:-{TAG_PATTERN})?(?:-\d+)?"


def _job_names(folder: Path) -> dict:
    """Task, model, seed and scale of a job that left no resolved config nor checkpoint (as a config's keys): its Hydra
    config (``.hydra/config.yaml``, composed before the job ran), else its folder's name (a sweep job's
    ``<num>-<task>-<model>-s<seed>[-<tag>]``, a single run's ``runs/<task>-<model>/<time>-s<seed>[-<tag>]``, each
    maybe ``-2`` after: ``coda_exp.run_tag``, ``coda_exp.run_folder``); {} where neither says."""
    from omegaconf import OmegaConf

    try:
        composed = OmegaConf.load(folder / ".hydra" / "config.yaml")
        names = {key: OmegaConf.select(composed, key, default=None, throw_on_resolution_failure=False)
                 for key in ("task.name", "model.name", "seed", "scale_name")}
    except Exception:  # noqa: BLE001 - no Hydra config (hydra.output_subdir=null), or an unreadable one
        names = {}
    if names.get("task.name") is None or names.get("model.name") is None:
        single = folder.parent.parent.name == "runs" and re.search(f"{_SEED_AND_TAG}$", folder.name)
        job = None if single else re.fullmatch(rf"\d+-([^-]+)-(.+?){_SEED_AND_TAG}", folder.name)
        run = re.fullmatch(r"([^-]+)-(.+)", folder.parent.name) if single else None
        if job or run:
            seed = job.group(3) if job else single.group(1)
            names = {"task.name": (job or run).group(1), "model.name": (job or run).group(2), "seed": int(seed),
                     "scale_name": names.get("scale_name")}
    if not names:
        return {}
    return {"task": {"name": names.get("task.name")}, "model": {"name": names.get("model.name")},
            "seed": names.get("seed"), "scale_name": names.get("scale_name")}


def _elsewhere(lines: list[str], folder: Path) -> tuple[str, str, str | None] | None:
    """(state, note, record) of a job's Hydra folder whose log says its run went on in another folder
    (``run_folder.RESUMED_IN``, ``FINISHED_IN``): ``resumed`` there, or ``skipped`` (finished already there, with
    its record); None where it says neither (or names this folder itself)."""
    from coda_exp.run_folder import FINISHED_IN, RESUMED_IN

    for line in reversed(lines):
        if f" - {RESUMED_IN} " in line:
            there = line.split(f" - {RESUMED_IN} ", 1)[1].split(" (its Hydra folder ", 1)[0].strip()
            if Path(there).resolve() != folder.resolve():
                return "resumed", f"resumed in {there}", None
        elif f" {FINISHED_IN} " in line:
            there, _, rest = line.split(f" {FINISHED_IN} ", 1)[1].rpartition(" (record ")
            record = rest.rsplit("): nothing to run", 1)[0].strip() or None
            if there and Path(there).resolve() != folder.resolve():
                return "skipped", f"finished already in {there}: nothing ran", record
    return None


def _debug(trainer: dict) -> bool:
    """Whether trainer settings are a debug run's (what ``configs/debug/*.yaml`` set: ``fast_dev_run``,
    ``overfit_batches``, ``limit_train_batches``)."""
    fdr, overfit, limit = (trainer.get(k) for k in ("fast_dev_run", "overfit_batches", "limit_train_batches"))
    return (fdr is True or (type(fdr) is int and fdr > 0) or (isinstance(overfit, (int, float)) and overfit > 0)
            or (isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit != 1.0))


def _log_tail(folder: Path, size: int = 65536) -> list[str]:
    """The last lines of ``folder``'s ``train.log`` (its last ``size`` bytes); none where it cannot be read."""
    try:
        with open(folder / "train.log", "rb") as f:
            f.seek(max(0, f.seek(0, 2) - size))
            return f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []


def _ended(lines: list[str]) -> int | None:
    """The step at which the run ended, where its log's lines say it did (``run_folder.RUN_ENDED``); else None."""
    from coda_exp.run_folder import RUN_ENDED

    for line in reversed(lines):
        if f" - {RUN_ENDED} " in line:
            words = line.split(f" - {RUN_ENDED} ", 1)[1].split()
            return int(words[3]) if len(words) > 3 and words[3].isdigit() else 0
    return None


def _last_error(lines: list[str], width: int = 400) -> str | None:
    """The last error of a log: its last ``[ERROR]`` line's message with the indented lines after it (a user's
    error: a ConfigError's bad keys), joined by "; ", else its last line (a traceback's end)."""
    at = next((i for i in range(len(lines) - 1, -1, -1) if "][ERROR] - " in lines[i]), None)
    after = lines[at + 1:] if at is not None else lines
    end = next((line.strip() for line in reversed(after) if line.strip() and not line[0].isspace()
                and not line.startswith("[")), None)  # the traceback's last line, after a log.exception
    shown = end if at is None else lines[at].split("][ERROR] - ", 1)[1]
    if at is not None and end is not None and any(line.startswith("Traceback") for line in after):
        shown = f"{shown}: {end}"
    elif at is not None:  # the message's further lines, up to the log's next line
        more = []
        for line in after:
            if line.startswith(("[", "Traceback")) or not line.strip():
                break
            more.append(line.strip())
        if more:
            head = shown.rstrip()
            shown = head + (" " if head.endswith(":") else ": ") + "; ".join(more)
    return None if shown is None else shown if len(shown) <= width else shown[:width - 3] + "..."


def _table(rows: list[RunState]) -> str:
    header = ("state", "step", "task", "model", "seed", "scale", "folder")
    cells = [header] + [(r.state, "" if r.step is None else str(r.step), r.task or "?",
                         (r.model or "?") + (f" [{r.config}]" if r.config else ""),
                         "" if r.seed is None else str(r.seed), r.scale or "?", r.folder) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header) - 1)]
    notes = [""] + ["".join([f"  resumes from {r.checkpoint}" if r.state == "stopped" and r.checkpoint else "",
                             f"  ({r.note})" if r.note else ""]) for r in rows]
    return "\n".join("  ".join(c[i].ljust(w) for i, w in enumerate(widths)) + "  " + c[-1] + note
                     for c, note in zip(cells, notes))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The run folders under outputs/ and where each one stands: "
                                     "finished, running, stopped (resumable), debug (no record), failed or refused (a "
                                     "user's error before it started); a job's folder whose run went on elsewhere: "
                                     "resumed or skipped.")
    parser.add_argument("--log-dir", type=Path, default=root_dir() / "outputs",
                        help="the runs' paths.log_dir (default: outputs/ where runs go: the checkout's when run "
                             "inside it, else the current folder's)")
    parser.add_argument("--left", action="store_true", help="only the runs not finished (stopped or failed)")
    parser.add_argument("--json", type=Path, help="also write the list as JSON to this file")
    args = parser.parse_args(argv)
    if args.log_dir.exists() and not args.log_dir.is_dir():  # a checkpoint or a log given for the folder
        raise UserError(f"--log-dir {args.log_dir}: a file, not a folder; expected the runs' paths.log_dir, the "
                        "folder that holds runs/ and multiruns/ (default: outputs/ where runs go)")
    if not args.log_dir.is_dir():
        raise UserError(f"--log-dir {args.log_dir}: no such folder (the runs' paths.log_dir; default: outputs/ where "
                        "runs go)")
    wrong = args.json and output_problem("--json", args.json, "the list of runs", folder=False, example="runs.json")
    if wrong:  # before the folders are read, instead of a traceback after
        raise UserError(wrong)
    rows = states(args.log_dir)
    if args.left:  # a resumed or skipped job's folder is none: its run is listed in its own folder
        rows = [r for r in rows if r.state in ("stopped", "failed")]
    if args.json:
        try:
            atomic_write_text(args.json, json.dumps([asdict(r) for r in rows], indent=2) + "\n")
        except OSError as err:  # no permission, a full disk
            raise UserError(write_problem("--json", args.json, "the list of runs", err)) from err
    if not rows:
        print(f"no {'unfinished ' if args.left else ''}run folders under {args.log_dir}")
        return 0
    print(_table(rows))
    counts = {s: sum(r.state == s for r in rows)
              for s in ("finished", "diverged", "debug", "unrecorded", "running", "stopped", "failed", "refused",
                        "resumed", "skipped")}
    print(", ".join(f"{n} {s}" for s, n in counts.items() if n))
    if counts["stopped"]:
        print("a stopped run goes on from its checkpoint with the same command and resume=auto (docs/running.md)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
