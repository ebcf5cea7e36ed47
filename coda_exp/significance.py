"""Is CoDA's gain over softmax real or noise? Significance tests for pairs of table cells.

Two tests, both two-sided, both from ``scipy.stats``:

- **Across seeds: Welch's t-test** (unequal variances, ``scipy.stats.ttest_ind(..., equal_var=False)``) on the two
  cells' per-seed values: ``t = (mean_b - mean_a) / sqrt(s_a²/n_a + s_b²/n_b)`` with Welch–Satterthwaite degrees of
  freedom. Undefined (no p) with fewer than two seeds in a cell or no spread in either.
- **On the test predictions of matched seeds: McNemar's exact test**, for metrics with one right/wrong outcome
  per test unit (accuracy: per example; R_N@1 on UDC: per context). For every seed run by both models on the
  same test set, ``b`` counts units the baseline gets right and the treatment wrong, ``c`` the reverse; ``b`` and
  ``c`` are summed over the matched seeds and ``p`` is the two-sided exact binomial test of ``b`` successes in
  ``b + c`` trials at 1/2 (``scipy.stats.binomtest``: ``min(1, 2 · P[X <= min(b, c)])``, ``X ~ Binomial(b + c,
  1/2)``); no discordant pair gives p = 1. Pooling treats (seed, example) outcomes as independent, which ignores
  the correlation between seeds of one model: the seed-level Welch test is the conservative one, the pooled McNemar
  test the powerful one.

The table glue (:func:`compare_table`) fills, for each ``compare: [[baseline row, treatment row]]`` of a table
spec and each column, a :class:`Comparison`: the difference of means (treatment − baseline, display units), the
paper's difference, Welch's p and, where predictions were kept, McNemar's p.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
import warnings
from dataclasses import dataclass
from pathlib import Path

from scipy import stats

from coda_exp.results import prediction_paths

# ---- the two tests ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Welch:
    delta: float  # mean(b) - mean(a)
    t: float | None
    df: float | None
    p: float | None  # None when the test is undefined (n < 2 or no spread in either cell)
    n_a: int
    n_b: int


def welch_test(a: list[float], b: list[float]) -> Welch:
    """Welch's unequal-variance t-test of mean(b) - mean(a) (``scipy.stats.ttest_ind``); two-sided p."""
    if not a or not b:
        raise ValueError("welch_test needs at least one value per group")
    delta = statistics.fmean(b) - statistics.fmean(a)
    if len(a) < 2 or len(b) < 2 or statistics.variance(a) + statistics.variance(b) == 0.0:
        return Welch(delta, None, None, None, len(a), len(b))
    with warnings.catch_warnings():  # one cell of identical values is a valid input (its variance is 0)
        warnings.filterwarnings("ignore", message="Precision loss occurred", category=RuntimeWarning)
        res = stats.ttest_ind(b, a, equal_var=False)
    return Welch(delta, float(res.statistic), float(res.df), float(res.pvalue), len(a), len(b))


