"""Grouped ranking metrics: MAP, MRR and recall R_N@k over queries (answer selection, response selection).

Written here rather than taken from torchmetrics because its retrieval metrics (``RetrievalMAP``, ``RetrievalMRR``
and their functional forms, 1.9.0) drop every relevant item scored <= 0: they compute ``target = where(preds > 0,
target, 0)`` before ranking, so such an item counts as non-relevant wherever it ranks. Scores ``[-1, 0.5, -2]``
with the first item relevant give 0.0 there; its rank is 2, so reciprocal rank and AP are 0.5 (a query whose
scores are all <= 0 always gets 0). Our models score with log-odds, which are often negative
(``tests/metrics/test_metrics.py`` pins torchmetrics' behaviour, so this note fails a test once it changes).

Ties: *pessimistic* in every metric (MAP, MRR and R_N@k alike): among tied scores the non-relevant items rank
before the relevant ones. The result then depends only on the scores and labels of a group, never on the order
its candidates arrive in, and a degenerate scorer earns nothing from ties: a constant scorer gets the worst value
of every metric (R10@1 = 0; MRR = 1/(n_neg + 1) and AP = mean_i i/(n_neg + i) of a group with n_neg
non-relevant items). Keeping input order instead rewards the data's layout: the UDC reader lists the ground truth
first and TrecQA's XML lists positives before negatives, so a constant scorer would get MRR = MAP = 1 there
(trec_eval breaks ties by document id, which is no better). Scores without ties are unaffected; 16-bit scores
tie now and then, and each tie costs the model, never the data's order.

R_N@k (Lowe et al. 2015, Ubuntu Dialogue Corpus): each query keeps its relevant candidates plus its first
``N - #relevant`` non-relevant ones in input order; the recall is the fraction of those relevant candidates
ranked in the top ``k``, averaged over queries. On UDC (one ground truth, nine distractors, ground truth given
first) R10@k uses the full group and R2@1 compares the ground truth with the first distractor only. A query with
fewer than ``N`` candidates is an error: its R_N@k would not be the metric the name promises.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch
from torchmetrics import Metric

from coda_exp.metrics.states import cat_state, first_occurrence

_RECALL = re.compile(r"^r(\d+)@(\d+)$")
METRICS = ("map", "mrr", "rN@k (e.g. r10@1, r2@1)")


def _check_names(metrics: Sequence[str]) -> None:
    for name in metrics:
        m = _RECALL.match(name)
        if name not in ("map", "mrr") and not (m and 1 <= int(m.group(2)) <= int(m.group(1))):
            raise ValueError(f"unknown ranking metric {name!r}; known: {', '.join(METRICS)} with 1 <= k <= N")


def query_recall(scores: list[float], labels: list[bool], n: int, k: int, where: str) -> float:
    """R_n@k of one query (items in input order: it picks the first non-relevant ones), pessimistic ties."""
    if len(labels) < n:
        raise ValueError(f"r{n}@{k}: {where} has {len(labels)} candidates, fewer than {n}")
    positives = sum(labels)
    if positives >= n:
        raise ValueError(f"r{n}@{k}: {where} has {positives} relevant candidates; needs fewer than {n}")
    keep, negatives = [], 0
    for i, y in enumerate(labels):
        if y:
            keep.append(i)
        elif negatives < n - positives:
            keep.append(i)
            negatives += 1
    # descending score; among ties non-relevant first (pessimistic); the order among equals changes nothing
    ranked = sorted(keep, key=lambda i: (-scores[i], labels[i], i))
    return sum(labels[i] for i in ranked[:k]) / positives


def pessimistic_order(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``labels`` of one group in ranked order: descending score, tied non-relevant items before relevant ones."""
    by_label = torch.argsort(labels.long(), stable=True)  # non-relevant first ...
    return labels[by_label][torch.argsort(-scores[by_label], stable=True)]  # ... kept so among tied scores


