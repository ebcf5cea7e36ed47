"""Our FEVER scorer on hand-built cases (the official scorer's logic: sheffieldnlp/fever-scorer, max_evidence=5)."""

from __future__ import annotations

import pytest
import torch

from coda_exp.metrics.fever import (
    IndexedFeverScore,
    evidence_complete,
    evidence_precision,
    evidence_recall,
    fever_score,
    scorer_instances,
)

S, R, N = "SUPPORTS", "REFUTES", "NOT ENOUGH INFO"


def ev(*sets):
    """Official evidence: each set a list of (page, line) -> [[annotation_id, evidence_id, page, line], ...]."""
    return [[[1, 2, p, n] for p, n in group] for group in sets]


def inst(label, pred, evidence, predicted):
    return {"label": label, "predicted_label": pred, "evidence": evidence, "predicted_evidence": predicted}


NEI_EVIDENCE = [[[7, None, None, None]]]


def test_label_right_but_evidence_incomplete_is_not_strictly_correct():
    two = ev([("A", 0), ("A", 3)])
    strict, acc, *_ = fever_score([inst(S, S, two, [["A", 0], ["B", 1]])])
    assert (strict, acc) == (0.0, 1.0)
    strict, acc, *_ = fever_score([inst(S, S, two, [["B", 1], ["A", 3], ["A", 0]])])
    assert (strict, acc) == (1.0, 1.0)


def test_wrong_label_scores_nothing_even_with_perfect_evidence():
    assert fever_score([inst(S, R, ev([("A", 0)]), [["A", 0]])])[:2] == (0.0, 0.0)


def test_not_enough_info_needs_only_the_label():
    assert fever_score([inst(N, N, NEI_EVIDENCE, [])])[:2] == (1.0, 1.0)
    assert fever_score([inst(N, "not enough info", NEI_EVIDENCE, [["X", 1]])])[:2] == (1.0, 1.0)  # case-insensitive
    assert fever_score([inst(N, S, NEI_EVIDENCE, [])])[:2] == (0.0, 0.0)
    assert evidence_precision(N, NEI_EVIDENCE, [["X", 1]]) == (0.0, 0) and evidence_recall(N, NEI_EVIDENCE, []) == (0, 0)


def test_only_the_first_five_predicted_sentences_count():
    gold = ev([("A", 5)])
    late = [["B", i] for i in range(5)] + [["A", 5]]  # the gold sentence is 6th
    assert fever_score([inst(S, S, gold, late)])[:2] == (0.0, 1.0)
    assert fever_score([inst(S, S, gold, late)], max_evidence=None)[0] == 1.0
    assert fever_score([inst(S, S, gold, late[-5:])])[0] == 1.0
    assert evidence_precision(S, gold, late) == (0.0, 1)  # the 6th is not read for precision either


def test_any_one_of_several_gold_sets_suffices():
    gold = ev([("A", 0), ("A", 1)], [("C", 2)])
    assert evidence_complete(S, gold, [["C", 2]])
    assert evidence_complete(S, gold, [["A", 1], ["A", 0]])
    assert not evidence_complete(S, gold, [["A", 1], ["C", 1]])
    assert evidence_recall(S, gold, [["C", 2]]) == (1.0, 1)


def test_official_max_evidence_cases():
    """The official scorer's own tests (tests/test_max_evidence.py), restated."""
    both = ev([("page", 0), ("page", 1)])
    pred = [["page", 0], ["page", 1]]
    assert evidence_recall(S, both, pred, max_evidence=1)[0] == 0
    assert evidence_recall(S, both, pred, max_evidence=2)[0] == 1
    other = ev([("page", 0), ("page", 2)])
    assert evidence_precision(S, other, pred, max_evidence=1)[0] == 1
    assert evidence_precision(S, other, pred, max_evidence=2)[0] == 0.5
    assert fever_score([inst(S, S, both, pred)], max_evidence=2)[0] == 1
    assert fever_score([inst(S, S, both, pred)], max_evidence=1)[0] == 0
    assert fever_score([inst(S, S, other, pred)], max_evidence=2)[2] == 0.5


def test_score_over_several_claims_and_macro_precision_recall():
    rows = [inst(S, S, ev([("A", 0)]), [["A", 0], ["B", 0]]),      # strict; precision 1/2, recall 1
            inst(R, R, ev([("C", 1)]), [["D", 0]]),                # label only; precision 0, recall 0
            inst(N, N, NEI_EVIDENCE, [["E", 0]]),                  # strict; not in precision / recall
            inst(S, N, ev([("F", 2)]), [])]                        # wrong; no prediction: precision 1, recall 0
    strict, acc, precision, recall, f1 = fever_score(rows)
    assert strict == pytest.approx(2 / 4) and acc == pytest.approx(3 / 4)
    assert precision == pytest.approx((0.5 + 0 + 1) / 3) and recall == pytest.approx(1 / 3)
    assert f1 == pytest.approx(2 * precision * recall / (precision + recall))


def test_rows_missing_a_field_are_refused_and_saved_predictions_convert():
    with pytest.raises(ValueError, match="predicted_evidence"):
        fever_score([{"label": S, "predicted_label": S, "evidence": ev([("A", 0)])}])
    rows = [{"label": S, "prediction": S, "evidence": ev([("A", 0)]), "predicted_evidence": [["A", 0]], "id": 3}]
    assert fever_score(scorer_instances(rows))[0] == 1.0


def test_indexed_fever_score_counts_each_claim_once():
    m = IndexedFeverScore()
    preds, target = torch.tensor([0, 1, 2, 0]), torch.tensor([0, 1, 2, 1])
    m.update(preds, target, torch.tensor([0, 1, 2, 3]), torch.tensor([True, False, True, True]))
    m.update(preds[:1], target[:1], torch.tensor([0]), torch.tensor([True]))  # a DDP padding repeat
    assert m.compute().item() == pytest.approx(2 / 4)
    with pytest.raises(ValueError, match="complete"):
        m.update(preds, target, torch.tensor([0, 1, 2, 3]))
