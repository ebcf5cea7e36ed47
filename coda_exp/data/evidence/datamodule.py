"""LightningDataModule for claim verification with evidence sentences (FEVER, AttConv Table 9).

Each example is a claim and up to K evidence sentences; a batch is ``{"claim_ids" (B, Lc), "claim_mask",
"evidence_ids" (B, K, Le), "evidence_mask" (a sentence row with no True is absent), "label" (B,), "index" (B,)}``,
with the labels SUPPORTS, REFUTES, NOT ENOUGH INFO -> 0, 1, 2. How the model reads several sentences
(context-wise or concatenated) is the model's business.
"""

from __future__ import annotations

import logging
import random

import torch

from coda_exp.data.common.base import DataModule
from coda_exp.data.common.embeddings import load_pretrained
from coda_exp.data.common.encoders import (
    check_state,
    new_state,
    placeholder_table,
    table_shape,
    tokenizer_from_state,
    tokenizer_state,
)
from coda_exp.data.common.errors import DataError
from coda_exp.data.common.vocab import PAD_ID, Vocab, tokenize
from coda_exp.data.evidence.readers import NEI, get_claim_reader
from coda_exp.data.evidence.retrieval import RetrievalOptions, retrieved_evidence
from coda_exp.data.evidence.wiki import WikiStore, open_store

log = logging.getLogger(__name__)
EVIDENCE_MODES = ("retrieved", "gold")
NEI_MODES = ("nearest", "random")


