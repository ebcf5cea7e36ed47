"""``coda-exp compare``: a sweep's configurations side by side, from run records: per task and scale, one row per
group, the test metric over seeds against a reference group (Δ, Welch's p), how fast the validation curve rises
and, where a run measured it, CoDA's final gate (``coda_exp.comparison``).

    coda-exp compare                                  # every task of results/ and outputs/fixture_results/
    coda-exp compare --runs results --task snli [--out cmp.md]
    coda-exp compare --runs results/runs --runs /more/results --task mlu --metric test/acc_seq \\
        [--curve-metric val/acc_seq] [--reference transformer] [--thresholds 0.1 0.3] [--group model]

Records: every ``*.json`` of each ``--runs`` folder (its ``runs/`` subfolder when there is one); ``--task`` keeps
one task's runs, else each task is its own table(s). Default: where training writes them under the project root,
those of ``<root>/results`` and ``<root>/outputs/fixture_results`` (``scale=fixture``'s ``paths.results_root``: smoke
runs stay out of ``results/``) that exist; each scale is its own table, so fixture runs are never pooled with
others. Groups (``--group``): the model and its non-default CoDA options and configuration overrides, as
``coda-exp plot-curves`` labels them (``decompatt {optimizer.lr=0.001}``).

Defaults, read off the records of each task: the metric is the test metric matching the metric the runs monitored
(``val_curve_metric``, the task's ``task.monitor``: ``val/acc`` → ``test/acc``; an older record without it: its
task config's ``task.monitor``); the curve metric is the validation metric matching the metric (``test/bleu`` →
``val/bleu``); the reference, per table, is the plain configuration: the group with the fewest changed CoDA options and
overrides beyond those every group of the table shares, a model without CoDA before one with it, then by label
(``coda_exp.comparison.default_reference``). The console says which were taken. A ``--metric`` or
``--reference`` that no record has, an empty or missing folder, is one error naming what the records do have.

The Markdown goes to stdout (the notes and the defaults taken to stderr); ``--out FILE`` also writes it,
atomically. ``--thresholds`` with no value leaves out the steps columns.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from coda_exp.comparison import THRESHOLDS, Section, comparison_sections, render
from coda_exp.curves import GROUP_BY, load_run_records, monitored_metrics
from coda_exp.environment import config_dir, root_dir
from coda_exp.errors import UserError
from coda_exp.io import atomic_write_text, output_problem, write_problem

FIXTURE_RESULTS = Path("outputs", "fixture_results")  # configs/scale/fixture.yaml's paths.results_root, under the root


class CompareError(UserError, ValueError):
    """What ``coda-exp compare`` cannot compare (a folder without records, a metric or group no record has)."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, action="append", default=None,
                        help="a folder of run records, or a results folder with runs/ (repeatable; default: those of "
                             "results/ and outputs/fixture_results/ (scale=fixture's) of the project root that exist)")
    parser.add_argument("--task", default=None, help="only this task's runs (default: a table per task)")
    parser.add_argument("--out", type=Path, default=None, help="also write the Markdown to this file")
    parser.add_argument("--metric", default=None,
                        help="the test metric compared (default: each task's monitored one, as test/: test/acc)")
    parser.add_argument("--curve-metric", default=None,
                        help="the validation curve's metric (default: the metric's val/ counterpart)")
    parser.add_argument("--reference", default=None,
                        help="the group the others are tested against, as labelled (default: the plain configuration, "
                             "overrides every group shares aside; a model without CoDA first)")
    parser.add_argument("--thresholds", type=float, nargs="*", default=list(THRESHOLDS),
                        help="validation values whose first step is reported (0.1 0.3; none: no steps columns)")
    parser.add_argument("--group", choices=GROUP_BY, default="attention-variant",
                        help="one row per model, or per model, CoDA variant and overrides (default)")
    parser.add_argument("--title", default="Comparison", help="the Markdown's title (Comparison)")
    args = parser.parse_args(argv)
    args.default_runs = args.runs is None
    args.runs = args.runs or default_runs()
    return args


def default_runs() -> list[Path]:
    """The results folders that training writes to under the project root and that exist: ``results/`` and
    ``outputs/fixture_results/`` (``scale=fixture``'s ``paths.results_root``); both where neither exists."""
    root = root_dir()
    folders = [root / "results", root / FIXTURE_RESULTS]
    return [folder for folder in folders if folder.is_dir()] or folders


def load(folders: Sequence[Path], task: str | None, default: bool = False) -> list[dict]:
    """The training records of ``folders`` (of ``task`` only, where given; ``default``: :func:`default_runs`'); a
    CompareError where there is none."""
    where = ", ".join(map(str, folders))
    if default and not any(Path(folder).is_dir() for folder in folders):
        raise CompareError(f"no folder of run records: neither {' nor '.join(map(str, folders))} exists (a training "
                           "run writes its record to <paths.results_dir>/runs; --runs FOLDER reads another)")
    try:
        records = load_run_records(folders)
    except FileNotFoundError as err:
        raise CompareError(f"--runs: {err}") from None
    if not records:
        evals = sum(1 for folder in folders for p in (folder / "runs", folder) if p.is_dir() for _ in p.glob("*.json"))
        held = f"; its {evals} record(s) are evaluations (coda-exp eval), which compare leaves out" if evals else ""
        raise CompareError(f"no training run record in {where} (a training run writes its record to "
                           f"<paths.results_dir>/runs){held}")
    kept = [r for r in records if task is None or r["task"] == task]
    if not kept:
        tasks = sorted({str(r["task"]) for r in records})
        raise CompareError(f"no run record of task {task} in {where}; their tasks: {', '.join(tasks)}")
    return kept


