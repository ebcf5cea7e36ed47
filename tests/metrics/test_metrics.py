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


def test_groups_need_not_be_contiguous_and_ties_count_against_the_relevant_items():
    # formerly "ties keep input order": with the relevant item listed first (UDC's and TrecQA's layout) that gave
    # tied relevant items the best rank; ties are now pessimistic in every metric, whatever the order
    scores = torch.tensor([0.5, 1.0, 0.5, 0.2, 0.7, 0.7])
    labels = torch.tensor([0, 1, 1, 0, 1, 0])
    groups = torch.tensor([7, 3, 7, 3, 9, 9])
    # group 3: [pos 1.0, neg 0.2] -> 1 ; group 7: tie 0.5/0.5 (neg listed first) -> AP 1/2;
    # group 9: tie 0.7/0.7 with the positive listed first -> still AP 1/2
    out = ranking_scores(scores, labels, groups)
    assert out["map"] == pytest.approx(2 / 3)
    assert out["mrr"] == pytest.approx(2 / 3)


def _worst_case(scores: list[float], labels: list[int]) -> tuple[float, float]:
    """AP and RR by hand: rank of a relevant item = 1 + items scored higher + non-relevant items tied with it
    + relevant items tied with it and counted before it."""
    ranks = sorted(1 + sum(t > s for t in scores) + sum(t == s and not y for t, y in zip(scores, labels))
                   + sum(t == s and y for t, y in zip(scores[:i], labels[:i]))
                   for i, (s, y) in enumerate(zip(scores, labels)) if y)
    return sum((h + 1) / r for h, r in enumerate(ranks)) / len(ranks), 1 / ranks[0]


def test_constant_scorer_gets_the_worst_value_of_every_metric():
    """A UDC-like group (ground truth first) and a TrecQA-like one (positives first): a constant scorer is ranked
    as if every relevant item came last, on MAP, MRR and R_N@k alike (it got MAP = MRR = 1 before)."""
    udc = ranking_scores(torch.zeros(20), torch.tensor(([1] + [0] * 9) * 2), torch.tensor([0] * 10 + [1] * 10),
                         ["r10@1", "r10@5", "r2@1", "mrr", "map"])
    assert udc == {"r10@1": 0.0, "r10@5": 0.0, "r2@1": 0.0, "mrr": pytest.approx(0.1), "map": pytest.approx(0.1),
                   "queries": 2, "skipped_queries": 0}
    trec = ranking_scores(torch.zeros(5), torch.tensor([1, 1, 0, 0, 0]), torch.zeros(5, dtype=torch.long))
    assert trec["mrr"] == pytest.approx(1 / 4) and trec["map"] == pytest.approx((1 / 4 + 2 / 5) / 2)
    for bf16 in (torch.full((5,), -0.048095703125, dtype=torch.bfloat16), torch.full((5,), 3.0)):
        assert ranking_scores(bf16, torch.tensor([1, 1, 0, 0, 0]), torch.zeros(5, dtype=torch.long)) == trec


def test_ties_do_not_depend_on_input_order():
    """Random groups with many ties: every metric equals the hand-computed pessimistic value and is unchanged by
    shuffling the input (R10@k with whole groups of ten reads no input order)."""
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        groups = torch.arange(4).repeat_interleave(10)
        scores = torch.randint(0, 3, (40,), generator=gen).float()
        labels = (torch.rand(40, generator=gen) < 0.3).long()
        labels[::10] = 1  # every group has a relevant item
        names = ["map", "mrr", "r10@1", "r10@2", "r10@5"]
        out = ranking_scores(scores, labels, groups, names)
        hand = [_worst_case(scores[g * 10:(g + 1) * 10].tolist(), labels[g * 10:(g + 1) * 10].tolist())
                for g in range(4)]
        assert out["map"] == pytest.approx(sum(ap for ap, _ in hand) / 4)
        assert out["mrr"] == pytest.approx(sum(rr for _, rr in hand) / 4)
        perm = torch.randperm(40, generator=gen)
        assert ranking_scores(scores[perm], labels[perm], groups[perm], names) == pytest.approx(out)
        m = GroupedRanking(names)
        for chunk in torch.split(perm, 7):  # batches in any order, with or without example ids
            m.update(scores[chunk], labels[chunk], groups[chunk], chunk)
        assert {k: v.item() for k, v in m.compute().items()} == pytest.approx({k: out[k] for k in names})


def test_metric_accumulates_batches():
    m = GroupedRanking()
    m.update(torch.tensor([0.1, 0.2]), torch.tensor([1, 0]), torch.tensor([0, 0]))
    m.update(torch.tensor([0.3]), torch.tensor([0]), torch.tensor([0]))
    assert m.compute()["map"].item() == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="1-D"):
        ranking_scores(torch.zeros(2), torch.zeros(3), torch.zeros(2))


def test_float64_scores_keep_their_order():
    """A relevant item scored 1 + 1e-9 above a wrong one at 1.0 (a float64 run): cast to float32 they tied, and the
    pessimistic tie rule ranked it second (MAP 0.5); it is first."""
    m = GroupedRanking()
    scores = torch.tensor([1.0 + 1e-9, 1.0, 0.5], dtype=torch.float64)
    m.update(scores, torch.tensor([1, 0, 0]), torch.tensor([0, 0, 0]), torch.arange(3))
    assert {k: v.item() for k, v in m.compute().items()} == {"map": 1.0, "mrr": 1.0}


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


def test_indexed_mean_of_two_processes_is_the_one_process_mean():
    """Token-weighted means (a sequence's summed loss over its tokens) of 7 examples: two processes' shards, the
    second padded with a repeat of example 0 as the distributed sampler pads it, their states concatenated as the
    DDP sync does, give the one-process mean; the equal-weight mean of the two processes' means (what
    ``self.log(..., sync_dist=True)`` computed) does not."""
    from torch.utils.data import DistributedSampler

    from coda_exp.metrics import IndexedMean

    gen = torch.Generator().manual_seed(0)
    tokens = torch.tensor([3, 9, 1, 4, 7, 2, 5], dtype=torch.float64)
    totals = torch.rand(7, generator=gen, dtype=torch.float64) * tokens  # each example's summed token losses
    one = IndexedMean()
    one.update(totals[:4], tokens[:4], torch.arange(4))
    one.update(totals[4:], tokens[4:], torch.arange(4, 7))
    assert one.compute().item() == pytest.approx((totals.sum() / tokens.sum()).item(), rel=1e-12)
    shards = [list(DistributedSampler(range(7), num_replicas=2, rank=r, shuffle=False)) for r in range(2)]
    assert sorted(shards[0] + shards[1]) == [0, 0, 1, 2, 3, 4, 5, 6]  # a repeat pads the shards
    ranks = [IndexedMean() for _ in shards]
    for metric, shard in zip(ranks, shards):
        ids = torch.tensor(shard)
        metric.update(totals[ids], tokens[ids], ids)
    per_rank = [m.compute().item() for m in ranks]
    synced = IndexedMean()
    for m in ranks:  # dist_reduce_fx="cat": every process's entries, in rank order
        synced.update(*(torch.cat(getattr(m, state)) for state in ("total", "weight", "index")))
    assert synced.compute().item() == pytest.approx(one.compute().item(), rel=1e-12)
    assert abs(sum(per_rank) / 2 - one.compute().item()) > 1e-3
    with pytest.raises(ValueError, match="one 1-D shape"):
        synced.update(totals, tokens[:2], torch.arange(7))
    with pytest.warns(UserWarning, match="called before the ``update``"):
        assert IndexedMean().compute().isnan()  # nothing seen
