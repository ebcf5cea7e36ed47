"""LightningDataModule for span extraction over retrieved passages (Quasar-T, SearchQA: CoDA Table 1, DecaProp).

A batch: ``{"p_ids" (B, Lp), "p_mask" (B, Lp) bool, "q_ids" (B, Lq), "q_mask", "start" (B,), "end" (B,)
(inclusive token index; -1 for an evaluation example whose answer is not in its capped context), "index" (B,)}``,
plus ``"p_chars"``, ``"q_chars"`` (B, L, W) with ``use_char`` (0 = pad, W = ``max_word_len``) and ``"p_em"``,
``"q_em"`` (B, L) float with ``use_exact_match`` (1.0 where the lower-cased word occurs on the other side).
The gold answers and the context tokens of the evaluation splits stay here (``task_kwargs``: ``answers(split)``,
``tokens(split)``, indexed by ``index``), so the task turns a predicted ``(i, j)`` into text.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter

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
from coda_exp.data.common.vocab import PAD_ID, UNK_ID, Vocab
from coda_exp.data.span.context import (
    TRAIN_CONTEXTS,
    cut_training,
    find_span,
    join_passages,
    tokens_with_space,
)
from coda_exp.data.span.readers import get_span_reader

log = logging.getLogger(__name__)
CHAR_PAD, CHAR_UNK = 0, 1


def _pad(seqs: list[list[int]], width: int) -> torch.Tensor:
    out = torch.full((len(seqs), width), PAD_ID, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out


def collate_span(rows: list[dict], char_width: int = 16) -> dict[str, torch.Tensor]:
    """Pad passages and questions to the longest of the batch (at least 1), words to ``char_width`` characters."""
    batch: dict[str, torch.Tensor] = {}
    for side in ("p", "q"):
        width = max(1, max(len(r[f"{side}_ids"]) for r in rows))
        ids = _pad([r[f"{side}_ids"] for r in rows], width)
        mask = torch.zeros_like(ids, dtype=torch.bool)
        for i, r in enumerate(rows):
            mask[i, : len(r[f"{side}_ids"])] = True
        batch[f"{side}_ids"], batch[f"{side}_mask"] = ids, mask  # (B, L)
        if f"{side}_chars" in rows[0]:
            chars = torch.zeros(len(rows), width, char_width, dtype=torch.long)  # (B, L, W)
            for i, r in enumerate(rows):
                for t, c in enumerate(r[f"{side}_chars"]):
                    chars[i, t, : len(c)] = torch.as_tensor(c[:char_width], dtype=torch.long)
            batch[f"{side}_chars"] = chars
        if f"{side}_em" in rows[0]:
            em = torch.zeros(len(rows), width)
            for i, r in enumerate(rows):
                em[i, : len(r[f"{side}_em"])] = torch.as_tensor(r[f"{side}_em"], dtype=torch.float)
            batch[f"{side}_em"] = em
    for key in ("start", "end", "index"):
        batch[key] = torch.tensor([r[key] for r in rows], dtype=torch.long)
    return batch


class SpanDataModule(DataModule):
    """Reads a span benchmark (``dataset``: quasart | searchqa) from ``dir``.

    ``contexts``: Quasar-T's short or long pseudo-documents. The passages of a question are joined into one
    context; ``train_context``: ``window`` (``max_len_passage_train`` tokens centred on the first answer
    occurrence: DecaProp's pipeline) or ``all`` (the first ``max_len_passage_train`` tokens). Training examples
    whose answer does not occur in their (cut) context are dropped and counted (``train_dropped_no_answer``,
    ``train_dropped_truncated`` in the run record); evaluation contexts keep their first ``max_len_passage_eval``
    tokens and every example (EM/F1 compare texts). ``max_len_query`` caps the question. The vocabulary is built on
    the training contexts and questions (lower-cased when ``lowercase``); ``embeddings`` as in the pair family;
    ``use_char`` adds characters (at most ``max_word_len`` per word; the character vocabulary is the training
    words'), ``use_exact_match`` the exact-match features. Capped splits are random subsets (``subset_seed``).
    """
    FAMILIES = ("span_extraction",)

    def __init__(self, dataset: str, dir: str | None = None, cache_dir: str = "cache",
                 contexts: str = "short", train_context: str = "window", max_len_passage_train: int | None = 200,
                 max_len_passage_eval: int | None = 1000, max_len_query: int | None = 25, batch_size: int = 100,
                 eval_batch_size: int | None = 100, lowercase: bool = True, min_freq: int = 1,
                 max_vocab: int | None = None, embeddings: dict | None = None, use_char: bool = False,
                 max_word_len: int = 16, use_exact_match: bool = False, max_train_examples: int | None = None,
                 max_eval_examples: int | None = None, subset_seed: int = 0, num_workers: int = 0, seed: int = 0):
        super().__init__(dir=dir, cache_dir=cache_dir, batch_size=batch_size, eval_batch_size=eval_batch_size,
                         max_train_examples=max_train_examples, max_eval_examples=max_eval_examples,
                         num_workers=num_workers, seed=seed)
        if train_context not in TRAIN_CONTEXTS:
            raise DataError(f"data.train_context must be one of {list(TRAIN_CONTEXTS)}, got {train_context!r}")
        self.reader = get_span_reader(dataset, **({"contexts": contexts} if dataset == "quasart" else {}))
        self.contexts, self.train_context = contexts, train_context
        self.max_len = {"train": max_len_passage_train, "eval": max_len_passage_eval, "query": max_len_query}
        self.lowercase, self.min_freq, self.max_vocab = lowercase, min_freq, max_vocab
        self.embeddings_cfg = dict(embeddings or {})
        self.use_char, self.max_word_len, self.use_exact_match = use_char, max_word_len, use_exact_match
        self.subset_seed = subset_seed
        self.collate = functools.partial(collate_span, char_width=max_word_len)
        self.vocab: Vocab | None = None
        self.chars: dict[str, int] = {}
        self.embedding_matrix: torch.Tensor | None = None
        self._answers: dict[str, list[list[str]]] = {}
        self._tokens: dict[str, list[list[str]]] = {}

    def model_kwargs(self) -> dict:
        return {"vocab_size": len(self.vocab), "embeddings": self.embedding_matrix, "pad_id": PAD_ID,
                "char_vocab_size": len(self.chars) + 2 if self.use_char else None}

    def task_kwargs(self) -> dict:
        """``answers(split)``: the gold strings of each example; ``tokens(split)``: its context tokens (each with
        its trailing whitespace); ``ngram_metrics``: also report unigram-answer EM, n-gram-answer F1 (SearchQA)."""
        return {"answers": self.answers, "tokens": self.tokens, "ngram_metrics": self.reader.ngram_metrics}

    def answers(self, split: str) -> list[list[str]]:
        return self._answers[split]

    def tokens(self, split: str) -> list[list[str]]:
        return self._tokens[split]

    # -- building -------------------------------------------------------------------------------------------
    def _prepare(self, split: str, ex: dict) -> dict | None:
        """Context tokens, question tokens and gold span of ``ex``; None for a dropped training example."""
        context = tokens_with_space(join_passages(ex["passages"]))
        question = tokens_with_space(ex["question"])[: self.max_len["query"]]
        span = None
        for answer in ex["answers"]:
            span = find_span(context, tokens_with_space(answer))
            if span is not None:
                break
        if not context:
            self.stats[f"{split}_empty_contexts"] = self.stats.get(f"{split}_empty_contexts", 0) + 1
        if split == "train":
            if span is None:
                self.stats["train_dropped_no_answer"] += 1
                return None
            cut = cut_training(context, span, self.max_len["train"], self.train_context)
            if cut is None:
                self.stats["train_dropped_truncated"] += 1
                return None
            offset, span = cut
            context = context[offset: offset + (self.max_len["train"] or len(context))]
        else:
            cap = self.max_len["eval"]
            context = context[:cap] if cap else context
            if span is not None and span[1] >= len(context):
                span = None
        start, end = span if span is not None else (-1, -1)
        return {"context": context, "question": question, "start": start, "end": end, "answers": ex["answers"]}

    def _word(self, token: str) -> str:
        token = token.strip()
        return token.lower() if self.lowercase else token

    def _encode(self, examples: list[dict]) -> list[dict]:
        rows = []
        for i, ex in enumerate(examples):
            p = [self._word(t) for t in ex["context"]]
            q = [self._word(t) for t in ex["question"]]
            row = {"p_ids": self.vocab.lookup(p), "q_ids": self.vocab.lookup(q), "start": ex["start"],
                   "end": ex["end"], "index": i}
            if self.use_char:
                get = self.chars.get
                row["p_chars"] = [[get(c, CHAR_UNK) for c in w[: self.max_word_len]] for w in p]
                row["q_chars"] = [[get(c, CHAR_UNK) for c in w[: self.max_word_len]] for w in q]
            if self.use_exact_match:
                ps, qs = {w.lower() for w in p}, {w.lower() for w in q}
                row["p_em"] = [float(w.lower() in qs) for w in p]
                row["q_em"] = [float(w.lower() in ps) for w in q]
            rows.append(row)
        return rows

    def _words(self, examples: list[dict]):
        for ex in examples:
            yield [self._word(t) for t in ex["context"]]
            yield [self._word(t) for t in ex["question"]]

    def build(self) -> None:
        if self.dir is None:
            list(self.reader.read("train", None))  # the reader's "no hub copy: pass data.dir" error
        self.stats.update(train_dropped_no_answer=0, train_dropped_truncated=0)
        raw: dict[str, list[dict]] = {}
        for split in self.read_splits(self.reader.splits()):
            read = self.subset(split, list(self.reader.read(split, self.dir)))
            raw[split] = [e for e in (self._prepare(split, ex) for ex in read) if e is not None]
            self.stats[f"{split}_questions"] = len(read)
        if "train" in raw and not raw["train"]:
            raise DataError(f"{self.reader.name}: no training example keeps its answer in its context "
                            f"({self.stats['train_dropped_no_answer']} without the answer, "
                            f"{self.stats['train_dropped_truncated']} beyond the cap) in {self.dir}")
        dropped = self.stats["train_dropped_no_answer"] + self.stats["train_dropped_truncated"]
        if dropped:
            self.warn(f"{self.reader.name}: {dropped} of {self.stats['train_questions']} training questions dropped "
                      "(answer absent from the context or beyond the length cap)")
        if self.restored is None:  # else the trained model's vocabularies (restore_encoders)
            self._build_vocabularies(raw)
        for split, examples in raw.items():
            self.splits[split] = self._encode(examples)
            self._answers[split] = [ex["answers"] for ex in examples]
            self._tokens[split] = [ex["context"] for ex in examples] if split != "train" else []
            if split != "train":
                self.stats[f"{split}_answer_in_context"] = round(
                    sum(ex["start"] >= 0 for ex in examples) / max(1, len(examples)), 4)
                self._check_answerable(split, examples)
        self.stats.update(dataset=self.reader.name, train_context=self.train_context, vocab_size=len(self.vocab),
                          unk_id=UNK_ID, **({"contexts": self.contexts} if self.reader.name == "quasart" else {}))
        log.info("%s: %s", self.reader.name, self.stats)

    def _build_vocabularies(self, raw: dict[str, list[dict]]) -> None:
        """Words (and characters, with ``use_char``) of the training contexts and questions; the vectors."""
        self.vocab = Vocab.build(self._words(raw["train"]), min_freq=self.min_freq, max_size=self.max_vocab)
        self._load_embeddings(raw)
        if self.use_char:
            counts = Counter(c for toks in self._words(raw["train"]) for w in toks for c in w[: self.max_word_len])
            self.chars = {c: i + 2 for i, c in enumerate(sorted(counts, key=lambda c: (-counts[c], c)))}

    # -- a trained model's vocabularies: eval and predict -------------------------------------------------------
    INPUT_FIELDS = ("question", "passages")  # passages: a list of texts (joined as the readers' are) or one text
    INPUT_IDS = ("p_ids", "q_ids")  # the encoded inputs' token ids (UNK_ID: a token the model does not know)

    def encoder_state(self) -> dict:
        return new_state("span", vocab=tokenizer_state(self.vocab), chars="".join(sorted(self.chars,
                         key=self.chars.get)), embeddings=table_shape(self.embedding_matrix))

    def restore_encoders(self, state: dict) -> None:
        self.restored = check_state(state, "span")
        self.vocab = tokenizer_from_state(state["vocab"])
        self.chars = {c: i + 2 for i, c in enumerate(state["chars"])}
        self.embedding_matrix = placeholder_table(state["embeddings"])

    def encode_inputs(self, rows: list[dict]) -> list[dict]:
        """Rows ``collate`` takes, each with its context's tokens (``context_tokens``: a predicted span's text)."""
        examples = []
        for r in rows:
            passages = [r["passages"]] if isinstance(r["passages"], str) else list(r["passages"])
            examples.append(self._prepare("predict", {"passages": passages, "question": r["question"],
                                                      "answers": []}))
        return [{**row, "context_tokens": ex["context"]} for row, ex in zip(self._encode(examples), examples)]

    def _check_answerable(self, split: str, examples: list[dict]) -> None:
        """An evaluation split where no answer occurs in its context (e.g. every context empty) scores EM 0 and
        F1 0 whatever the model: refused, for validation too (model selection would run on a metric always 0)."""
        if not examples or any(ex["start"] >= 0 for ex in examples):
            return
        empty = self.stats.get(f"{split}_empty_contexts", 0)
        message = (f"{self.reader.name} {split}: none of the {len(examples)} questions has its answer in its context "
                   f"({empty} contexts empty): every score of this split would be 0 whatever the model; check the "
                   f"contexts files in {self.dir}" + (f" (data.contexts={self.contexts})"
                                                      if self.reader.name == "quasart" else ""))
        raise DataError(message)

    def _load_embeddings(self, raw: dict[str, list[dict]]) -> None:
        path = self.embeddings_cfg.get("path")
        if not path:
            self.warn_untrained_vectors(
                "no pretrained embeddings (data.embeddings.path is null): word vectors are randomly initialised, "
                "so numbers will not match the paper's (DecaProp: 300-d GloVe)")
            return
        extra = None
        if self.embeddings_cfg.get("extend_vocab", True):
            extra = {w for s in raw if s != "train" for toks in self._words(raw[s]) for w in toks}
            extra -= set(self.vocab.stoi)
        size = len(self.vocab)
        self.embedding_matrix, found = load_pretrained(path, self.vocab, lowercase=self.lowercase, seed=self.seed,
                                                       extra_words=extra)
        self.stats.update(embeddings_found=found, vocab_added_from_embeddings=len(self.vocab) - size)
