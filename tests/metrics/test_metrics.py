import pytest
import torch

from coda_exp.metrics import GroupedRanking, ranking_scores


def test_map_mrr_hand_computed():
    # query 0: ranking by score = [pos, neg, pos]       AP = (1/1 + 2/3) / 2 = 0.8333, RR = 1
    # query 1: ranking by score = [neg, neg, neg, pos]  AP = 1/4,                     RR = 1/4
    # query 2: no positive -> skipped
    scores = torch.tensor([0.9, 0.5, 0.1, -0.2, -0.1, -0.7, -0.3, 3.0, 2.0])
    labels = torch.tensor([1, 0, 1, 0, 0, 1, 0, 0, 0])
    groups = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 2])
    # (query 1 by score: -0.1 neg, -0.2 neg, -0.3 neg, -0.7 pos)
    out = ranking_scores(scores, labels, groups)
    assert out["queries"] == 2 and out["skipped_queries"] == 1
    assert out["map"] == pytest.approx(((1 + 2 / 3) / 2 + 1 / 4) / 2)
    assert out["mrr"] == pytest.approx((1 + 1 / 4) / 2)


def test_torchmetrics_retrieval_drops_relevant_items_scored_at_most_zero():
    """Why ranking.py exists (its docstring, docs/models.md): torchmetrics counts a relevant item scored <= 0 as
    non-relevant wherever it ranks. When this fails, torchmetrics changed: revise the note."""
    from torchmetrics.retrieval import RetrievalMAP, RetrievalMRR

    scores, labels, groups = torch.tensor([-1.0, 0.5, -2.0]), torch.tensor([1, 0, 0]), torch.zeros(3, dtype=torch.long)
    ours = ranking_scores(scores, labels, groups)
    assert ours["map"] == ours["mrr"] == 0.5  # the relevant item ranks second
    for metric in (RetrievalMAP(), RetrievalMRR()):
        assert metric(scores, labels.bool(), indexes=groups).item() == 0.0
        # the same ranking shifted above 0 is scored right: only the sign of the relevant item's score mattered
        assert metric(scores + 3.0, labels.bool(), indexes=groups).item() == 0.5
    assert RetrievalMRR()(torch.tensor([0.0, 0.5, -2.0]), labels.bool(), indexes=groups).item() == 0.0  # 0 too


def test_all_negative_scores_are_ranked_correctly():
    # torchmetrics 1.9's RetrievalMAP returns 0 here (every relevant item scored <= 0 is dropped); ours must return 1
    out = ranking_scores(torch.tensor([-0.69, -0.65, -0.46]), torch.tensor([0, 0, 1]), torch.zeros(3, dtype=torch.long))
    assert out["map"] == 1.0 and out["mrr"] == 1.0


def test_groups_need_not_be_contiguous_and_ties_keep_input_order():
    scores = torch.tensor([0.5, 1.0, 0.5, 0.2])
    labels = torch.tensor([0, 1, 1, 0])
    groups = torch.tensor([7, 3, 7, 3])
    # group 3: [pos 1.0, neg 0.2] -> 1 ; group 7: tie 0.5/0.5, input order neg then pos -> AP 1/2
    out = ranking_scores(scores, labels, groups)
    assert out["map"] == pytest.approx(0.75)
    assert out["mrr"] == pytest.approx(0.75)


def test_metric_accumulates_batches():
    m = GroupedRanking()
    m.update(torch.tensor([0.1, 0.2]), torch.tensor([1, 0]), torch.tensor([0, 0]))
    m.update(torch.tensor([0.3]), torch.tensor([0]), torch.tensor([0]))
    assert m.compute()["map"].item() == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="1-D"):
        ranking_scores(torch.zeros(2), torch.zeros(3), torch.zeros(2))


def test_repeated_example_ids_count_once():
    """DDP's sampler pads shards with repeats: the same example id (``order``) must not count twice."""
    once, twice = GroupedRanking(), GroupedRanking()
    scores, labels, groups, ids = (torch.tensor([0.3, 0.2, 0.1]), torch.tensor([0, 0, 1]), torch.tensor([0, 0, 0]),
                                   torch.tensor([5, 6, 7]))
    once.update(scores, labels, groups, ids)
    twice.update(scores, labels, groups, ids)
    twice.update(scores[:2], labels[:2], groups[:2], ids[:2])  # the padding repeats two wrong candidates
    assert once.compute()["map"].item() == pytest.approx(1 / 3)
    assert twice.compute()["map"].item() == pytest.approx(1 / 3)
    plain = GroupedRanking()  # without ids, positions are not example ids: nothing is dropped
    plain.update(scores, labels, groups)
    plain.update(scores[:2], labels[:2], groups[:2])
    assert plain.compute()["map"].item() == pytest.approx(1 / 5)


def test_indexed_accuracy_counts_each_example_once():
    import torchmetrics

    from coda_exp.metrics import IndexedAccuracy

    preds, target, index = torch.tensor([1, 0, 2, 2]), torch.tensor([1, 1, 2, 0]), torch.tensor([10, 11, 12, 13])
    acc, ref = IndexedAccuracy(), torchmetrics.Accuracy(task="multiclass", num_classes=3)
    acc.update(preds[:2], target[:2], index[:2])
    acc.update(preds[2:], target[2:], index[2:])
    ref.update(preds, target)
    assert acc.compute().item() == pytest.approx(ref.compute().item()) == pytest.approx(0.5)
    acc.update(preds[:1], target[:1], index[:1])  # DDP padding: example 10 (correct) again
    assert acc.compute().item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="one shape"):
        acc.update(preds, target, index[:2])


def test_first_occurrence_marks_each_id_once_in_input_order():
    from coda_exp.metrics.states import first_occurrence

    ids = torch.tensor([7, 3, 7, 5, 3, 3, 9])
    assert first_occurrence(ids).tolist() == [True, True, False, True, False, False, True]
    assert first_occurrence(torch.tensor([], dtype=torch.long)).tolist() == []
