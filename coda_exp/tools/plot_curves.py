"""``coda-exp plot-curves``: learning curves from run records, the validation metric (y) against training steps (x),
one line per run (``python scripts/plot_learning_curves.py`` in a checkout; needs ``coda-exp[plots]``).

    coda-exp plot-curves --runs results --out results/figures/mlu_learning_curves.png --table table_6
    coda-exp plot-curves --runs results/runs --runs /other/results --task mlu --out curves.png \\
        [--metric val/acc_seq] [--group model|attention-variant]

Records: every ``*.json`` of each ``--runs`` folder (its ``runs/`` subfolder when there is one); ``--task`` keeps one
task's runs, ``--table ID`` only the runs that table's cells pool (``configs/tables/<ID>.yaml``: its grid
configuration, the scale it shows, the latest run per seed; ``coda_exp.tables``). Of several runs of one seed,
configuration and scale only the latest counts, as in the tables (``coda_exp.curves.latest_per_seed``; the others
are listed as left out), so a group's mean is its table cell's. The curve is the record's ``val_curve``, the run's
monitored metric after each validation (its ``val_curve_metric``): without ``--metric`` the records' own monitored
metric (runs of several metrics are one error naming them: pick one with ``--metric`` or ``--task``); with it, a
run whose ``val_curve_metric`` is another is left out (an older record without it is taken to be of ``--metric``),
and so is one without a curve.

Steps: the record's ``val_curve_steps``; without them, the validation interval of its overrides or hparams, else the
validation index (the x label says so; ``coda_exp.curves``). Lines: one style per group (``--group``: the model, or
the model and its CoDA variant (default), e.g. ``coda_transformer[center_n=true]``): a colour of a qualitative
colormap, and a line style and marker past ten groups (``coda_exp.figures``); each run thin, and the mean over a
group's runs bold where it has several (at the steps every run of the group has), one legend entry per group, below
the axes; numbers in labels rounded to 3 digits; the y axis named in words ("validation sequence accuracy (%)").
Written atomically as PNG (Matplotlib's Agg backend); the command prints the file and what it plotted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from coda_exp import extras
from coda_exp.curves import (
    GROUP_BY,
    Curve,
    group_label,
    latest_per_seed,
    load_run_records,
    monitored_metrics,
    validation_curve,
)
from coda_exp.environment import config_dir
from coda_exp.errors import USER_ERROR_EXIT
from coda_exp.experiments import fixture_data, table_grid
from coda_exp.figures import (
    axis_label,
    clamp_percent_axis,
    display_labels,
    legend_outside,
    round_numbers,
    scale_title,
    series_styles,
)
from coda_exp.io import atomic_write, output_problem, write_problem

X_LABELS = {"steps": "training step", "interval": "training step (from the validation interval where not recorded)",
            "index": "validation (steps not recorded)"}


def table_run_ids(table: str, records: list[dict], specs: Path | None = None) -> set[str]:
    """The run ids the cells of table ``table`` pool from ``records`` (its spec in ``specs``, default the configs'
    ``tables/``)."""
    from coda_exp.tables import build_table, load_table_spec

    specs = config_dir() / "tables" if specs is None else specs
    path = specs / f"{table}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in specs.glob("*.yaml"))
        raise ValueError(f"--table {table}: no table spec {path}; known: {known}")
    built = build_table(load_table_spec(path), records)
    return {run_id for row in built.cells for cell in row for run_id in cell.run_ids}


def select(records: list[dict], metric: str | None, task: str | None = None,
           run_ids: set[str] | None = None) -> tuple[list[dict], list[str]]:
    """(the records to plot, why each other one is left out); ``metric`` None: any curve's."""
    kept, skipped = [], []
    for record in records:
        why = None
        if task is not None and record["task"] != task:
            why = f"task {record['task']}"
        elif run_ids is not None and record["run_id"] not in run_ids:
            why = "not in the table's cells"
        elif metric is not None and record.get("val_curve_metric", metric) != metric:
            why = f"its curve is {record['val_curve_metric']}"
        elif not record.get("val_curve"):
            why = "no val_curve"
        if why is None:
            kept.append(record)
        else:
            skipped.append(f"{record['run_id']}: {why}")
    return kept, skipped


