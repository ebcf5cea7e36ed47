"""Comparison tables of a sweep's configurations from run records: what ``coda-exp compare`` (and the gate study's
``scripts/gate_ablation_table.py``, the same command) writes.

One :class:`Section` per task and scale (runs of different budgets are never pooled), one row per group
(``coda_exp.curves.group_label``: the model and its non-default CoDA options, e.g.
``coda_transformer[center_n=true]``, and any configuration beyond the plain one, e.g. ``decompatt {optimizer.lr=0.001}``);
the reference group first, then by label. Several runs of one group and seed: the latest (by ``created``) counts, the
others are listed under the table.

Columns: n (seeds); the metric's mean ± sample std over seeds and each seed's value (fractions shown in percent when
every value is in [0, 1]); Δ = mean − the reference's mean and Welch's two-sided p across seeds
(``coda_exp.significance.welch_test``; "—" with fewer than 2 seeds on a side or no spread); for each threshold, the
median over seeds of the first step at which the validation curve (``val_curve`` at ``val_curve_steps``; older
records: the validation interval, ``coda_exp.curves``) reaches it, with how many seeds reached it ("—" when none did;
a seed whose steps are unknown, or whose curve is another metric than the curve metric, is counted apart); the final
gate, only in a table where some run measured it (``callbacks=gate_stats``): the mean over layers of the last
measured mean gate g·f_N(N) and of the fraction of gates < 0.01 (``gate_stats``), averaged over the seeds that have
it.

The reference, where none is given (:func:`default_reference`): the plain configuration, the group whose runs set
the fewest CoDA options away from their defaults and configuration overrides, not counting those every run of the
table shares (a sweep's own ``data.dataset=toynli``: every label shows it, none is plainer for it), then a model
without CoDA before one with it, then by label: ``transformer`` beside ``coda_transformer``, ``decompatt`` beside
``decompatt {optimizer.lr=0.003}``, ``decompatt {data.dataset=toynli}`` beside ``decompatt {data.dataset=toynli,
model._target_=...}``. Overrides every group of a table shares are said once above it, not in each label shown
(:func:`shared_items`); a group keeps its whole label, and a reference is found by either.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from coda_exp.curves import (
    attention_options,
    attention_variant,
    first_step_reaching,
    group_label,
    latest_per_seed,
    off_grid_overrides,
    shown_in,
    validation_curve,
)
from coda_exp.figures import display_labels
from coda_exp.results import utc_now_iso
from coda_exp.significance import Welch, format_p, welch_test

DASH = "—"
FRACTION = "frac_lt_0.01"
THRESHOLDS = (0.1, 0.3)
KEY_DELTA = "Δ: group mean − reference mean; Welch p: two-sided, across seeds (— with fewer than 2 seeds on a side)."
KEY_STEPS = ("Steps: median first step at which the validation curve reaches the threshold over the seeds that reached "
             "it (reached / seeds with known steps; a seed without steps has no val_curve, no recorded steps nor "
             "validation interval, or a curve of another metric).")
KEY_GATE = ("Final gate: mean over CoDA layers of the last measured mean gate g·f_N(N) and share of gates < 0.01 "
            "(callbacks=gate_stats), averaged over seeds.")


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
    values: list[float]  # the metric per seed, as recorded
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
    reference: str | None  # None: no group to compare with (no run with the metric)
    metric: str
    curve_metric: str
    chosen: bool = False  # the reference is :func:`default_reference`'s, not given
    notes: list[str] = field(default_factory=list)

    @property
    def shared(self) -> list[str]:
        return shared_items([row.label for row in self.rows])

    @property
    def percent(self) -> bool:
        return all(0.0 <= v <= 1.0 for row in self.rows for v in row.values)

    @property
    def gates(self) -> bool:
        """Whether some run of the table measured its gate (its gate columns are shown)."""
        return any(row.gate_mean for row in self.rows)


def _label_parts(label: str) -> tuple[str, list[str]]:
    """``decompatt {data.dataset=toynli, optimizer.lr=0.003}`` -> (``decompatt``, its configuration overrides)."""
    head, sep, rest = label.partition(" {")
    return (head, rest[:-1].split(", ")) if sep and rest.endswith("}") else (label, [])


def shared_items(labels: Sequence[str]) -> list[str]:
    """The configuration overrides every group's label shows (a sweep's own ``data.dataset=toynli``): said once
    above the table, left out of the labels it shows (:func:`short_label`)."""
    items = [_label_parts(label)[1] for label in labels]
    if not items:
        return []
    common = set(items[0]).intersection(*items[1:])
    return [i for i in items[0] if i in common]


def short_label(label: str, shared: Sequence[str]) -> str:
    """A group's label without the overrides every group of its table shares (:attr:`Section.shared`)."""
    head, items = _label_parts(label)
    kept = [i for i in items if i not in shared]
    return f"{head} {{{', '.join(kept)}}}" if kept else head


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


