#!/usr/bin/env python
"""Gate ablation table (Markdown): per model / CoDA variant, test accuracy over seeds against a reference, how fast
the validation curve rises and where CoDA's gate ends.

    python scripts/gate_ablation_table.py --runs results --out results/tables/mlu_gate_ablation.md
    python scripts/gate_ablation_table.py --runs results/runs --runs /more/results --task mlu --out ablation.md \\
        [--reference transformer] [--metric test/acc_seq] [--curve-metric val/acc_seq] [--thresholds 0.1 0.3]

Records: every ``*.json`` of each ``--runs`` folder (its ``runs/`` subfolder when there is one); ``--task`` keeps one
task. One table per task and scale (runs of different budgets are never pooled), one row per group
(``--group``, ``coda_exp.curves.group_label``: the model and its non-default CoDA options, e.g.
``coda_transformer[center_n=true]``, and any configuration beyond the grid); the reference group first. Several runs
of one group and seed: the latest (by ``created``) counts, the others are listed under the table.

Columns: n (seeds); ``--metric`` mean ± sample std over seeds and each seed's value (fractions shown in percent
when every value is in [0, 1]); Δ = mean − the reference's mean and Welch's two-sided p across seeds
(``coda_exp.significance.welch_test``; "—" with fewer than 2 seeds on a side or no spread); for each threshold, the
median over seeds of the first step at which the validation curve (``val_curve`` at ``val_curve_steps``; older
records: the validation interval, ``coda_exp.curves``) reaches it, with how many seeds reached it ("—" when none did;
a seed whose steps are unknown, or whose curve is another metric than ``--curve-metric``, is counted apart); the
final gate: the mean over layers of the last measured mean gate g·f_N(N) and of the fraction of gates < 0.01
(``gate_stats``, recorded with ``callbacks=gate_stats``), averaged over the seeds that have it. Written atomically;
the script prints the file.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a plain script from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("CODA_EXP_ROOT", str(ROOT))

from coda_exp.curves import (
    GROUP_BY,
    first_step_reaching,
    group_label,
    latest_per_seed,
    load_run_records,
    validation_curve,
)
from coda_exp.figures import display_labels
from coda_exp.io import atomic_write_text
from coda_exp.results import utc_now_iso
from coda_exp.significance import Welch, format_p, welch_test

DASH = "—"
FRACTION = "frac_lt_0.01"
KEY = ("Δ: group mean − reference mean; Welch p: two-sided, across seeds (— with fewer than 2 seeds on a side). Steps: "
       "median first step at which the validation curve reaches the threshold over the seeds that reached it (reached "
       "/ seeds with known steps; a seed without steps has no val_curve, no recorded steps nor validation interval, or "
       "a curve of another metric). Final gate: mean over CoDA layers of the last measured mean gate g·f_N(N) and "
       "share of gates < 0.01 (callbacks=gate_stats), averaged over seeds.")


@dataclass
class Reach:
    """When one group's seeds first reached a validation threshold: the steps of those that did, and how many
    seeds had known steps / none."""

    steps: list[int] = field(default_factory=list)
    known: int = 0
    unknown: int = 0

    def text(self) -> str:
        if not self.known:
            return f"n/a ({self.unknown} without steps)" if self.unknown else DASH
        median = statistics.median(self.steps) if self.steps else None
        head = DASH if median is None else f"{median:.0f}" if float(median).is_integer() else f"{median:.1f}"
        tail = f", {self.unknown} without steps" if self.unknown else ""
        return f"{head} ({len(self.steps)}/{self.known} reached{tail})"


@dataclass
class GroupRow:
    label: str
    seeds: list[int]
    values: list[float]  # --metric per seed, as recorded
    reach: dict[float, Reach]
    gate_mean: list[float]  # the final mean gate of each seed that measured it
    gate_closed: list[float]  # the final fraction of gates < 0.01 of each seed that measured it
    welch: Welch | None = None  # against the reference; None for the reference itself or without one

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def std(self) -> float | None:
        return statistics.stdev(self.values) if len(self.values) > 1 else None


@dataclass
class Section:
    task: str
    scale: str
    rows: list[GroupRow]
    reference: str
    notes: list[str] = field(default_factory=list)

    @property
    def percent(self) -> bool:
        return all(0.0 <= v <= 1.0 for row in self.rows for v in row.values)


def final_gate(record: dict) -> tuple[float, float] | None:
    """(mean over layers of the last mean gate, of the last fraction < 0.01) of ``gate_stats``; None when the run
    did not measure it (or its model has no CoDA layer). ValueError naming the record and key when malformed."""
    stats = record.get("gate_stats")
    if not stats:
        return None
    where = f"run record {record['run_id']}.json: key 'gate_stats'"
    if not isinstance(stats, dict):
        raise ValueError(  # noqa: TRY004 (a record's value: the same error as every other bad record)
            f"{where}: expected {{layer: {{steps, mean, {FRACTION}}}}}, got {type(stats).__name__}")
    means, closed = [], []
    for layer, series in stats.items():
        if not isinstance(series, dict) or not all(isinstance(series.get(k), list) for k in ("mean", FRACTION)):
            raise ValueError(f"{where}: layer {layer!r} has no 'mean' and {FRACTION!r} lists")
        if series["mean"] and series[FRACTION]:
            means.append(float(series["mean"][-1]))
            closed.append(float(series[FRACTION][-1]))
    return (statistics.fmean(means), statistics.fmean(closed)) if means else None


def _row(label: str, records: list[dict], metric: str, curve_metric: str, thresholds: list[float]) -> GroupRow:
    reach = {t: Reach() for t in thresholds}
    gate_mean, gate_closed = [], []
    for record in records:
        curve = validation_curve(record)
        same_metric = record.get("val_curve_metric", curve_metric) == curve_metric
        for threshold, r in reach.items():
            if not (curve.has_steps and same_metric and curve.values):
                r.unknown += 1
                continue
            r.known += 1
            step = first_step_reaching(curve, threshold)
            if step is not None:
                r.steps.append(step)
        gate = final_gate(record)
        if gate is not None:
            gate_mean.append(gate[0])
            gate_closed.append(gate[1])
    return GroupRow(label, [r["seed"] for r in records], [float(r["metrics"][metric]) for r in records], reach,
                    gate_mean, gate_closed)


def ablation_sections(records: list[dict], reference: str = "transformer", metric: str = "test/acc_seq",
                      curve_metric: str = "val/acc_seq", thresholds: list[float] = (0.1, 0.3),
                      group_by: str = "attention-variant") -> list[Section]:
    """One :class:`Section` per (task, scale) of ``records``, its rows the groups (reference first, then by label),
    each compared with the reference group by Welch's test."""
    by_section: dict[tuple[str, str], dict[str, list[dict]]] = {}
    missing: dict[tuple[str, str], list[str]] = {}
    for record in records:
        key = (record["task"], record["scale"])
        if metric not in record["metrics"]:
            missing.setdefault(key, []).append(record["run_id"])
            continue
        by_section.setdefault(key, {}).setdefault(group_label(record, group_by), []).append(record)
    sections = []
    for (task, scale), groups in sorted(by_section.items()):
        notes = []
        rows = []
        for label in sorted(groups, key=lambda g: (g != reference, g)):
            kept, superseded = latest_per_seed(groups[label])
            notes += [f"{label}: left out {s}" for s in superseded]
            rows.append(_row(label, kept, metric, curve_metric, list(thresholds)))
        ref = next((row for row in rows if row.label == reference), None)
        if ref is None:
            notes.append(f"no reference group {reference!r} among these runs: no Δ, no p")
        for row in rows:
            if ref is not None and row is not ref:
                row.welch = welch_test(ref.values, row.values)
        if missing.get((task, scale)):
            notes.append(f"without {metric} (left out): {', '.join(missing[(task, scale)])}")
        sections.append(Section(task, scale, rows, reference, notes))
    for task, scale in sorted(set(missing) - set(by_section)):
        sections.append(Section(task, scale, [], reference,
                                [f"no run with {metric}: {', '.join(missing[(task, scale)])}"]))
    return sections


