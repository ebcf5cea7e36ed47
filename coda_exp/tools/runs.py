"""``coda-exp runs``: the run folders under ``outputs/`` and where each one stands, so a researcher sees what a sweep
has left to do without opening folders.

    coda-exp runs                       # every run folder, newest first
    coda-exp runs --left                # only the runs not finished: stopped (with their step) or failed
    coda-exp runs --log-dir /scratch/me/outputs --json runs.json

A run folder is one with a ``config_resolved.yaml`` (or, where that was deleted, a ``checkpoints/`` folder, listed
with "no config_resolved.yaml" and the names its checkpoint's config gives) under ``<log-dir>/runs/*/`` or
``<log-dir>/multiruns/*/``. Its state:

- ``finished`` / ``diverged``: its training record (in the ``paths.results_dir`` its own config names, or the
  fallback record in the folder) says so; the step is the record's;
- ``running``: its owner process (``.run_owner``) is alive on this host;
- ``stopped``: a checkpoint to resume from (``last.ckpt`` or ``interrupted.ckpt``, the later step's), no record;
  the same command with ``resume=auto`` (or ``ckpt_path=`` that checkpoint) goes on from it;
- ``failed``: neither (it stopped before its first checkpoint; its ``train.log`` says why).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from coda_exp.environment import root_dir
from coda_exp.errors import UserError


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


def run_folders(log_dir: Path) -> list[Path]:
    """The run folders under ``log_dir`` (single runs and sweep jobs; one whose ``config_resolved.yaml`` was deleted
    by its ``checkpoints/``), newest first."""
    found = {f.parent: None for pattern in ("runs/*/*/config_resolved.yaml", "multiruns/*/*/config_resolved.yaml",
                                            "runs/*/*/checkpoints", "multiruns/*/*/checkpoints")
             for f in sorted(log_dir.glob(pattern))}

    def made(folder: Path) -> float:
        config = folder / "config_resolved.yaml"
        return (config if config.is_file() else folder).stat().st_mtime

    return sorted(found, key=made, reverse=True)


def states(log_dir: Path) -> list[RunState]:
    """Where each run folder under ``log_dir`` stands (module docstring), newest first."""
    from omegaconf import OmegaConf

    from coda_exp.auto_resume import finished_records, resume_checkpoint, run_config
    from coda_exp.run_folder import live_owner

    folders = run_folders(log_dir)
    configs, missing = {}, set()
    for folder in folders:
        if not (folder / "config_resolved.yaml").is_file():  # deleted: its checkpoint's config, if any
            missing.add(folder)
            configs[folder] = run_config(folder)[0] or {}
            continue
        try:
            configs[folder] = OmegaConf.to_container(OmegaConf.load(folder / "config_resolved.yaml"), resolve=False)
        except Exception:  # noqa: BLE001 - an unreadable config: the folder is listed without its names
            configs[folder] = {}
    results_dirs = {Path(str(c["paths"]["results_dir"])) for c in configs.values()
                    if isinstance(c.get("paths"), dict) and c["paths"].get("results_dir")}
    records = finished_records(results_dirs, [f.resolve() for f in folders])
    out = []
    for folder in folders:
        cfg = configs[folder]
        task, model = (cfg.get("task") or {}).get("name"), (cfg.get("model") or {}).get("name")
        state, step, checkpoint, record = "failed", None, None, None
        if folder.resolve() in records:
            path, rec = records[folder.resolve()]
            state, step, record = rec["status"], rec.get("steps"), str(path)
        elif live_owner(folder):
            state = "running"
        elif (point := resume_checkpoint(folder)) is not None:
            state, step, checkpoint = "stopped", point[1], str(point[0])
        out.append(RunState(str(folder), task, model, cfg.get("seed"), cfg.get("scale_name"), state, step,
                            checkpoint, record, "no config_resolved.yaml" if folder in missing else None))
    return out


def _table(rows: list[RunState]) -> str:
    header = ("state", "step", "task", "model", "seed", "scale", "folder")
    cells = [header] + [(r.state, "" if r.step is None else str(r.step), r.task or "?", r.model or "?",
                         "" if r.seed is None else str(r.seed), r.scale or "?", r.folder) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header) - 1)]
    notes = [""] + [f"  ({r.note})" if r.note else "" for r in rows]
    return "\n".join("  ".join(c[i].ljust(w) for i, w in enumerate(widths)) + "  " + c[-1] + note
                     for c, note in zip(cells, notes))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The run folders under outputs/ and where each one stands: "
                                     "finished, running, stopped (resumable) or failed.")
    parser.add_argument("--log-dir", type=Path, default=root_dir() / "outputs",
                        help="the runs' paths.log_dir (default: outputs/ where runs go: the checkout's, or the "
                             "current folder's with an installed package)")
    parser.add_argument("--left", action="store_true", help="only the runs not finished (stopped or failed)")
    parser.add_argument("--json", type=Path, help="also write the list as JSON to this file")
    args = parser.parse_args(argv)
    if not args.log_dir.is_dir():
        raise UserError(f"--log-dir {args.log_dir}: no such folder (the runs' paths.log_dir; default: outputs/ where "
                        "runs go)")
    rows = states(args.log_dir)
    if args.left:
        rows = [r for r in rows if r.state in ("stopped", "failed")]
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n", encoding="utf-8")
    if not rows:
        print(f"no {'unfinished ' if args.left else ''}run folders under {args.log_dir}")
        return 0
    print(_table(rows))
    counts = {s: sum(r.state == s for r in rows) for s in ("finished", "diverged", "running", "stopped", "failed")}
    print(", ".join(f"{n} {s}" for s, n in counts.items() if n))
    if counts["stopped"]:
        print("a stopped run goes on from its checkpoint with the same command and resume=auto (docs/running.md)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