def departures(record: dict) -> set[str]:
    """What sets the run apart from the plain configuration: its CoDA options away from their defaults
    (``[beta=0]``) and its configuration overrides beyond them (:func:`coda_exp.curves.off_grid_overrides`)."""
    variant = attention_variant(record)
    return ({f"[{key}={value!r}]" for key, value in variant.items()}
            | {o for o in off_grid_overrides(record) if not shown_in(o, variant)})


def default_reference(groups: dict[str, list[dict]]) -> str:
    """The group (label: its runs) the others are compared with when none is given (module docstring): the fewest
    :func:`departures` beyond those every run of the table shares (grouped by model: of its plainest run), then
    one without CoDA, then by label."""
    apart = {label: [departures(r) for r in runs] for label, runs in groups.items()}
    shared = set.intersection(*(d for runs in apart.values() for d in runs)) if groups else set()

    def order(label: str) -> tuple[int, bool, str]:
        extra = min(len(d - shared) for d in apart[label])
        coda = any(attention_options(r).get("name") == "coda" for r in groups[label])
        return extra, coda, label

    return min(groups, key=order)


def _row(label: str, records: list[dict], metric: str, curve_metric: str, thresholds: Sequence[float]) -> GroupRow:
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


def comparison_sections(records: list[dict], metric: str, curve_metric: str, reference: str | None = None,
                        thresholds: Sequence[float] = THRESHOLDS, group_by: str = "attention-variant") -> list[Section]:
    """One :class:`Section` per (task, scale) of ``records``, its rows the groups (reference first, then by label),
    each compared with the reference group by Welch's test; ``reference`` None: each section's
    :func:`default_reference`."""
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
        ref_label = default_reference(groups) if reference is None else reference
        if ref_label not in groups:  # given as shown, without the overrides every group shares
            shared = shared_items(list(groups))
            ref_label = next((g for g in groups if short_label(g, shared) == ref_label), ref_label)
        notes = []
        rows = []
        for label in sorted(groups, key=lambda g: (g != ref_label, g)):
            kept, superseded = latest_per_seed(groups[label])
            notes += [f"{label}: left out {s}" for s in superseded]
            rows.append(_row(label, kept, metric, curve_metric, thresholds))
        ref = next((row for row in rows if row.label == ref_label), None)
        if ref is None:
            notes.append(f"no reference group {ref_label!r} among these runs: no Δ, no p")
        for row in rows:
            if ref is not None and row is not ref:
                row.welch = welch_test(ref.values, row.values)
        if missing.get((task, scale)):
            notes.append(f"without {metric} (left out): {', '.join(missing[(task, scale)])}")
        sections.append(Section(task, scale, rows, ref_label, metric, curve_metric, reference is None, notes))
    for task, scale in sorted(set(missing) - set(by_section)):
        sections.append(Section(task, scale, [], reference, metric, curve_metric,
                                notes=[f"no run with {metric}: {', '.join(missing[(task, scale)])}"]))
    return sections


