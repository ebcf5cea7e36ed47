"""``coda-exp plot-attconv``: Figures 5 and 8 of the AttConv paper, to PNG, from the test predictions the runs saved
(``python scripts/plot_attconv.py`` in a checkout; needs ``coda-exp[plots]``).

    coda-exp plot-attconv --figure 5 --runs results                # every AttConv Yelp run of results/runs
    coda-exp plot-attconv --figure 5 --records results/runs/*yelp_attconv*.json
    coda-exp plot-attconv --figure 8 --records results/runs/*fever_attconv*.json [--max-sentences 5]

Figure 5: accuracy over ``--groups`` (10) groups of Yelp test texts sorted by length (the paper: 10 groups of 200
of the 2,000 test reviews), one line per system. The length is each prediction row's ``length``: the text's tokens
before truncation to ``data.max_len``, saved by the text task. Ties in length keep the test file's order; the
groups are as equal in size as the test set allows (``numpy.array_split``).

Figure 8: accuracy of FEVER claims grouped by the number of sentences of their (smallest) gold evidence set, the
rows' ``num_gold_evidence``; NOT ENOUGH INFO claims (no gold evidence) are left out; sets of ``--max-sentences`` or
more are pooled into one group ("5+"). The paper plots the runs given gold evidence (``data.evidence=gold``): each
line says which evidence its runs had.

A system is the record's model, attention (the paper's softmax or CoDA), FEVER's ``contexts`` and evidence; the
runs of one system (seeds) are pooled: each group's accuracy is the mean over seeds, the line is labelled with the
number of runs. Which runs, as the tables pool them (:func:`select`): training runs (``coda-exp eval``'s records
re-evaluate a run: not one more seed), of the grid's configuration (a run with ``optimizer.lr=...`` is another
configuration), of one scale (``--scale``, else as the tables choose: ``paper`` where there is one, else the scale
with the most runs), and of each system and seed the latest run (an earlier one is superseded); each run left out is
named. ``--runs`` reads every record of a results folder (``coda_exp.curves.load_run_records``) and keeps the
AttConv runs of the figure's task. A figure of fixture runs says it is a smoke test. A run's predictions are read from its record's ``predictions`` path, else from
``<--predictions-dir>/<run_id>.jsonl.gz``. Output: ``--out`` (default ``figures/attconv_figure_<N>.png`` of the
records' results folder, beside their ``runs/``: ``results/figures`` for ``results/runs``,
``outputs/fixture_results/figures`` for fixture runs, which never go beside the committed figures).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from pathlib import Path

from coda_exp import extras
from coda_exp.experiments import fixture_data
from coda_exp.figures import default_figure

TITLES = {5: "Figure 5: Yelp test accuracy by text length", 8: "Figure 8: FEVER accuracy by gold evidence sentences"}
NEEDS = {5: "length", 8: "num_gold_evidence"}


def system_name(record: dict) -> str:
    """A line's label: model, + CoDA when its attention is CoDA, FEVER's contexts and evidence."""
    name = record["model"] + (" + CoDA" if record.get("attention", {}).get("name") == "coda" else "")
    if record.get("task") == "fever":
        contexts = record.get("hparams", {}).get("contexts")
        evidence = record.get("data", {}).get("evidence")
        name += "".join(f", {x}" for x in (contexts, evidence and f"{evidence} evidence") if x)
    return name


def predictions_of(record: dict, predictions_dir: Path | None) -> list[dict]:
    from coda_exp.results import prediction_paths
    from coda_exp.significance import read_predictions

    candidates = prediction_paths(record, predictions_dir)
    for path in candidates:
        if path.exists():
            return read_predictions(path)
    raise SystemExit(f"run {record['run_id']}: no saved test predictions (looked at {[str(p) for p in candidates]})")


def _accuracy(rows: list[dict]) -> float:
    return sum(r["prediction"] == r["label"] for r in rows) / len(rows)


def length_groups(rows: list[dict], groups: int) -> list[tuple[str, float, int]]:
    """Figure 5: (the group's length range "lo-hi", accuracy, examples) for ``groups`` groups sorted by length."""
    import numpy as np

    missing = [r["index"] for r in rows if r.get("length") is None]
    if missing:
        raise ValueError(f"{len(missing)} prediction row(s) without 'length' (e.g. index {missing[0]}): rerun the "
                         "model with the current code (the text task saves each text's length)")
    if len(rows) < groups:
        raise ValueError(f"{len(rows)} test texts cannot form {groups} groups")
    ordered = sorted(rows, key=lambda r: (r["length"], r["index"]))
    positions = np.array_split(np.arange(len(ordered)), groups)
    out = []
    for part in positions:
        chunk = [ordered[i] for i in part]
        out.append((f"{chunk[0]['length']}-{chunk[-1]['length']}", _accuracy(chunk), len(chunk)))
    return out


def evidence_groups(rows: list[dict], max_sentences: int) -> list[tuple[str, float, int]]:
    """Figure 8: (number of gold sentences, accuracy, claims) per count 1 .. ``max_sentences`` - 1 and
    ``max_sentences``+ pooled; counts without claims are left out; NEI claims (``num_gold_evidence`` null) too."""
    by_count: dict[int, list[dict]] = {}
    for r in rows:
        if "num_gold_evidence" not in r:
            raise ValueError(f"prediction row {r.get('index')} has no 'num_gold_evidence': not a FEVER run")
        if r["num_gold_evidence"] is not None:
            by_count.setdefault(min(int(r["num_gold_evidence"]), max_sentences), []).append(r)
    if not by_count:
        raise ValueError("no claim with gold evidence among the predictions")
    return [(f"{k}+" if k == max_sentences else str(k), _accuracy(v), len(v)) for k, v in sorted(by_count.items())]


def select(records: list[dict], scale: str | None = None) -> tuple[list[dict], list[str], str | None]:
    """(the runs to plot, a line per run left out and why, their scale): training runs (not ``mode: eval``), of the
    grid's configuration, of one scale (``scale``, else :func:`coda_exp.tables.choose_scale`'s), the latest per seed
    of each system (:func:`coda_exp.curves.latest_per_seed`)."""
    from coda_exp.curves import latest_per_seed, off_grid_overrides
    from coda_exp.tables import choose_scale

    kept, left_out, seen = [], [], set()
    for record in records:
        if record["run_id"] in seen:
            continue
        seen.add(record["run_id"])
        if record.get("mode") == "eval":
            left_out.append(f"{record['run_id']}: a re-evaluation (coda-exp eval) of "
                            f"{record.get('trained_run_id') or 'a checkpoint'}")
        elif other := off_grid_overrides(record):
            left_out.append(f"{record['run_id']}: another configuration ({' '.join(other)})")
        else:
            kept.append(record)
    counts: dict[str, int] = {}
    for record in kept:
        counts[str(record.get("scale"))] = counts.get(str(record.get("scale")), 0) + 1
    chosen = scale if scale is not None else choose_scale(counts) if counts else None
    left_out += [f"{r['run_id']}: scale {r.get('scale')} (the figure's: {chosen})" for r in kept
                 if str(r.get("scale")) != chosen]
    by_system: dict[str, list[dict]] = {}
    for record in kept:
        if str(record.get("scale")) == chosen:
            by_system.setdefault(system_name(record), []).append(record)
    out = []
    for runs in by_system.values():
        latest, superseded = latest_per_seed(runs)
        out += latest
        left_out += superseded
    return out, left_out, chosen


def series(records: list[dict], figure: int, predictions_dir: Path | None, groups: int = 10,
           max_sentences: int = 5) -> dict[str, tuple[list[str], list[float], int]]:
    """{system: (group labels, accuracy per group averaged over its runs, runs)}; every run of a system must give
    the same groups (the same test set)."""
    runs: dict[str, list[list[tuple[str, float, int]]]] = {}
    for record in records:
        rows = predictions_of(record, predictions_dir)
        grouped = length_groups(rows, groups) if figure == 5 else evidence_groups(rows, max_sentences)
        runs.setdefault(system_name(record), []).append(grouped)
    out = {}
    for name, per_run in runs.items():
        labels = [g[0] for g in per_run[0]]
        if any([g[0] for g in run] != labels for run in per_run):
            raise ValueError(f"{name}: its runs were tested on different test sets (groups {labels} differ)")
        means = [statistics.fmean(run[i][1] for run in per_run) for i in range(len(labels))]
        out[name] = (labels, means, len(per_run))
    return out


def figure(lines: dict[str, tuple[list[str], list[float], int]], figure_number: int, scale: str | None = None,
           fixture: bool | None = None):
    """One style per system (``coda_exp.figures.series_styles``), the legend below the axes, accuracy in percent."""
    extras.require("matplotlib", "coda-exp plot-attconv")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from coda_exp.figures import (
        axis_label,
        clamp_percent_axis,
        legend_outside,
        round_numbers,
        scale_title,
        series_styles,
    )

    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    for (name, (labels, accs, n)), style in zip(sorted(lines.items()), series_styles(len(lines))):
        ax.plot(range(len(labels)), [100 * a for a in accs], **style, label=round_numbers(f"{name} (n={n})"))
        ax.set_xticks(range(len(labels)), labels, rotation=30 if figure_number == 5 else 0)
    ax.set_xlabel("text length (tokens), groups of equal size" if figure_number == 5 else "gold evidence sentences")
    ax.set_ylabel(axis_label("test/acc", percent=True))
    clamp_percent_axis(ax)
    ax.set_title(scale_title(TITLES[figure_number], scale, fixture))
    ax.grid(alpha=0.3)
    legend_outside(fig, ax)
    return fig


def plot(lines: dict[str, tuple[list[str], list[float], int]], figure_number: int, out: Path,
         scale: str | None = None, fixture: bool | None = None) -> Path:
    import matplotlib.pyplot as plt

    fig = figure(lines, figure_number, scale, fixture)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> Path:
    from coda_exp.results import RecordError, read_record

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--figure", type=int, choices=sorted(TITLES), required=True)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--records", nargs="+", help="run record JSON files (results/runs/*.json)")
    source.add_argument("--runs", type=Path, action="append",
                        help="a results folder (or its runs/): its AttConv runs of the figure's task (repeatable)")
    parser.add_argument("--scale", default=None,
                        help="the runs' scale (default: as the tables choose: paper, else the one with most runs)")
    parser.add_argument("--predictions-dir", type=Path, default=None, help="where <run_id>.jsonl.gz lie otherwise")
    parser.add_argument("--groups", type=int, default=10, help="Figure 5: groups of texts (10)")
    parser.add_argument("--max-sentences", type=int, default=5, help="Figure 8: this many or more pooled (5)")
    parser.add_argument("--out", type=Path, default=None,
                        help="the PNG to write (default: figures/ of the records' results folder, beside their runs/)")
    args = parser.parse_args(argv)
    extras.require("matplotlib", "coda-exp plot-attconv")  # before any prediction is read
    if args.groups < 1 or args.max_sentences < 1:
        parser.error("--groups and --max-sentences must be >= 1")
    task = "yelp" if args.figure == 5 else "fever"
    if args.runs:
        from coda_exp.curves import load_run_records, runs_folder

        try:
            found = load_run_records(args.runs)
        except (OSError, ValueError) as err:
            parser.error(str(err))
        records = [r for r in found if r["task"] == task and r["model"].startswith("attconv")]
        if not records:  # the folders' other records, counted and named by task, not "among 0 record(s)"
            tasks = Counter(str(r.get("task")) for r in found)
            parser.error(f"no {task} AttConv run among the {len(found)} training record(s) of "
                         f"{', '.join(map(str, args.runs))}" + (" (their tasks: " + ", ".join(
                             f"{t} ×{n}" for t, n in sorted(tasks.items())) + ")" if tasks else ""))
        folder = runs_folder(args.runs[0])  # the figure goes beside the first folder's records
    else:
        try:
            records, folder = [read_record(p) for p in args.records], Path(args.records[0]).parent
        except RecordError as err:  # not JSON, not a record: one line naming the file
            parser.error(str(err))
    wrong = [r["run_id"] for r in records if r["task"] != task]
    if wrong:
        parser.error(f"Figure {args.figure} plots {task} runs; not: {', '.join(wrong)}")
    chosen, left_out, scale = select(records, args.scale)
    if not chosen:
        parser.error(f"no {task} run to plot among {len(records)} record(s)"
                     + (f" ({'; '.join(left_out[:5])})" if left_out else ""))
    try:
        lines = series(chosen, args.figure, args.predictions_dir, args.groups, args.max_sentences)
    except ValueError as err:
        parser.error(str(err))
    out = args.out or default_figure(f"attconv_figure_{args.figure}.png", folder, [scale])
    print(plot(lines, args.figure, out, scale, all(fixture_data(r) for r in chosen)))
    for name, (_, _, n) in sorted(lines.items()):
        print(f"  {name}: {n} run(s), scale {scale}")
    if left_out:
        print(f"  left out {len(left_out)} record(s): " + "; ".join(left_out), file=sys.stderr)
    return out
