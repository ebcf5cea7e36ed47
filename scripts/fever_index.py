#!/usr/bin/env python
"""Index the FEVER Wikipedia dump once: the sqlite page store and the TF-IDF page index, in the cache.

    python scripts/fever_index.py --data data/fever [--cache cache] [--hash-bits 24] [--ngram 2]

``--data`` holds wiki-pages/wiki-NNN.jsonl. Training runs (task=fever) and scripts/fever_retrieve.py find both
files in the same cache (``paths.cache_dir``; scale=fixture uses cache/fixture) and never rebuild them.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from coda_exp.data.evidence.retrieval import RetrievalOptions, index_path, open_ranker
from coda_exp.data.evidence.wiki import open_store


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="folder holding wiki-pages/")
    ap.add_argument("--cache", type=Path, default=Path("cache"), help="cache folder (paths.cache_dir)")
    ap.add_argument("--hash-bits", type=int, default=RetrievalOptions.hash_bits)
    ap.add_argument("--ngram", type=int, default=RetrievalOptions.ngram)
    args = ap.parse_args(argv)
    start = time.time()
    store = open_store(args.data, args.cache)
    print(f"store: {store.path} ({len(store)} pages, {time.time() - start:.1f}s)")
    options = RetrievalOptions(ngram=args.ngram, hash_bits=args.hash_bits)
    ranker = open_ranker(store, options)
    print(f"TF-IDF index: {index_path(store, options)} ({ranker.matrix.nnz} weights, {time.time() - start:.1f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
