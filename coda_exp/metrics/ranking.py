"""Grouped ranking metrics: MAP and MRR over queries (answer selection, response selection).

Written here rather than taken from torchmetrics because ``torchmetrics.retrieval.RetrievalMAP`` 1.9.0 returns 0
for a query whose scores are all negative (it pads with zeros internally); our models score with log-odds,
which are often negative. Ties are broken by input order (a stable sort), so results are deterministic.
"""

from __future__ import annotations

import torch
from torchmetrics import Metric


def ranking_scores(scores: torch.Tensor, labels: torch.Tensor, groups: torch.Tensor) -> dict[str, float | int]:
    """MAP and MRR over the groups with at least one relevant item; also how many groups were skipped.

    scores (N,) float, labels (N,) 0/1, groups (N,) int query ids (any order, not necessarily contiguous).
    """
    scores, labels, groups = scores.detach().double().cpu(), labels.detach().cpu().bool(), groups.detach().cpu()
    if not (scores.shape == labels.shape == groups.shape) or scores.dim() != 1:
        raise ValueError(f"scores, labels and groups must be 1-D of one length, got {scores.shape}, "
                         f"{labels.shape}, {groups.shape}")
    # order by group, then by descending score; stable so ties keep their input order
    order = torch.argsort(-scores, stable=True)
    order = order[torch.argsort(groups[order], stable=True)]
    g, y = groups[order], labels[order]
    _, counts = torch.unique_consecutive(g, return_counts=True)
    aps, rrs, skipped = [], [], 0
    for yy in torch.split(y, counts.tolist()):
        if not yy.any():
            skipped += 1
            continue
        ranks = torch.nonzero(yy).squeeze(1).double() + 1.0  # 1-based ranks of the relevant items
        hits = torch.arange(1, len(ranks) + 1, dtype=torch.float64)
        aps.append((hits / ranks).mean().item())
        rrs.append(1.0 / ranks[0].item())
    n = len(aps)
    return {"map": sum(aps) / n if n else 0.0, "mrr": sum(rrs) / n if n else 0.0, "queries": n,
            "skipped_queries": skipped}


class GroupedRanking(Metric):
    """torchmetrics wrapper around :func:`ranking_scores`; states are concatenated across processes (DDP)."""

    full_state_update = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.add_state("scores", default=[], dist_reduce_fx="cat")
        self.add_state("labels", default=[], dist_reduce_fx="cat")
        self.add_state("groups", default=[], dist_reduce_fx="cat")

    def update(self, scores: torch.Tensor, labels: torch.Tensor, groups: torch.Tensor) -> None:
        self.scores.append(scores.detach().float())
        self.labels.append(labels.detach().long())
        self.groups.append(groups.detach().long())

    def compute(self) -> dict[str, torch.Tensor]:
        def cat(x):
            return torch.cat(x) if isinstance(x, list) else x

        if isinstance(self.scores, list) and not self.scores:
            return {"map": torch.tensor(0.0), "mrr": torch.tensor(0.0)}
        out = ranking_scores(cat(self.scores), cat(self.labels), cat(self.groups))
        return {"map": torch.tensor(out["map"]), "mrr": torch.tensor(out["mrr"])}
