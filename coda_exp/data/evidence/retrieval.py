"""Evidence retrieval as in the FEVER baseline (Thorne et al. 2018; AttConv Table 9's "All" and "Sub" columns).

1. Pages: DrQA's TF-IDF document ranker (Chen et al. 2017), built on scikit-learn's ``HashingVectorizer``:
   unigrams and bigrams hashed into ``2**hash_bits`` buckets (2^24 in DrQA and the baseline); a document's weight
   for a bucket is ``log(1 + count) * idf`` with DrQA's ``idf = max(0, log((N - df + 0.5) / (df + 0.5)))``; a
   claim is weighted the same way and pages are ranked by the dot product: the top ``pages`` (5).
2. Sentences: the baseline's "online" TF-IDF over all sentences of those pages (idf from those sentences only),
   the top ``sentences`` (5) overall, as ``[page, sentence number]`` pairs.

Differences from DrQA, by construction of the library: sklearn's tokenizer (``\\w+`` runs, lower-cased) instead of
DrQA's, and sklearn's English stop-word list, removed before bigrams are formed (DrQA drops an n-gram when all its
words are stop words or punctuation). Ties are broken by the earlier page / sentence. ``docs/fever.md`` records why
this library and not bm25s (BM25 is another scoring function than the baseline's) and the recall measured.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from coda_exp import extras
from coda_exp.data.common.base import fingerprint
from coda_exp.data.common.errors import DataError
from coda_exp.data.common.files import read_jsonl
from coda_exp.data.evidence.wiki import WikiStore
from coda_exp.io import atomic_write_text

# the allowed values of each option (inclusive; None: no upper bound): 2**30 buckets is the most a HashingVectorizer
# takes (its n_features is an int32)
RETRIEVAL_RANGES = {"pages": (1, None), "sentences": (1, None), "ngram": (1, None), "hash_bits": (1, 30)}


def range_text(low: int, high: int | None) -> str:
    return f"an integer {low}-{high}" if high is not None else f"an integer >= {low}"


def out_of_range(name: str, value) -> str | None:
    """What the retrieval option ``name`` expects (:data:`RETRIEVAL_RANGES`) where ``value`` is not such an
    integer, else None: the one check of ``data.retrieval.*`` and of the FEVER commands' options."""
    low, high = RETRIEVAL_RANGES[name]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= (high or value):
        return range_text(low, high)
    return None


@dataclass(frozen=True)
class RetrievalOptions:
    """``pages`` retrieved per claim, ``sentences`` kept from them, n-grams up to ``ngram``, ``2**hash_bits``
    hash buckets (the FEVER baseline: 5, 5, 2, 24)."""

    pages: int = 5
    sentences: int = 5
    ngram: int = 2
    hash_bits: int = 24

    def __post_init__(self):
        for name in RETRIEVAL_RANGES:
            value = getattr(self, name)
            if expected := out_of_range(name, value):
                raise DataError(f"data.retrieval.{name}={value!r}: expected {expected}")

    def vectorizer(self):
        extras.require("sklearn", "FEVER retrieval (task=fever)")
        from sklearn.feature_extraction.text import HashingVectorizer

        return HashingVectorizer(n_features=2 ** self.hash_bits, ngram_range=(1, self.ngram), alternate_sign=False,
                                 norm=None, token_pattern=r"(?u)\b\w+\b", stop_words="english", dtype=np.float32)


def idf_of(counts) -> tuple[np.ndarray, np.ndarray]:
    """(buckets present, DrQA idf of each) for a (documents, buckets) count matrix."""
    cols, df = np.unique(counts.indices, return_counts=True)
    n = counts.shape[0]
    return cols, np.maximum(np.log((n - df + 0.5) / (df + 0.5)), 0.0).astype(np.float32)


