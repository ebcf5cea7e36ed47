"""FEVER's evidence, prepared once: ``coda-exp fever-index`` then ``coda-exp fever-retrieve`` (``python
scripts/fever_index.py`` and ``scripts/fever_retrieve.py`` in a checkout); both need ``coda-exp[fever]``
(scikit-learn)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from coda_exp import extras
from coda_exp.data.evidence.readers import LABELS, get_claim_reader
from coda_exp.data.evidence.retrieval import (
    RETRIEVAL_RANGES,
    RetrievalOptions,
    index_path,
    open_ranker,
    out_of_range,
    range_text,
    retrieved_evidence,
)
from coda_exp.data.evidence.wiki import open_store
from coda_exp.environment import root_dir
from coda_exp.errors import UserError
from coda_exp.metrics.fever import evidence_precision, evidence_recall
from coda_exp.tools.data_files import make_folder

INDEX_DOC = """Index the Wikipedia dump, the sqlite page store and the TF-IDF page index, in the cache.

    coda-exp fever-index --data data/fever [--cache cache] [--hash-bits 24] [--ngram 2]

``--data`` holds wiki-pages/wiki-NNN.jsonl. Training runs (task=fever) and ``fever-retrieve`` find both files in
the same cache (``paths.cache_dir``; scale=fixture uses cache/fixture) and never rebuild them.
"""

RETRIEVE_DOC = """Retrieve evidence for every claim once (top-5 pages, their top-5 sentences) and print its
quality.

    coda-exp fever-retrieve --data data/fever [--cache cache] [--splits train validation test]

Writes one predicted-evidence file per split (JSON lines ``{"id", "predicted_pages", "predicted_sentences"}``)
into the cache that task=fever reads (built the first time, reused after), and prints, per split, the official
scorer's evidence recall / precision / F1 over the verifiable claims (the first 5 sentences; the AttConv paper
reports 44.22 / 10.44 / 16.89 on paper_dev for the baseline's retrieval).
"""


def option(name: str):
    """An argparse type for the retrieval option ``name``: an int in the range task=fever's
    ``data.retrieval.<name>`` allows (:data:`~coda_exp.data.evidence.retrieval.RETRIEVAL_RANGES`)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if expected := out_of_range(name, value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    parse.__name__ = name  # argparse names the type in some messages
    return parse


def add_options(ap: argparse.ArgumentParser, names: tuple[str, ...]) -> None:
    defaults = RetrievalOptions()
    for name in names:
        low, high = RETRIEVAL_RANGES[name]
        ap.add_argument(f"--{name.replace('_', '-')}", type=option(name), default=getattr(defaults, name),
                        help=f"{range_text(low, high)} (default {getattr(defaults, name)}; data.retrieval.{name})")


def cache_problem(cache: Path) -> None:
    """A :class:`~coda_exp.errors.UserError` (one line, exit 2) when ``--cache`` cannot be made a folder."""
    problem = make_folder("--cache", cache)
    if problem:
        raise UserError(problem.removeprefix("error: "))


def index_main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=INDEX_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="folder holding wiki-pages/")
    ap.add_argument("--cache", type=Path, default=root_dir() / "cache",
                    help="cache folder (paths.cache_dir; default: cache/ where task=fever looks)")
    add_options(ap, ("hash_bits", "ngram"))
    args = ap.parse_args(argv)
    extras.require("sklearn", "coda-exp fever-index")  # before the store is built
    cache_problem(args.cache)
    start = time.time()
    store = open_store(args.data, args.cache)
    print(f"store: {store.path} ({len(store)} pages, {time.time() - start:.1f}s)")
    options = RetrievalOptions(ngram=args.ngram, hash_bits=args.hash_bits)
    ranker = open_ranker(store, options)
    print(f"TF-IDF index: {index_path(store, options)} ({ranker.matrix.nnz} weights, {time.time() - start:.1f}s)")
    return 0


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


def retrieve_main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=RETRIEVE_DOC,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="folder of the claim files and wiki-pages/")
    ap.add_argument("--cache", type=Path, default=root_dir() / "cache",
                    help="cache folder (paths.cache_dir; default: cache/ where task=fever looks)")
    ap.add_argument("--splits", nargs="+", default=["train", "validation", "test"])
    add_options(ap, ("pages", "sentences", "ngram", "hash_bits"))
    args = ap.parse_args(argv)
    extras.require("sklearn", "coda-exp fever-retrieve")
    cache_problem(args.cache)
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