def _number(value: float, percent: bool) -> str:
    return f"{100 * value:.2f}" if percent else f"{value:.4g}"


def _threshold(t: float, percent: bool) -> str:
    return f"{100 * t:g} %" if percent else f"{t:g}"


def _table(section: Section, thresholds: Sequence[float]) -> list[str]:
    pct = section.percent
    unit = " (%)" if pct else ""
    delta_unit = " (points)" if pct else ""
    gate_header = ["final gate (mean)", "final gate < 0.01"] if section.gates else []
    shared = section.shared
    short = {row.label: short_label(row.label, shared) for row in section.rows}
    reference = short_label(section.reference or "", shared)
    header = ["group", "n", f"{section.metric}{unit}", "per seed", f"Δ vs {reference}{delta_unit}", "Welch p",
              *[f"steps to {section.curve_metric} ≥ {_threshold(t, pct)}" for t in thresholds], *gate_header]
    align = [" --- " if name in ("group", "per seed") else " ---: " for name in header]  # text left, numbers right
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    names = display_labels(list(short.values()))  # beta=0.177, unless two would read alike
    for row in section.rows:
        spread = "" if row.std is None else f" ± {_number(row.std, pct)}"
        per_seed = ", ".join(f"s{s}: {_number(v, pct)}" for s, v in zip(row.seeds, row.values))
        if row.welch is None:
            delta = p = DASH
        else:
            delta = f"{100 * row.welch.delta:+.2f}" if pct else f"{row.welch.delta:+.4g}"
            p = DASH if row.welch.p is None or math.isnan(row.welch.p) else format_p(row.welch.p)
        gate_cells = []
        if section.gates:
            gate = DASH if not row.gate_mean else f"{statistics.fmean(row.gate_mean):.3f}"
            closed = DASH if not row.gate_closed else f"{100 * statistics.fmean(row.gate_closed):.1f} %"
            if row.gate_mean and len(row.gate_mean) < len(row.seeds):
                gate += f" ({len(row.gate_mean)}/{len(row.seeds)} seeds)"
            gate_cells = [gate, closed]
        cells = [names[short[row.label]], str(len(row.seeds)), f"{_number(row.mean, pct)}{spread}", per_seed, delta, p,
                 *[row.reach[t].text() for t in thresholds], *gate_cells]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render(sections: list[Section], thresholds: Sequence[float] = THRESHOLDS, title: str = "Comparison",
           generated: str | None = None, source: str = "") -> str:
    """The Markdown of :func:`comparison_sections`' tables: ``# <title>: <metric>`` (the metric where every section
    has the same), a ``## <task>, scale <scale>`` table per section with its notes, and the key of the columns."""
    metrics = sorted({section.metric for section in sections})
    lines = [f"# {title}" + (f": {metrics[0]}" if len(metrics) == 1 else ""), "",
             f"Generated {generated or utc_now_iso()}" + (f" from {source}" if source else "") + ".", ""]
    for section in sections:
        lines += [f"## {section.task}, scale {section.scale}", ""]
        if section.shared:
            lines += [f"Every group: {{{', '.join(section.shared)}}}.", ""]
        if section.rows:
            lines += [*_table(section, thresholds), ""]
        lines += [f"- {note}" for note in section.notes]
        if section.notes:
            lines.append("")
    key = [KEY_DELTA, KEY_STEPS if thresholds else "", KEY_GATE if any(s.gates for s in sections) else ""]
    lines += [" ".join(k for k in key if k), ""]
    return "\n".join(lines)


def build_markdown(records: list[dict], metric: str, curve_metric: str, reference: str | None = None,
                   thresholds: Sequence[float] = THRESHOLDS, group_by: str = "attention-variant",
                   title: str = "Comparison", generated: str | None = None, source: str = "") -> str:
    """The whole table from run records of one metric: :func:`comparison_sections` rendered by :func:`render`."""
    sections = comparison_sections(records, metric, curve_metric, reference, thresholds, group_by)
    return render(sections, thresholds, title, generated, source)