def _number(value: float, percent: bool) -> str:
    return f"{100 * value:.2f}" if percent else f"{value:.4g}"


def _threshold(t: float, percent: bool) -> str:
    return f"{100 * t:g} %" if percent else f"{t:g}"


def render(sections: list[Section], metric: str = "test/acc_seq", curve_metric: str = "val/acc_seq",
           thresholds: list[float] = (0.1, 0.3), generated: str | None = None, source: str = "") -> str:
    """The Markdown of :func:`ablation_sections`' tables."""
    lines = [f"# Gate ablation: {metric}", "",
             f"Generated {generated or utc_now_iso()}" + (f" from {source}" if source else "") + ".", ""]
    for section in sections:
        lines += [f"## {section.task}, scale {section.scale}", ""]
        if not section.rows:
            lines += [f"- {note}" for note in section.notes] + [""]
            continue
        pct = section.percent
        unit = " (%)" if pct else ""
        delta_unit = " (points)" if pct else ""
        header = ["group", "n", f"{metric}{unit}", "per seed", f"Δ vs {section.reference}{delta_unit}", "Welch p",
                  *[f"steps to {curve_metric} ≥ {_threshold(t, pct)}" for t in thresholds],
                  "final gate (mean)", "final gate < 0.01"]
        align = [" --- " if name in ("group", "per seed") else " ---: " for name in header]  # text left, numbers right
        lines += ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
        names = display_labels([row.label for row in section.rows])  # beta=0.177, unless two would read alike
        for row in section.rows:
            spread = "" if row.std is None else f" ± {_number(row.std, pct)}"
            per_seed = ", ".join(f"s{s}: {_number(v, pct)}" for s, v in zip(row.seeds, row.values))
            if row.welch is None:
                delta = p = DASH
            else:
                delta = f"{100 * row.welch.delta:+.2f}" if pct else f"{row.welch.delta:+.4g}"
                p = DASH if row.welch.p is None or math.isnan(row.welch.p) else format_p(row.welch.p)
            gate = DASH if not row.gate_mean else f"{statistics.fmean(row.gate_mean):.3f}"
            closed = DASH if not row.gate_closed else f"{100 * statistics.fmean(row.gate_closed):.1f} %"
            if row.gate_mean and len(row.gate_mean) < len(row.seeds):
                gate += f" ({len(row.gate_mean)}/{len(row.seeds)} seeds)"
            cells = [names[row.label], str(len(row.seeds)), f"{_number(row.mean, pct)}{spread}", per_seed, delta, p,
                     *[row.reach[t].text() for t in thresholds], gate, closed]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        lines += [f"- {note}" for note in section.notes]
        if section.notes:
            lines.append("")
    lines += [KEY, ""]
    return "\n".join(lines)