def _pad(seqs: list[list[int]], width: int) -> torch.Tensor:
    out = torch.full((len(seqs), width), PAD_ID, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out


def collate_evidence(rows: list[dict]) -> dict[str, torch.Tensor]:
    """Pad claims to the longest claim, evidence to the most sentences and the longest sentence of the batch."""
    k = max(1, max(len(r["evidence_ids"]) for r in rows))
    le = max([1, *(len(s) for r in rows for s in r["evidence_ids"])])
    claims = _pad([r["claim_ids"] for r in rows], max(1, max(len(r["claim_ids"]) for r in rows)))
    evidence = torch.stack([_pad(r["evidence_ids"] + [[]] * (k - len(r["evidence_ids"])), le) for r in rows])
    return {"claim_ids": claims, "claim_mask": claims != PAD_ID,  # (B, Lc)
            "evidence_ids": evidence, "evidence_mask": evidence != PAD_ID,  # (B, K, Le)
            "label": torch.tensor([r["label"] for r in rows], dtype=torch.long),
            "index": torch.tensor([r["index"] for r in rows], dtype=torch.long)}


def smallest_set(evidence: list) -> list[tuple[str, int]]:
    """The ``(page, sentence)`` pairs of the gold evidence set with the fewest distinct sentences (the first of
    equal ones), in the file's order."""
    sets = [list(dict.fromkeys((e[2], e[3]) for e in group)) for group in evidence]
    return min(sets, key=len)


class EvidenceDataModule(DataModule):
    """Reads a claim benchmark (``dataset``: fever) and its Wikipedia dump from ``dir``.

    ``evidence``: ``retrieved`` (the top ``retrieval.sentences`` sentences of the top ``retrieval.pages`` pages,
    :mod:`coda_exp.data.evidence.retrieval`: Table 9's "All" and "Sub") or ``gold`` (the smallest gold evidence
    set: Table 9's "gold"). With gold evidence, NOT ENOUGH INFO claims get ``nei_sentences`` sampled sentences:
    ``nearest`` = the first retrieved sentences of the claim (Thorne et al.'s NearestP, the better of their two
    samplers), ``random`` = sentences of random pages (drawn from ``sample_seed`` and the claim id: the same for
    every run). ``max_sentences`` caps the sentences per claim (null: all); ``max_len_claim`` /
    ``max_len_evidence`` cap the tokens. The dump is indexed once into ``cache_dir`` (sqlite); retrieved evidence
    is cached there per split (``scripts/fever_retrieve.py`` fills the same cache and prints its recall).
    The vocabulary is built on the training claims and their evidence sentences; ``embeddings`` as in the pair
    family. Capped splits (``max_*_examples``) are random subsets drawn with the fixed ``subset_seed``.
    """
    FAMILIES = ("evidence_classification",)

    collate = staticmethod(collate_evidence)

    def __init__(self, dataset: str = "fever", dir: str | None = None, cache_dir: str = "cache",
                 evidence: str = "retrieved", nei_evidence: str = "nearest", nei_sentences: int = 1,
                 max_sentences: int | None = None, retrieval: dict | None = None, batch_size: int = 50,
                 eval_batch_size: int | None = 200, max_len_claim: int | None = 50, max_len_evidence: int | None = 50,
                 lowercase: bool = True, min_freq: int = 1, max_vocab: int | None = None,
                 embeddings: dict | None = None, max_train_examples: int | None = None,
                 max_eval_examples: int | None = None, subset_seed: int = 0, sample_seed: int = 0,
                 progress: bool = True, num_workers: int = 0, seed: int = 0):
        super().__init__(dir=dir, cache_dir=cache_dir, batch_size=batch_size, eval_batch_size=eval_batch_size,
                         max_train_examples=max_train_examples, max_eval_examples=max_eval_examples,
                         num_workers=num_workers, seed=seed)
        for name, value, known in (("evidence", evidence, EVIDENCE_MODES), ("nei_evidence", nei_evidence, NEI_MODES)):
            if value not in known:
                raise DataError(f"data.{name} must be one of {list(known)}, got {value!r}")
        self.reader = get_claim_reader(dataset)
        self.evidence, self.nei_evidence, self.nei_sentences = evidence, nei_evidence, nei_sentences
        self.max_sentences = max_sentences
        self.retrieval = RetrievalOptions(**(retrieval or {}))
        self.max_len = {"claim": max_len_claim, "evidence": max_len_evidence}
        self.lowercase, self.min_freq, self.max_vocab = lowercase, min_freq, max_vocab
        self.embeddings_cfg = dict(embeddings or {})
        self.subset_seed, self.sample_seed, self.progress = subset_seed, sample_seed, progress
        self.vocab: Vocab | None = None
        self.embedding_matrix: torch.Tensor | None = None
        self.claims: dict[str, list[dict]] = {}  # split -> one row per example, in index order (for the task)

    @property
    def num_classes(self) -> int:
        return len(self.reader.label_names)

    def model_kwargs(self) -> dict:
        return {"vocab_size": len(self.vocab), "num_classes": self.num_classes, "embeddings": self.embedding_matrix,
                "pad_id": PAD_ID}

    def task_kwargs(self) -> dict:
        """The number of classes, their names, the evidence mode and the claims of each split (``claim_rows``:
        id, label name, gold evidence sets, the ``[page, sentence]`` pairs given to the model, and the size of
        the smallest gold set) for the FEVER score and the saved predictions."""
        return {"num_classes": self.num_classes, "label_names": list(self.reader.label_names),
                "evidence_mode": self.evidence, "claims": self.claim_rows}

    def claim_rows(self, split: str) -> list[dict]:
        return self.claims[split]

    # -- evidence ------------------------------------------------------------------------------------------
    def _check_gold(self, store: WikiStore, ex: dict) -> None:
        if ex["label"] == NEI:
            return
        for group in ex["evidence"]:
            for _, _, page, line in group:
                if store.lines(page) is None:
                    raise DataError(f"{ex['where']}: evidence names page {page!r}, which the Wikipedia dump "
                                    f"({self.dir}/wiki-pages) lacks")
                if store.sentence(page, line) is None:
                    raise DataError(f"{ex['where']}: evidence names sentence {line} of page {page!r}, which has "
                                    f"{len(store.lines(page))} sentences in the dump")

    def _pairs(self, store: WikiStore, ex: dict, retrieved: dict | None) -> list[tuple[str, int]]:
        """The ``(page, sentence)`` pairs given to the model for the claim ``ex``."""
        if self.evidence == "retrieved":
            pairs = retrieved[ex["id"]]
        elif ex["label"] != NEI:
            pairs = smallest_set(ex["evidence"])
        elif self.nei_evidence == "nearest":
            pairs = retrieved[ex["id"]][: self.nei_sentences]
        else:
            pairs = store.random_sentences(random.Random(f"{self.sample_seed}-{ex['id']}"), self.nei_sentences)
        return pairs[: self.max_sentences] if self.max_sentences is not None else pairs

    def _split_examples(self, store: WikiStore, split: str) -> list[dict]:
        examples = list(self.reader.read(split, self.dir))
        for ex in examples:
            self._check_gold(store, ex)
        retrieved = None
        if self.evidence == "retrieved" or self.nei_evidence == "nearest":
            retrieved, path = retrieved_evidence(store, self.retrieval, split, examples,
                                                 self.reader.source_key(split, self.dir), self.progress)
            self.stats[f"{split}_retrieved_evidence_file"] = str(path)
        out = []
        for ex in self.subset(split, examples):
            pairs = self._pairs(store, ex, retrieved)
            out.append({**ex, "pairs": pairs, "sentences": [store.sentence(p, n) or "" for p, n in pairs]})
        return out

    # -- building -------------------------------------------------------------------------------------------
    def _tokens(self, text: str, side: str) -> list[str]:
        cap = self.max_len[side]
        toks = tokenize(text, self.lowercase)
        return toks[:cap] if cap else toks

    def _encode(self, examples: list[dict]) -> list[dict]:
        lookup = self.vocab.lookup
        return [{"claim_ids": lookup(self._tokens(ex["claim"], "claim")),
                 "evidence_ids": [lookup(self._tokens(s, "evidence")) for s in ex["sentences"]],
                 "label": ex["label"], "index": i} for i, ex in enumerate(examples)]

    def _texts(self, examples: list[dict]):
        for ex in examples:
            yield self._tokens(ex["claim"], "claim")
            yield from (self._tokens(s, "evidence") for s in ex["sentences"])

    def build(self) -> None:
        if self.dir is None:
            list(self.reader.read("train", None))  # the reader's "no hub copy: pass data.dir" error
        store = open_store(self.dir, self.cache_dir, self.progress)
        raw = {s: self._split_examples(store, s) for s in self.read_splits(self.reader.splits())}
        path = self.embeddings_cfg.get("path")
        if self.restored is not None:  # the trained model's vocabulary: its vectors are in its weights
            path = self.restored["embeddings"] is not None
        else:
            self.vocab = Vocab.build(self._texts(raw["train"]), min_freq=self.min_freq, max_size=self.max_vocab)
        if path and self.restored is None:
            extra = None
            if self.embeddings_cfg.get("extend_vocab", True):
                extra = {w for s in raw if s != "train" for toks in self._texts(raw[s]) for w in toks}
                extra -= set(self.vocab.stoi)
            size = len(self.vocab)
            self.embedding_matrix, found = load_pretrained(path, self.vocab, lowercase=self.lowercase,
                                                           seed=self.seed, extra_words=extra)
            self.stats.update(embeddings_found=found, vocab_added_from_embeddings=len(self.vocab) - size)
        elif not path:
            self.warn_untrained_vectors(
                "no pretrained embeddings (data.embeddings.path is null): word vectors are randomly initialised, "
                "so numbers will not match the paper's (300-d word2vec, fine-tuned)")
        names = self.reader.label_names
        for split, examples in raw.items():
            self.splits[split] = self._encode(examples)
            self.claims[split] = [
                {"id": ex["id"], "label": names[ex["label"]], "evidence": ex["evidence"],
                 "predicted_evidence": [list(p) for p in ex["pairs"]],
                 "num_gold_evidence": None if ex["label"] == NEI else len(smallest_set(ex["evidence"]))}
                for ex in examples]
            self.stats[f"{split}_mean_sentences"] = round(sum(len(ex["pairs"]) for ex in examples)
                                                          / max(1, len(examples)), 3)
        self.stats.update(evidence=self.evidence, nei_evidence=self.nei_evidence, vocab_size=len(self.vocab),
                          wiki_pages=len(store), **{f"retrieval_{k}": v for k, v in vars(self.retrieval).items()})
        log.info("%s: %s", self.reader.name, self.stats)

    # -- a trained model's vocabulary: eval and predict --------------------------------------------------------
    INPUT_FIELDS = ("claim", "evidence")  # evidence: the list of sentences the model reads (capped by max_sentences)
    INPUT_IDS = ("claim_ids", "evidence_ids")  # the encoded inputs' token ids (UNK_ID: a token the model does not know)

    def encoder_state(self) -> dict:
        return new_state("evidence", vocab=tokenizer_state(self.vocab), embeddings=table_shape(self.embedding_matrix))

    def restore_encoders(self, state: dict) -> None:
        self.restored = check_state(state, "evidence")
        self.vocab = tokenizer_from_state(state["vocab"])
        self.embedding_matrix = placeholder_table(state["embeddings"])

    def encode_inputs(self, rows: list[dict]) -> list[dict]:
        cap = self.max_sentences
        examples = [{"claim": r["claim"], "label": 0,
                     "sentences": ([r["evidence"]] if isinstance(r["evidence"], str) else list(r["evidence"]))[:cap]}
                    for r in rows]
        return self._encode(examples)
