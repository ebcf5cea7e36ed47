"""Execution accuracy of generated AlgoLisp programs (CoDA Table 7's second number): a hypothesis counts when our
interpreter (:mod:`coda_exp.algolisp`) gives every test's output from its input."""

from __future__ import annotations

from collections.abc import Sequence

from coda_exp.algolisp import DEFAULT_MAX_STEPS, AlgoLispError, parse_program, passes_tests


def execution_outcomes(hyp_tokens_list: Sequence, examples: Sequence[dict],
                       max_steps: int = DEFAULT_MAX_STEPS) -> list[bool]:
    """Per example: whether its hypothesis (tokens or a string, brackets as tokens) passes ALL of its ``tests``.

    A hypothesis that does not parse, fails at run time or exhausts ``max_steps`` on any test fails the example;
    an example with no tests counts as failed.
    """
    if len(hyp_tokens_list) != len(examples):
        raise ValueError(f"{len(hyp_tokens_list)} hypotheses for {len(examples)} examples")
    return [_passes_text(hyp, ex["tests"], max_steps) for hyp, ex in zip(hyp_tokens_list, examples)]


def _passes_text(hyp, tests: Sequence[dict], max_steps: int) -> bool:
    try:
        return passes_tests(parse_program(hyp), tests, max_steps)
    except AlgoLispError:  # does not parse
        return False


def execution_accuracy(hyp_tokens_list: Sequence, examples: Sequence[dict],
                       max_steps: int = DEFAULT_MAX_STEPS) -> float:
    """Fraction of examples passing all their tests (:func:`execution_outcomes`); 0 for no examples."""
    passed = execution_outcomes(hyp_tokens_list, examples, max_steps)
    return sum(passed) / len(passed) if passed else 0.0