def drop_superseded(records: list[dict], grid: list[str] = ()) -> tuple[list[dict], list[str]]:
    """(the latest run per seed of each task, configuration and scale, as the tables pool them, in ``records``'
    order; a line per run a later one superseded). A configuration is a run's attention variant and its
    configuration beyond the grid (:func:`coda_exp.curves.group_label`)."""
    buckets: dict[tuple, list[dict]] = {}
    for record in records:
        key = (record["task"], group_label(record, "attention-variant", grid), str(record.get("scale")))
        buckets.setdefault(key, []).append(record)
    kept, superseded = set(), []
    for runs in buckets.values():
        latest, gone = latest_per_seed(runs)
        kept.update(id(r) for r in latest)
        superseded += gone
    return [r for r in records if id(r) in kept], superseded


def curve_metric(records: list[dict], metric: str | None) -> str:
    """The metric the curves of ``records`` show: ``metric`` where given, else their one ``val_curve_metric``
    (``val/acc_seq`` where none records it: older MLU records); ValueError naming them where they have several."""
    if metric is not None:
        return metric
    counts = monitored_metrics(records)
    if len(counts) > 1:
        found = ", ".join(f"{m} ({n} run(s))" for m, n in sorted(counts.items()))
        raise ValueError(f"--metric: the runs' curves are of {len(counts)} metrics, {found}; plot one with --metric "
                         "<one of them> (or keep one task's runs with --task)")
    return next(iter(counts), "val/acc_seq")


def group_curves(records: list[dict], by: str, grid: list[str] = ()) -> dict[str, list[tuple[dict, Curve]]]:
    """{group label: [(record, curve), ...]}, groups sorted by label, runs by seed then run id. Runs of different
    scales (budgets: ``cpu`` and ``cpu (task.max_steps=5000)``) are never one group: when the records span several,
    each label ends with its scale (`` @ <scale>``)."""
    several_scales = len({str(r.get("scale")) for r in records}) > 1
    groups: dict[str, list[tuple[dict, Curve]]] = {}
    for record in sorted(records, key=lambda r: (r["seed"], r["run_id"])):
        label = group_label(record, by, grid) + (f" @ {record.get('scale')}" if several_scales else "")
        groups.setdefault(label, []).append((record, validation_curve(record)))
    return dict(sorted(groups.items()))


def mean_curve(curves: list[Curve]) -> tuple[list[int], list[float]]:
    """The mean of the curves at the steps all of them have (each run's last value at a repeated step)."""
    points = [dict(zip(c.steps, c.values)) for c in curves]
    common = sorted(set.intersection(*(set(p) for p in points))) if points else []
    return common, [statistics.fmean(p[s] for p in points) for s in common]


def plot(groups: dict[str, list[tuple[dict, Curve]]], metric: str, out: Path, title: str) -> Path:
    """The figure (:func:`figure`) written atomically as PNG to ``out``."""
    extras.require("matplotlib", "coda-exp plot-curves")
    import matplotlib.pyplot as plt

    fig = figure(groups, metric, title)
    try:
        with atomic_write(out, "wb") as f:
            fig.savefig(f, format="png", dpi=120)
    finally:
        plt.close(fig)
    return out