def weigh(counts, cols: np.ndarray, idf: np.ndarray):
    """``log(1 + count) * idf`` of every entry (buckets missing from ``cols`` weigh 0; zeros dropped)."""
    out = counts.tocsr(copy=True)
    pos = np.minimum(np.searchsorted(cols, out.indices), max(len(cols) - 1, 0))
    known = (cols[pos] == out.indices) if len(cols) else np.zeros(len(out.indices), dtype=bool)
    out.data = np.log1p(out.data) * np.where(known, idf[pos] if len(cols) else 0.0, 0.0).astype(np.float32)
    out.eliminate_zeros()
    return out


def top_k(scores: np.ndarray, k: int, keep_zero: bool) -> list[int]:
    """Positions of the ``k`` highest scores, ties to the earlier position (zero scores only with keep_zero)."""
    order = np.lexsort((np.arange(len(scores)), -scores))[:k]
    return [int(i) for i in order if keep_zero or scores[i] > 0]


class TfidfRanker:
    """DrQA's document ranker over the pages of a :class:`WikiStore`: ``matrix`` (pages, buckets) of weights."""

    def __init__(self, matrix, cols: np.ndarray, idf: np.ndarray, ids: list[str], options: RetrievalOptions):
        self.matrix, self.cols, self.idf, self.ids, self.options = matrix, cols, idf, ids, options
        self.vectorizer = options.vectorizer()

    @classmethod
    def build(cls, store: WikiStore, options: RetrievalOptions, progress: bool = True) -> TfidfRanker:
        import scipy.sparse as sp
        from tqdm.auto import tqdm

        vec, ids, parts = options.vectorizer(), [], []
        with tqdm(total=len(store), desc="TF-IDF over pages", unit=" pages", disable=not progress) as bar:
            for batch in store.pages():
                ids += [page for page, _ in batch]
                parts.append(vec.transform([text for _, text in batch]))
                bar.update(len(batch))
        counts = sp.vstack(parts).tocsr() if parts else sp.csr_matrix((0, 2 ** options.hash_bits), dtype=np.float32)
        cols, idf = idf_of(counts)
        return cls(weigh(counts, cols, idf), cols, idf, ids, options)

    def save(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.tmp{os.getpid()}.npz")
        m = self.matrix
        np.savez(tmp, data=m.data, indices=m.indices, indptr=m.indptr, shape=np.array(m.shape), cols=self.cols,
                 idf=self.idf, ids=np.array(json.dumps(self.ids)), options=np.array(json.dumps(asdict(self.options))))
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: Path) -> TfidfRanker:
        import scipy.sparse as sp

        try:
            with np.load(path) as z:
                matrix = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]))
                return cls(matrix, z["cols"], z["idf"], json.loads(str(z["ids"])),
                           RetrievalOptions(**json.loads(str(z["options"]))))
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:  # cut short (a full disk), foreign
            raise DataError(f"{path}: not a readable page index ({type(e).__name__}: {e}); delete it and run again "
                            "(or coda-exp fever-index): it is rebuilt from the Wikipedia pages") from None

    def closest(self, queries: Sequence[str], k: int) -> list[list[str]]:
        """The ids of the ``k`` best pages for each query (pages sharing no weighted n-gram are left out)."""
        q = weigh(self.vectorizer.transform(list(queries)), self.cols, self.idf)
        scores = (q @ self.matrix.T).tocsr()  # (queries, pages)
        out = []
        for r in range(scores.shape[0]):
            row = scores.getrow(r)
            best = top_k(row.data, k, keep_zero=False)
            out.append([self.ids[row.indices[i]] for i in best])
        return out


def select_sentences(claim: str, candidates: list[tuple[str, int, str]], k: int, vectorizer) -> list[list]:
    """The baseline's online TF-IDF: the ``k`` candidate sentences ``(page, number, text)`` closest to ``claim``
    (idf over the candidates), as ``[page, number]``; fewer only when there are fewer candidates."""
    if not candidates:
        return []
    counts = vectorizer.transform([text for _, _, text in candidates])
    cols, idf = idf_of(counts)
    scores = (weigh(counts, cols, idf) @ weigh(vectorizer.transform([claim]), cols, idf).T).toarray().ravel()
    return [[candidates[i][0], candidates[i][1]] for i in top_k(scores, k, keep_zero=True)]


