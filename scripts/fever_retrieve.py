#!/usr/bin/env python
"""Retrieve evidence for every FEVER claim once (top-5 pages, their top-5 sentences) and print its quality.

    python scripts/fever_retrieve.py --data data/fever [--cache cache] [--splits train validation test]

Writes one predicted-evidence file per split (JSON lines ``{"id", "predicted_pages", "predicted_sentences"}``) into
the cache that task=fever reads (built the first time, reused after), and prints, per split, the official scorer's
evidence recall / precision / F1 over the verifiable claims (the first 5 sentences; the AttConv paper reports
44.22 / 10.44 / 16.89 on paper_dev for the baseline's retrieval).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from coda_exp.data.evidence.readers import LABELS, get_claim_reader
from coda_exp.data.evidence.retrieval import RetrievalOptions, retrieved_evidence
from coda_exp.data.evidence.wiki import open_store
from coda_exp.metrics.fever import evidence_precision, evidence_recall


def quality(claims: list[dict], predicted: dict[int, list]) -> tuple[float, float, float]:
    """(recall, precision, F1) of the predicted sentences, macro-averaged over the verifiable claims."""
    rec = prec = n = 0.0
    for c in claims:
        label, pred = LABELS[c["label"]], [list(p) for p in predicted[c["id"]]]
        r, k = evidence_recall(label, c["evidence"], pred)
        p, _ = evidence_precision(label, c["evidence"], pred)
        rec, prec, n = rec + r, prec + p, n + k
    recall, precision = (rec / n, prec / n) if n else (0.0, 1.0)
    return recall, precision, 2 * recall * precision / (recall + precision) if recall + precision else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="folder of the claim files and wiki-pages/")
    ap.add_argument("--cache", type=Path, default=Path("cache"), help="cache folder (paths.cache_dir)")
    ap.add_argument("--splits", nargs="+", default=["train", "validation", "test"])
    defaults = RetrievalOptions()
    for name in ("pages", "sentences", "ngram", "hash_bits"):
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name))
    args = ap.parse_args(argv)
    options = RetrievalOptions(args.pages, args.sentences, args.ngram, args.hash_bits)
    reader = get_claim_reader("fever")
    store = open_store(args.data, args.cache)
    for split in args.splits:
        claims = list(reader.read(split, args.data))
        predicted, path = retrieved_evidence(store, options, split, claims, reader.source_key(split, args.data))
        recall, precision, f1 = quality(claims, predicted)
        print(f"{split}: {len(claims)} claims -> {path}\n  evidence recall {100 * recall:.2f}  precision "
              f"{100 * precision:.2f}  F1 {100 * f1:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