def ranking_scores(scores: torch.Tensor, labels: torch.Tensor, groups: torch.Tensor,
                   metrics: Sequence[str] = ("map", "mrr"), order: torch.Tensor | None = None) -> dict:
    """``metrics`` over the groups with at least one relevant item; also how many groups were skipped.

    scores (N,) float, labels (N,) 0/1, groups (N,) int query ids (any order, not necessarily contiguous);
    ``order`` (N,) optional int positions defining the input order (default: tensor order), e.g. the example
    index, so that results do not depend on how batches were gathered. Only R_N@k with N smaller than a group
    reads that order (which non-relevant candidates it keeps); ties never do (pessimistic, see the module).
    """
    _check_names(metrics)
    scores, labels, groups = scores.detach().double().cpu(), labels.detach().cpu().bool(), groups.detach().cpu()
    if not (scores.shape == labels.shape == groups.shape) or scores.dim() != 1:
        raise ValueError(f"scores, labels and groups must be 1-D of one length, got {scores.shape}, "
                         f"{labels.shape}, {groups.shape}")
    if order is not None:  # put items in input order first; every later sort is stable
        perm = torch.argsort(order.detach().cpu(), stable=True)
        scores, labels, groups = scores[perm], labels[perm], groups[perm]
    by_group = torch.argsort(groups, stable=True)  # groups contiguous, input order inside each
    g, s, y = groups[by_group], scores[by_group], labels[by_group]
    ids, counts = torch.unique_consecutive(g, return_counts=True)
    sums = {name: 0.0 for name in metrics}
    n, skipped = 0, 0
    for gid, ss, yy in zip(ids.tolist(), torch.split(s, counts.tolist()), torch.split(y, counts.tolist())):
        if not yy.any():
            skipped += 1
            continue
        n += 1
        if "map" in sums or "mrr" in sums:
            ranked = pessimistic_order(ss, yy)
            ranks = torch.nonzero(ranked).squeeze(1).double() + 1.0  # 1-based ranks of the relevant items
            hits = torch.arange(1, len(ranks) + 1, dtype=torch.float64)
            if "map" in sums:
                sums["map"] += (hits / ranks).mean().item()
            if "mrr" in sums:
                sums["mrr"] += 1.0 / ranks[0].item()
        for name in sums:
            m = _RECALL.match(name)
            if m:
                sums[name] += query_recall(ss.tolist(), yy.tolist(), int(m.group(1)), int(m.group(2)), f"group {gid}")
    out: dict = {name: (v / n if n else 0.0) for name, v in sums.items()}
    out.update(queries=n, skipped_queries=skipped)
    return out


class GroupedRanking(Metric):
    """torchmetrics wrapper around :func:`ranking_scores`; states are concatenated across processes (DDP)."""

    full_state_update = False

    def __init__(self, metrics: Sequence[str] = ("map", "mrr"), **kwargs):
        super().__init__(**kwargs)
        _check_names(metrics)
        self.names = tuple(metrics)
        for state in ("scores", "labels", "groups", "order", "keyed"):
            self.add_state(state, default=[], dist_reduce_fx="cat")

    def update(self, scores: torch.Tensor, labels: torch.Tensor, groups: torch.Tensor,
               order: torch.Tensor | None = None) -> None:
        self.scores.append(scores.detach().double())  # float32 would turn a near-tie of float64 scores into a tie
        self.labels.append(labels.detach().long())
        self.groups.append(groups.detach().long())
        keyed = order is not None  # an example id: a repeat of it (DDP sampler padding) is counted once
        if order is None:  # running position: input order within this process
            start = sum(len(x) for x in self.order)
            order = torch.arange(start, start + len(scores), device=scores.device)
        self.order.append(order.detach().long())
        self.keyed.append(torch.full((len(scores),), keyed, dtype=torch.bool, device=scores.device))

    def compute(self) -> dict[str, torch.Tensor]:
        if isinstance(self.scores, list) and not self.scores:
            return {name: torch.tensor(0.0) for name in self.names}
        scores, labels, groups, order = (cat_state(s) for s in (self.scores, self.labels, self.groups, self.order))
        keyed = cat_state(self.keyed)
        keep = ~keyed  # running positions are never repeats; an example id counts at its first position only
        keep[keyed] = first_occurrence(order[keyed])
        out = ranking_scores(scores[keep], labels[keep], groups[keep], self.names, order[keep])
        return {name: torch.tensor(out[name]) for name in self.names}