def retrieve(store: WikiStore, ranker: TfidfRanker, claims: Sequence[dict], progress: bool = True,
             chunk: int = 256) -> Iterator[dict]:
    """``{"id", "predicted_pages", "predicted_sentences"}`` for each claim ``{"id", "claim"}``."""
    from tqdm.auto import tqdm

    opts = ranker.options
    with tqdm(total=len(claims), desc="retrieving evidence", unit=" claims", disable=not progress) as bar:
        for start in range(0, len(claims), chunk):
            part = claims[start: start + chunk]
            for claim, pages in zip(part, ranker.closest([c["claim"] for c in part], opts.pages)):
                cands = [(p, n, s) for p in pages for n, s in enumerate(store.lines(p) or []) if s.strip()]
                yield {"id": claim["id"], "predicted_pages": pages,
                       "predicted_sentences": select_sentences(claim["claim"], cands, opts.sentences,
                                                               ranker.vectorizer)}
            bar.update(len(part))


def index_path(store: WikiStore, options: RetrievalOptions) -> Path:
    key = fingerprint("fever-tfidf-v1", store.path.name, options.ngram, options.hash_bits)
    return store.path.parent / f"tfidf-{key}.npz"


def open_ranker(store: WikiStore, options: RetrievalOptions, progress: bool = True) -> TfidfRanker:
    """The page ranker of ``store``, built and saved beside it the first time."""
    path = index_path(store, options)
    if path.is_file():
        return TfidfRanker.load(path)
    ranker = TfidfRanker.build(store, options, progress)
    ranker.save(path)
    return ranker


def predictions_path(store: WikiStore, options: RetrievalOptions, split: str, claims_key: str) -> Path:
    key = fingerprint("fever-retrieved-v1", index_path(store, options).name, asdict(options), claims_key)
    return store.path.parent / "retrieved" / f"{split}-{key}.jsonl"


def write_predictions(rows: Sequence[dict], path: Path) -> Path:
    return atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def read_predictions(path: Path) -> dict[int, list[tuple[str, int]]]:
    """Claim id -> its ``predicted_sentences`` from a predicted-evidence file (the baseline's JSON lines)."""
    out = {}
    for where, row in read_jsonl(path, expected='one JSON object per line: {"id", "predicted_sentences"}'):
        pairs = row.get("predicted_sentences")
        if not isinstance(row.get("id"), int) or not isinstance(pairs, list) or not all(
                isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], int)
                for p in pairs):
            raise DataError(f"{where}: expected an integer 'id' and 'predicted_sentences' [[page, number], ...]")
        out[row["id"]] = [(p, n) for p, n in pairs]
    return out


def retrieved_evidence(store: WikiStore, options: RetrievalOptions, split: str, claims: Sequence[dict],
                       claims_key: str, progress: bool = True) -> tuple[dict[int, list[tuple[str, int]]], Path]:
    """The predicted sentences of every claim of ``split`` and the file holding them: read from the cache, or
    retrieved now (page index built the first time) and cached. ``claims_key`` identifies the claim file."""
    path = predictions_path(store, options, split, claims_key)
    if not path.is_file():
        write_predictions(list(retrieve(store, open_ranker(store, options, progress), claims, progress)), path)
        return read_predictions(path), path
    rebuilt = "delete it and run again, it is retrieved again"
    try:  # the cache of an earlier run: cut short (a full disk, a stopped run) or edited, it is named as the cache
        predicted = read_predictions(path)
    except DataError as err:
        raise DataError(f"{err} (a cached retrieval file of {split}, not a data file: {rebuilt})") from None
    missing = [c["id"] for c in claims if c["id"] not in predicted]
    if missing:
        raise DataError(f"{path}: the cached retrieved evidence of {split} lacks {len(missing)} of its {len(claims)} "
                        f"claims (claim id {missing[0]} first; cut short?): {rebuilt}")
    return predicted, path