def mcnemar_exact_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p for ``b`` and ``c`` discordant pairs (``scipy.stats.binomtest(b, b + c, 1/2)``:
    ``min(1, 2 P[Bin(b+c, 1/2) <= min(b, c)])``); 1 without discordant pairs."""
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got {b}, {c}")
    if b + c == 0:
        return 1.0
    return float(stats.binomtest(b, b + c, 0.5).pvalue)


# ---- per-unit outcomes from saved test predictions -------------------------------------------------------

_ACC = re.compile(r"^test/acc(?:_(\w+))?$")  # test/acc_<set>: a named test set (MNLI matched/mismatched)
_ACC_SEQ = re.compile(r"^test/acc_seq$")  # exact match of the generated output (sequence tasks)
_ACC_EXEC = re.compile(r"^test/acc_exec$")  # AlgoLisp: the generated program passes all its tests
_TEACHER_FORCED = re.compile(r"^test/acc_(?:seq|tok)_tf$")
_RECALL_AT_1 = re.compile(r"^test/r(\d+)@1(?:_(\w+))?$")
_EXACT_MATCH = re.compile(r"^test/em$")  # span extraction: the predicted answer matches a gold one (SQuAD EM)


def read_predictions(path: str | Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def outcomes(metric: str, rows: list[dict]) -> dict[tuple, bool] | None:
    """Right/wrong per test unit for ``metric``, keyed by unit, or None when the metric has none.

    ``test/acc[_set]``: per example (``prediction == label``; rows of test set ``set`` only).
    ``test/acc_seq``: per example of a sequence task (its saved ``exact``: generated tokens == reference tokens).
    ``test/acc_exec``: per AlgoLisp example (its saved ``exec``: the program passed all its tests); None for
    predictions saved without ``exec``. Neither ``acc_seq`` nor ``acc_exec`` names a test set ("seq", "exec").
    ``test/em``: per question of a span task (its saved ``em``: 1 when the predicted answer matches a gold one).
    ``test/rN@1[_set]``: per group with one relevant candidate, as :mod:`coda_exp.metrics.ranking` counts it
    (its relevant candidate and the first N-1 others in input order; ties counted against it).
    """
    if _TEACHER_FORCED.match(metric):
        return None  # computed under teacher forcing; no per-example outcome is saved
    if _ACC_EXEC.match(metric):
        if rows and "exec" not in rows[0]:
            return None  # predictions written before ``exec`` was saved
        return {(r["index"], r["reference"]): bool(r["exec"]) for r in rows}
    if _ACC_SEQ.match(metric) and rows and "reference" in rows[0]:
        # records written before ``exact`` was saved: the detokenised texts (equal for character-level tasks)
        return {(r["index"], r["reference"]): bool(r.get("exact", r["hypothesis"] == r["reference"]))
                for r in rows}
    if _EXACT_MATCH.match(metric):
        if rows and "em" not in rows[0]:
            return None  # not span predictions
        return {(r["index"],): bool(r["em"]) for r in rows}
    m = _ACC.match(metric)
    if m:
        rows = [r for r in rows if r.get("test_set") == m.group(1)] if m.group(1) else rows
        return {(r["index"], r["label"]): r["prediction"] == r["label"] for r in rows}
    m = _RECALL_AT_1.match(metric)
    if m:
        from coda_exp.metrics.ranking import query_recall

        rows = [r for r in rows if r.get("test_set") == m.group(2)] if m.group(2) else rows
        groups: dict[int, list[dict]] = {}
        for r in sorted(rows, key=lambda r: r["index"]):
            groups.setdefault(r["group"], []).append(r)
        out = {}
        for g, items in groups.items():
            labels = [bool(r["label"]) for r in items]
            if sum(labels) != 1:
                continue
            ok = query_recall([r["score"] for r in items], labels, int(m.group(1)), 1, f"group {g}")
            out[(g, tuple(r["index"] for r in items))] = ok == 1.0
        return out
    return None


@dataclass(frozen=True)
class Paired:
    p: float | None
    b: int  # baseline right, treatment wrong (pooled over seeds)
    c: int  # baseline wrong, treatment right
    seeds: int
    note: str = ""


def paired_test(metric: str, pairs: list[tuple[list[dict], list[dict]]]) -> Paired:
    """McNemar's exact test pooled over matched seeds; ``pairs`` holds (baseline rows, treatment rows) per seed."""
    b = c = 0
    for rows_a, rows_b in pairs:
        oa, ob = outcomes(metric, rows_a), outcomes(metric, rows_b)
        if oa is None or ob is None:
            return Paired(None, 0, 0, 0, f"no per-example outcome for {metric}")
        if oa.keys() != ob.keys() or not oa:
            return Paired(None, 0, 0, 0, "the two runs' test sets differ")
        b += sum(oa[k] and not ob[k] for k in oa)
        c += sum(ob[k] and not oa[k] for k in oa)
    if not pairs:
        return Paired(None, 0, 0, 0, "no matched seeds with predictions")
    return Paired(mcnemar_exact_p(b, c), b, c, len(pairs))


# ---- table glue ------------------------------------------------------------------------------------------


