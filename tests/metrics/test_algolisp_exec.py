"""Execution accuracy of AlgoLisp programs (the metric and the task's ``execution`` evaluation)."""

from __future__ import annotations

import pytest

from coda_exp.algolisp import parse_program, passes_tests
from coda_exp.data.seq2seq.algolisp import ALGOLISP
from coda_exp.metrics.algolisp_exec import execution_accuracy, execution_outcomes
from coda_exp.tasks.seq2seq_eval import execution_evaluation
from tests import FIXTURES


def fixture_examples(split: str) -> list[dict]:
    return list(ALGOLISP.read_file(FIXTURES / "algolisp" / f"metaset3.{split}.jsonl"))


def test_execution_accuracy_counts_only_programs_passing_all_tests():
    examples = fixture_examples("test")[:2]
    right = examples[0]["tgt"].split()
    wrong = ["(", "map", "a", "(", "lambda1", "(", "*", "arg1", "b", ")", ")", ")"]  # forgets "+ c"
    assert execution_accuracy([right, wrong], examples) == 0.5
    assert execution_accuracy([right, examples[1]["tgt"]], examples) == 1.0
    broken = ["(", "contains", "a"]  # unbalanced, and a runtime error: neither crashes the metric
    assert execution_accuracy([broken, "( map a ( lambda1 ( / arg1 0 ) ) )"], examples) == 0.0
    assert execution_accuracy([], []) == 0.0
    assert not passes_tests(parse_program("a"), [])
    with pytest.raises(ValueError, match="2 hypotheses for 1"):
        execution_accuracy([right, wrong], examples[:1])


def test_execution_outcomes_per_example_and_the_task_evaluation():
    examples = fixture_examples("test")[:3]
    hyps = [examples[0]["tgt"], "( map a", examples[1]["tgt"]]  # right, unparsable, the wrong problem's program
    assert execution_outcomes(hyps, examples) == [True, False, False]
    got = execution_evaluation(hyps, examples, {})
    assert got == {"acc_exec": pytest.approx(1 / 3), "exec": [True, False, False]}  # exec: one per hypothesis
