"""Significance tests against known values: Welch's test (closed forms of the t(4) CDF, a numerical integral of the
t density), McNemar's exact test (hand-computed binomial tails), and the paired test on saved predictions."""

import math
import warnings

import pytest

from coda_exp.significance import (
    Comparison,
    Paired,
    Welch,
    format_p,
    mcnemar_exact_p,
    outcomes,
    p_text,
    paired_test,
    welch_test,
)


def _t_tail_by_integration(t: float, df: float, steps: int = 20000) -> float:
    """2 * integral_t^inf of the t density, by Simpson's rule after u = 1/(1+x) (independent of scipy)."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def f(u):  # x = (1-u)/u, dx = du/u²
        if u == 0.0:
            return 0.0
        x = (1 - u) / u
        return c * (1 + x * x / df) ** (-(df + 1) / 2) / (u * u)

    b = 1 / (1 + abs(t))
    h = b / steps
    total = f(0.0) + f(b) + sum((4 if i % 2 else 2) * f(i * h) for i in range(1, steps))
    return 2 * total * h / 3


def test_welch_known_values():
    # equal sizes and spreads: t = 3/sqrt(2/3) = 3.674, df = 4, p from the closed-form t(4) CDF
    w = welch_test([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    assert (w.delta, w.n_a, w.n_b) == (3.0, 3, 3)
    assert w.t == pytest.approx(3 / math.sqrt(2 / 3)) and w.df == pytest.approx(4.0)
    x = w.t / math.sqrt(1 + w.t**2 / 4)
    assert w.p == pytest.approx(1 - 0.75 * x * (1 - w.t**2 / (12 * (1 + w.t**2 / 4))), rel=1e-10)
    assert w.p == pytest.approx(0.0213, abs=1e-4)
    # unequal spreads and sizes: variances 4 and 2.5 -> Welch-Satterthwaite df = 3.5329 (not an integer)
    w = welch_test([10.0, 12.0, 14.0], [20.0, 21.0, 22.0, 23.0, 24.0])
    se2 = 4 / 3 + 2.5 / 5
    assert w.t == pytest.approx(10 / math.sqrt(se2))
    assert w.df == pytest.approx(se2**2 / ((4 / 3) ** 2 / 2 + 0.5**2 / 4))
    assert w.df == pytest.approx(3.5329, abs=1e-4)
    assert w.p == pytest.approx(_t_tail_by_integration(w.t, w.df), rel=1e-6)
    # symmetric in sign
    assert welch_test([4.0, 5.0, 6.0], [1.0, 2.0, 3.0]).p == pytest.approx(0.0213, abs=1e-4)


def test_welch_with_one_cell_without_spread():
    # a = [2, 2, 2] has variance 0: t = 2 / sqrt(1/3), df = n_b - 1 = 2; t(2): p = 1 - t / sqrt(2 + t²)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy's precision warning for identical values is not the user's business
        w = welch_test([2.0, 2.0, 2.0], [3.0, 4.0, 5.0])
    t = 2 / math.sqrt(1 / 3)
    assert w.t == pytest.approx(t) and w.df == pytest.approx(2.0)
    assert w.p == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-10)


def test_welch_undefined_cases():
    w = welch_test([0.8], [0.9, 0.91])
    assert w.p is None and w.delta == pytest.approx(0.105)
    assert welch_test([0.5, 0.5], [0.7, 0.7]).p is None  # no spread: the test is undefined
    assert welch_test([0.5, 0.5, 0.5], [0.5, 0.5]).p is None
    with pytest.raises(ValueError):
        welch_test([], [1.0])


@pytest.mark.parametrize("b, c, p", [
    (1, 5, 14 / 64), (5, 1, 14 / 64), (0, 6, 2 / 64), (2, 8, 112 / 1024), (3, 3, 1.0), (0, 0, 1.0), (0, 1, 1.0),
])
def test_mcnemar_exact_hand_computed(b, c, p):
    assert mcnemar_exact_p(b, c) == pytest.approx(p, rel=1e-12)


def test_mcnemar_large_counts_match_the_normal_approximation():
    # b = 400, c = 500: continuity-corrected z = (100 - 1) / sqrt(900) = 3.3, two-sided p = 9.67e-4; exact 9.56e-4
    assert mcnemar_exact_p(400, 500) == pytest.approx(math.erfc(99 / 30 / math.sqrt(2)), rel=0.02)


def _rows(correct: list[bool], test_set=None):
    rows = [{"index": i, "label": 1, "prediction": 1 if ok else 0} for i, ok in enumerate(correct)]
    for r in rows:
        if test_set:
            r["test_set"] = test_set
    return rows


def test_paired_test_pools_discordant_pairs_over_seeds():
    a1, b1 = _rows([True, True, False, False, True]), _rows([True, False, True, True, True])  # b=1, c=2
    a2, b2 = _rows([False, False, True, True, True]), _rows([True, True, True, True, True])  # b=0, c=2
    res = paired_test("test/acc", [(a1, b1), (a2, b2)])
    assert (res.b, res.c, res.seeds) == (1, 4, 2)
    assert res.p == pytest.approx(2 * (1 + 5) / 32)  # Binomial(5, 1/2): P(X <= 1) = 6/32
    assert paired_test("test/map", [(a1, b1)]).p is None
    assert "differ" in paired_test("test/acc", [(a1, b1[:4])]).note
    assert paired_test("test/acc", []).p is None


def test_outcomes_per_test_set_and_per_ranking_group():
    rows = _rows([True, False], "matched") + _rows([False], "mismatched")
    assert outcomes("test/acc_matched", rows) == {(0, 1): True, (1, 1): False}
    assert outcomes("test/acc_mismatched", rows) == {(0, 1): False}
    group = [{"index": i, "group": 0, "label": int(i == 0), "score": s} for i, s in enumerate([0.4, 0.4, 0.1])]
    group += [{"index": 3 + i, "group": 1, "label": int(i == 0), "score": s} for i, s in enumerate([0.9, 0.4, 0.1])]
    assert list(outcomes("test/r3@1", group).values()) == [False, True]  # a tie counts against the ground truth
    assert outcomes("test/mrr", group) is None and outcomes("val/acc", rows) is None


def test_format_p():
    assert [format_p(p) for p in (0.0004, 0.0213, 0.05, 0.2187, 1.0)] == ["< 0.001", "0.021", "0.050", "0.22",
                                                                          "1.00"]
    assert [p_text(p) for p in (0.0004, 0.0213)] == ["p < 0.001", "p = 0.021"]


def test_a_delta_row_reads_p_below_a_threshold_without_an_equals_sign():
    """Once "paired p = < 0.001 (McNemar, 1 seed)", also in the committed Table 6."""
    comp = Comparison("T", "CoDA T", "accuracy", "test/acc_seq", 8.2, 1, welch=Welch(-40.8, 1.0, 2.0, 0.0002, 3, 3),
                      paired=Paired(1e-9, 40, 1, 1))
    assert comp.ours_text() == "Δ = -40.8, p < 0.001 (Welch, n=3/3); paired p < 0.001 (McNemar, 1 seed)"
    comp.paired = Paired(0.51, 4, 5, 3)
    assert comp.ours_text().endswith("; paired p = 0.51 (McNemar, 3 seeds)")


def test_outcomes_of_sequence_exact_match():
    # saved ``exact`` (token match) wins; older rows without it fall back to comparing the texts
    rows = [{"index": 0, "hypothesis": "12", "reference": "12", "exact": True},
            {"index": 1, "hypothesis": "a b", "reference": "a  b", "exact": True},
            {"index": 2, "hypothesis": "-7", "reference": "-9"}]
    assert outcomes("test/acc_seq", rows) == {(0, "12"): True, (1, "a  b"): True, (2, "-9"): False}
    assert outcomes("test/acc_seq_tf", rows) is None and outcomes("test/acc_tok_tf", rows) is None
    base = [dict(r, exact=ok) for r, ok in zip(rows, [True, False, False])]
    treat = [dict(r, exact=ok) for r, ok in zip(rows, [True, True, True])]
    res = paired_test("test/acc_seq", [(base, treat)])
    assert (res.b, res.c) == (0, 2) and res.p == pytest.approx(0.5)  # Binomial(2, 1/2): 2 * P(X <= 0)
    other = [dict(r, reference=r["reference"] + "0") for r in treat]
    assert "differ" in paired_test("test/acc_seq", [(base, other)]).note


def _seq_rows(exact, passed, with_exec=True):
    rows = [{"index": i, "hypothesis": "h", "reference": f"( r{i} )", "exact": e} for i, e in enumerate(exact)]
    for r, ok in zip(rows, passed):
        if with_exec:
            r["exec"] = ok
    return rows


def test_outcomes_of_execution_accuracy():
    rows = _seq_rows([True, False, False], [True, True, False])
    # test/acc_exec is AlgoLisp's execution accuracy (the saved ``exec``), not a test set named "exec"
    assert outcomes("test/acc_exec", rows) == {(0, "( r0 )"): True, (1, "( r1 )"): True, (2, "( r2 )"): False}
    assert outcomes("test/acc_seq", rows) == {(0, "( r0 )"): True, (1, "( r1 )"): False, (2, "( r2 )"): False}
    assert outcomes("test/acc_exec", []) == {}  # a metric with per-example outcomes
    old = _seq_rows([True], [True], with_exec=False)  # predictions saved before ``exec`` was
    assert outcomes("test/acc_exec", old) is None
    assert "no per-example outcome" in paired_test("test/acc_exec", [(old, old)]).note
    res = paired_test("test/acc_exec", [(_seq_rows([0] * 3, [True, False, False]), rows)])
    assert (res.b, res.c) == (0, 1) and res.p == pytest.approx(1.0)


def test_table_7_execution_accuracy_column(tmp_path):
    """Table 7's acc_exec column: ours beside a paper dash, with a paired McNemar test on the saved ``exec``."""
    import gzip
    import json
    from pathlib import Path

    from coda_exp.table_render import render_markdown
    from coda_exp.tables import build_table, load_table_spec

    spec = load_table_spec(Path(__file__).parents[1] / "configs" / "tables" / "table_7.yaml")
    assert [c.metric for c in spec.columns] == ["test/acc_seq", "test/acc_exec"]
    assert all(row.paper[1] is None for row in spec.rows)
    records = []
    for seed in (1, 2):
        for model, passed in (("transformer", [True, False, False, False]), ("coda_transformer", [True] * 4)):
            path = tmp_path / f"{model}_{seed}.jsonl.gz"
            with gzip.open(path, "wt", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in _seq_rows([False] * 4, passed))
            attention = {"name": "softmax"} if model == "transformer" else {
                "name": "coda", "e_fn": "tanh", "n_fn": "sigmoid", "center_e": False, "center_n": False,
                "gate_scale": None}
            records.append({"run_id": f"{model}-{seed}", "task": "algolisp", "model": model, "seed": seed,
                            "attention": attention,
                            "scale": "cpu", "created": f"2025-01-01T00:00:0{seed}+00:00", "predictions": str(path),
                            "metrics": {"test/acc_seq": 0.0, "test/acc_exec": sum(passed) / 4}})
    md = render_markdown(build_table(spec, records))
    row = [p.strip() for p in next(ln for ln in md.splitlines() if ln.startswith("| CoDA Transformer")).split("|")]
    assert row[4:6] == ["–", "100.0 ± 0.0 (n=2, cpu)"]  # execution accuracy: a paper dash beside ours
    delta = next(ln for ln in md.splitlines() if ln.startswith("| Δ"))
    assert "Δ = +75.0" in delta and "paired p = 0.031 (McNemar, 2 seeds)" in delta  # b = 0, c = 6: 2 / 64
    # a predictions file cut short (a full disk) used to stop the whole table with an EOFError: its seed is left out
    cut = Path(records[0]["predictions"])
    cut.write_bytes(cut.read_bytes()[:30])
    with pytest.warns(UserWarning, match=rf"{cut}: test predictions that cannot be read .*leaves this seed out"):
        md = render_markdown(build_table(spec, records))
    delta = next(ln for ln in md.splitlines() if ln.startswith("| Δ"))
    assert "Δ = +75.0" in delta and "(McNemar, 1 seed)" in delta