@dataclass
class Comparison:
    baseline: str  # row names
    treatment: str
    column: str
    metric: str
    paper_delta: float | None
    decimals: int
    welch: Welch | None = None
    paired: Paired | None = None
    note: str = ""  # why there is no comparison ("no run", "scales differ")

    @property
    def row_name(self) -> str:
        return f"Δ {self.treatment} − {self.baseline}"

    def paper_text(self) -> str:
        return "–" if self.paper_delta is None else f"{self.paper_delta:+.{self.decimals}f}"

    def ours_text(self) -> str:
        if self.welch is None:
            return self.note
        w = self.welch
        text = f"Δ = {w.delta:+.{self.decimals}f}"
        text += (f", {p_text(w.p)} (Welch, n={w.n_a}/{w.n_b})" if w.p is not None
                 else f" (n={w.n_a}/{w.n_b}: no Welch test)")
        if self.paired is not None and self.paired.p is not None:
            seeds = f"{self.paired.seeds} seed" + ("s" if self.paired.seeds != 1 else "")
            text += f"; paired {p_text(self.paired.p)} (McNemar, {seeds})"
        return text


def format_p(p: float) -> str:
    """A p-value as a table column shows it: ``< 0.001``, ``0.021``, ``0.22``."""
    return "< 0.001" if p < 0.001 else f"{p:.3f}" if p < 0.1 else f"{p:.2f}"


def p_text(p: float) -> str:
    """A p-value in a sentence: ``p < 0.001``, ``p = 0.021``."""
    shown = format_p(p)
    return f"p {shown}" if shown.startswith("<") else f"p = {shown}"


def _predictions(record: dict, predictions_dir: Path | None) -> list[dict] | None:
    for path in prediction_paths(record, predictions_dir):
        if path.is_file():
            try:
                return read_predictions(path)
            except (OSError, EOFError, ValueError) as e:  # cut short (a full disk), not gzip, not JSON lines
                warnings.warn(f"{path}: test predictions that cannot be read ({type(e).__name__}: {e}); the paired "
                              "test leaves this seed out", stacklevel=2)
    return None


def compare_cells(cell_a, cell_b, records_by_id: dict[str, dict], predictions_dir: Path | None,
                  decimals: int) -> Comparison:
    """Treatment ``cell_b`` against baseline ``cell_a`` (two :class:`coda_exp.tables.Cell` of one column)."""
    paper = None if cell_a.paper is None or cell_b.paper is None else cell_b.paper - cell_a.paper
    comp = Comparison(cell_a.row, cell_b.row, cell_a.column, cell_b.metric, paper, decimals)
    if cell_a.status != "ok" or cell_b.status != "ok":
        comp.note = "no run"
        return comp
    if cell_a.scale != cell_b.scale:
        comp.note = f"scales differ ({cell_a.scale} vs {cell_b.scale})"
        return comp
    comp.welch = welch_test(cell_a.values, cell_b.values)
    by_seed_a = dict(zip(cell_a.seeds, cell_a.run_ids))
    by_seed_b = dict(zip(cell_b.seeds, cell_b.run_ids))
    if outcomes(cell_b.metric, []) is None:
        return comp  # no per-unit outcome for this metric (MAP, MRR, BLEU, validation scores)
    pairs = []
    for seed in sorted(set(by_seed_a) & set(by_seed_b)):
        rows_a = _predictions(records_by_id[by_seed_a[seed]], predictions_dir)
        rows_b = _predictions(records_by_id[by_seed_b[seed]], predictions_dir)
        if rows_a is not None and rows_b is not None:
            pairs.append((rows_a, rows_b))
    comp.paired = paired_test(cell_b.metric, pairs)
    return comp


def compare_table(spec, cells, records: list[dict], predictions_dir: Path | None = None) -> list[Comparison]:
    """One :class:`Comparison` per (``spec.compare`` pair, column), in spec order."""
    names = [row.name for row in spec.rows]
    by_id = {r["run_id"]: r for r in records}
    out = []
    for base, treat in spec.compare:
        i, k = names.index(base), names.index(treat)
        for j in range(len(spec.columns)):
            out.append(compare_cells(cells[i][j], cells[k][j], by_id, predictions_dir, spec.decimals(j)))
    return out