def recorded_test_metrics(records: list[dict]) -> list[str]:
    """The ``test/`` metrics some of ``records`` have, sorted."""
    return sorted({k for r in records for k in r["metrics"] if k.startswith("test/")})


def monitor_of(task: str) -> str | None:
    """The ``task.monitor`` of the task's config (``configs/task/<task>.yaml``); None where it cannot be read."""
    import yaml

    try:
        text = (config_dir() / "task" / f"{task}.yaml").read_text(encoding="utf-8")
        monitor = (yaml.safe_load(text).get("task") or {}).get("monitor")
    except (OSError, ValueError, AttributeError, yaml.YAMLError):
        return None
    return monitor if isinstance(monitor, str) else None


def counterpart(metric: str, split: str) -> str:
    """``metric`` of another split: ``counterpart("val/acc", "test")`` is ``test/acc``."""
    return f"{split}/{metric.split('/', 1)[1]}" if "/" in metric else metric


def task_metrics(task: str, records: list[dict], metric: str | None, curve: str | None) -> tuple[str, str]:
    """(the metric compared, the curve's metric) for one task's records (module docstring)."""
    if metric is None:
        monitored = [*monitored_metrics(records), monitor_of(task)]
        have = {k for r in records for k in r["metrics"]}
        metric = next((counterpart(m, "test") for m in monitored if m and counterpart(m, "test") in have), None)
        if metric is None:
            said = ", ".join(dict.fromkeys(m for m in monitored if m)) or "none recorded"
            found = ", ".join(recorded_test_metrics(records)) or "none"
            raise CompareError(f"task {task}: no test metric matches the monitored one ({said}); their test metrics: "
                               f"{found}: choose one with --metric (and --task {task})")
    return metric, curve or counterpart(metric, "val")


def compare(records: list[dict], args: argparse.Namespace) -> list[Section]:
    """The sections of every task of ``records`` with the options of ``args``; a CompareError for a ``--metric`` or
    ``--reference`` no record has, naming what they have."""
    if args.metric is not None and not any(args.metric in r["metrics"] for r in records):
        raise CompareError(f"--metric {args.metric}: no run record has it; their test metrics: "
                           f"{', '.join(recorded_test_metrics(records)) or 'none'}")
    sections = []
    try:
        for task in sorted({r["task"] for r in records}):
            runs = [r for r in records if r["task"] == task]
            metric, curve = task_metrics(task, runs, args.metric, args.curve_metric)
            sections += comparison_sections(runs, metric, curve, args.reference, args.thresholds, args.group)
    except ValueError as err:  # a malformed record (its curve, its gate statistics), named
        raise CompareError(str(err)) from None
    fractions = [section for section in sections if section.percent]
    if fractions and (over := [t for t in args.thresholds if t > 1]):  # shown in percent, given in percent: never met
        raise CompareError(f"--thresholds {' '.join(f'{t:g}' for t in over)}: {fractions[0].curve_metric} is a fraction "
                           f"in [0, 1] (tables show it in percent): give {' '.join(f'{t / 100:g}' for t in over)} "
                           f"for {', '.join(f'{t:g} %' for t in over)}")
    groups = sorted({row.label for section in sections for row in section.rows})
    if args.reference is not None and not any(section.reference in groups for section in sections):
        raise CompareError(f"--reference {args.reference!r}: no group is; the groups: "
                           f"{', '.join(repr(g) for g in groups)}")
    return sections


def said(section: Section) -> str:
    """The console's line for one table: its metric and reference, and whether they were taken by default."""
    how = " (default; --reference to choose another)" if section.chosen else ""
    return (f"{section.task}, scale {section.scale}: {section.metric} (curves: {section.curve_metric}), "
            f"reference {section.reference!r}{how}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    wrong = args.out and output_problem("--out", args.out, "the table", folder=False, example="compare.md")
    if wrong:
        raise CompareError(wrong)
    records = load(args.runs, args.task, args.default_runs)
    if args.default_runs:
        print(f"run records of {', '.join(map(str, args.runs))} (default; --runs to choose)", file=sys.stderr)
    sections = compare(records, args)
    text = render(sections, args.thresholds, args.title,
                  source=f"{len(records)} run record(s) in {', '.join(map(str, args.runs))}")
    for section in sections:
        print(said(section) if section.rows else f"{section.task}, scale {section.scale}: {section.notes[0]}",
              file=sys.stderr)
    print(text, end="", flush=True)
    if args.out is not None:
        try:
            print(f"written to {atomic_write_text(args.out, text)}", file=sys.stderr)
        except OSError as err:
            raise CompareError(write_problem("--out", args.out, "the table", err)) from None
    return 0