def build_markdown(records: list[dict], reference: str = "transformer", metric: str = "test/acc_seq",
                   curve_metric: str = "val/acc_seq", thresholds: list[float] = (0.1, 0.3),
                   group_by: str = "attention-variant", generated: str | None = None, source: str = "") -> str:
    """The whole table from run records: :func:`ablation_sections` rendered by :func:`render`."""
    sections = ablation_sections(records, reference, metric, curve_metric, thresholds, group_by)
    return render(sections, metric, curve_metric, thresholds, generated, source)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, action="append", required=True,
                        help="a folder of run records, or a results folder with runs/ (repeatable)")
    parser.add_argument("--out", type=Path, required=True, help="the Markdown file to write")
    parser.add_argument("--reference", default="transformer", help="the group the others are tested against")
    parser.add_argument("--task", default=None, help="only this task's runs")
    parser.add_argument("--metric", default="test/acc_seq")
    parser.add_argument("--curve-metric", default="val/acc_seq", help="the validation curve's metric")
    parser.add_argument("--thresholds", type=float, nargs="+", default=[0.1, 0.3],
                        help="validation values whose first step is reported (0.1 0.3)")
    parser.add_argument("--group", choices=GROUP_BY, default="attention-variant")
    args = parser.parse_args(argv)
    try:
        records = [r for r in load_run_records(args.runs) if args.task is None or r["task"] == args.task]
        if not records:
            raise ValueError(f"no run record{f' of task {args.task}' if args.task else ''} in "
                             f"{', '.join(map(str, args.runs))}")
        text = build_markdown(records, args.reference, args.metric, args.curve_metric, args.thresholds, args.group,
                              source=f"{len(records)} run record(s) in {', '.join(map(str, args.runs))}")
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for line in option_warnings(records, args.reference, args.metric, args.group):
        print(f"warning: {line}", file=sys.stderr)
    print(atomic_write_text(args.out, text))
    return 0


def option_warnings(records: list[dict], reference: str, metric: str, group_by: str) -> list[str]:
    """What the table's notes say where the defaults (the MLU study's) do not fit the records, said on the console
    too, with what would: a ``--metric`` no record has (their test metrics), a ``--reference`` no group is (the
    groups, as labelled)."""
    lines = []
    if not any(metric in r["metrics"] for r in records):
        have = sorted({k for r in records for k in r["metrics"] if k.startswith("test/")})
        lines.append(f"no record has {metric}: its column is empty (--metric; their test metrics: {', '.join(have)})")
    groups = sorted({group_label(r, group_by) for r in records if metric in r["metrics"]})
    if groups and reference not in groups:
        lines.append(f"no group is {reference!r}: no Δ, no p (--reference; the groups: "
                     f"{', '.join(repr(g) for g in groups)})")
    return lines


if __name__ == "__main__":
    sys.exit(main())