def figure(groups: dict[str, list[tuple[dict, Curve]]], metric: str, title: str):
    """One style per group (``coda_exp.figures.series_styles``), each run thin and the mean bold where a group has
    several, one legend entry per group below the axes, numbers in labels rounded, the metric's human name on
    the y axis (fractions in percent)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(8, 4.5), layout="constrained")
    values = [v for runs in groups.values() for _, curve in runs for v in curve.values]
    percent = bool(values) and all(0.0 <= v <= 1.0 for v in values)  # a fraction (accuracy...): shown in percent
    scale = 100.0 if percent else 1.0
    names = display_labels(list(groups))
    kinds, several_anywhere = set(), False
    for (label, runs), style in zip(groups.items(), series_styles(len(groups))):
        steps, means = mean_curve([c for _, c in runs]) if len(runs) > 1 else ([], [])
        several = bool(steps)  # a mean to draw: the runs share validation steps
        several_anywhere |= several
        for n, (record, curve) in enumerate(runs):
            kinds.add(curve.kind)
            ax.plot(curve.steps, [scale * v for v in curve.values], **style, markersize=3,
                    linewidth=0.9 if several else 2.0, alpha=0.4 if several else 1.0,
                    label=None if several or n else f"{names[label]} (seed{'s' if len(runs) > 1 else ''} "
                    f"{', '.join(str(r['seed']) for r, _ in runs)})")
        if several:
            seeds = [r["seed"] for r, _ in runs]
            of = f"{len(runs)} seeds" if len(set(seeds)) == len(seeds) else f"{len(runs)} runs (seeds {seeds})"
            ax.plot(steps, [scale * v for v in means], color=style["color"], linestyle=style["linestyle"],
                    linewidth=2.6, label=f"{names[label]}: mean of {of}")
    kind = "index" if "index" in kinds else "interval" if "interval" in kinds else "steps"
    ax.set_xlabel(X_LABELS[kind])
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(axis_label(metric, percent))
    if percent:
        clamp_percent_axis(ax)
    ax.set_title(round_numbers(title))
    ax.grid(alpha=0.3)
    legend_outside(fig, ax, title="thin lines: single seeds of a mean" if several_anywhere else None)
    return fig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, action="append", required=True,
                        help="a folder of run records, or a results folder with runs/ (repeatable)")
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    parser.add_argument("--metric", default=None,
                        help="the validation metric of the curves (default: the runs' own monitored metric, "
                             "val_curve_metric: val/acc_seq for MLU, val/map for WikiQA...)")
    parser.add_argument("--group", choices=GROUP_BY, default="attention-variant",
                        help="one colour per model, or per model and CoDA variant (default)")
    parser.add_argument("--task", default=None, help="only this task's runs")
    parser.add_argument("--table", default=None, metavar="ID",
                        help="only the runs the cells of configs/tables/<ID>.yaml pool (e.g. table_6)")
    parser.add_argument("--title", default=None)
    args = parser.parse_args(argv)
    extras.require("matplotlib", "coda-exp plot-curves")  # before any record is read
    wrong = output_problem("--out", args.out, "the figure (PNG)", folder=False, example="learning_curves.png")
    if not wrong and args.out.suffix.lower() != ".png":  # (a PNG named x.txt was written)
        wrong = f"--out {args.out}: the figure is a PNG; expected a file name ending in .png"
    if wrong:
        print(f"error: {wrong}", file=sys.stderr)
        return USER_ERROR_EXIT
    try:
        records = load_run_records(args.runs)
        run_ids = table_run_ids(args.table, records) if args.table else None
        grid = table_grid(args.table) if args.table else []  # its experiments' settings: no group label repeats them
        kept, skipped = select(records, args.metric, args.task, run_ids)
        if not kept:
            others = [] if args.metric is None else sorted(
                {r["val_curve_metric"] for r in records if r.get("val_curve_metric") not in (None, args.metric)})
            raise ValueError(f"no run to plot among {len(records)} record(s) in {', '.join(map(str, args.runs))}"
                             + (f" ({'; '.join(skipped[:5])})" if skipped else "")
                             + (f"; their curves: --metric {' or --metric '.join(others)}" if others else ""))
        metric = curve_metric(kept, args.metric)
        kept, superseded = drop_superseded(kept, grid)
        skipped += superseded
        groups = group_curves(kept, args.group, grid)
    except (OSError, ValueError) as err:  # a missing folder, a record to skip: the user's input
        print(f"error: {err}", file=sys.stderr)
        return USER_ERROR_EXIT
    tasks = sorted({r["task"] for r in kept})
    title = args.title or scale_title(f"{', '.join(tasks)}{f' ({args.table})' if args.table else ''}: "
                                      f"{axis_label(metric)} during training", [r.get("scale") for r in kept],
                                      bool(kept) and all(fixture_data(r) for r in kept))
    try:
        print(plot(groups, metric, args.out, title))
    except OSError as err:  # its folder: no permission, a full disk
        print(f"error: {write_problem('--out', args.out, 'the figure', err)}", file=sys.stderr)
        return USER_ERROR_EXIT
    for label, runs in groups.items():
        print(f"  {label}: {len(runs)} run(s), seeds {sorted(r['seed'] for r, _ in runs)}")
    if skipped:
        print(f"  left out {len(skipped)} record(s): " + "; ".join(skipped), file=sys.stderr)
    return 0
