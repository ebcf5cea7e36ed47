"""File-based sequence-to-sequence data modules: AlgoLisp (CoDA Table 7) and IWSLT'15 En→Vi (Tables 4, 9)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

from coda_exp.data.common.errors import DataError
from coda_exp.data.common.tokenization import WordVocabTokenizer
from coda_exp.data.seq2seq.datamodule import SPLITS, EncodedPairs, Seq2SeqDataModule


def _cap(rows: list[dict], limit: int | None) -> list[dict]:
    return rows if limit is None else rows[:limit]


def vocabulary_of(texts, min_freq: int = 1) -> WordVocabTokenizer:
    """A whitespace-token vocabulary of ``texts``, most frequent first (ties alphabetical: deterministic)."""
    counts = Counter(tok for t in texts for tok in t.split())
    return WordVocabTokenizer(sorted((t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t)))


class AlgoLispDataModule(Seq2SeqDataModule):
    """AlgoLisp (Polosukhin & Skidanov 2018): problem text -> the program's flattened ``short_tree``.

    Reads ``metaset3.{train,dev,test}.jsonl`` from ``dir``. Source and target vocabularies are built on the
    training split (words of the statement; program tokens, brackets included). Besides the exact-sequence
    accuracy of the task module, ``evaluate`` runs every decoded program on the problem's input/output tests with
    our AlgoLisp interpreter (``acc_exec``: all tests pass; per example ``exec``, saved with the test predictions).
    """

    def __init__(self, dir: str | None = None, min_freq: int = 1, max_train_examples: int | None = None,
                 max_eval_examples: int | None = None, **kwargs):
        super().__init__(**kwargs)
        if dir is None:
            from coda_exp.data.seq2seq.algolisp import ALGOLISP_SOURCE_HINT

            raise DataError(f"algolisp: set data.dir to the folder holding metaset3.{{train,dev,test}}.jsonl "
                            f"(there is no hub copy). {ALGOLISP_SOURCE_HINT}")
        self.dir, self.min_freq = dir, min_freq
        self.limits = {"train": max_train_examples, "validation": max_eval_examples, "test": max_eval_examples}
        self.examples: dict[str, list[dict]] = {}

    def build(self) -> None:
        from coda_exp.data.seq2seq.algolisp import algolisp_path, read_algolisp

        for split in SPLITS:
            rows = _cap(list(read_algolisp(algolisp_path(self.dir, split))), self.limits[split])
            if not rows:
                raise DataError(f"algolisp: {algolisp_path(self.dir, split)} has no examples")
            self.examples[split] = rows
        train = self.examples["train"]
        self.src_tokenizer = vocabulary_of((r["src"] for r in train), self.min_freq)
        self.tgt_tokenizer = vocabulary_of((r["tgt"] for r in train), self.min_freq)
        for split, rows in self.examples.items():
            self.splits[split] = EncodedPairs([(self.src_tokenizer.encode(r["src"]),
                                                self.tgt_tokenizer.encode(r["tgt"])) for r in rows])
        self.stats.update(src_vocab=self.src_tokenizer.vocab_size, tgt_vocab=self.tgt_tokenizer.vocab_size)

    def evaluate(self, split: str, indices: list[int], hypotheses: list[str]) -> dict[str, float | list]:
        from coda_exp.metrics.algolisp_exec import execution_outcomes

        passed = execution_outcomes(hypotheses, [self.examples[split][i] for i in indices])
        return {"acc_exec": sum(passed) / len(passed) if passed else 0.0, "exec": passed}

    def reference_text(self, split: str, index: int) -> str:
        return self.examples[split][index]["tgt"]


class IWSLTDataModule(Seq2SeqDataModule):
    """IWSLT'15 English→Vietnamese, the Stanford release (train / tst2012 dev / tst2013 test).

    ``tokenizer="word"`` uses the release's own vocabularies ``vocab.{en,vi}`` on its tokenised text (the
    setting of the paper's Table 4 and Luong & Manning); ``"bpe"`` trains a joint BPE of ``bpe_vocab_size``
    locally on the training text (cached). ``evaluate`` scores decoded hypotheses against the *raw* reference
    lines: tokenized BLEU as ``multi-bleu.perl`` on the tokenised text (``bleu_tok``, the paper's metric,
    comparable to 28.43) and sacreBLEU on both sides detokenized (``bleu``, :func:`coda_exp.metrics.bleu.detokenize`;
    signature kept in ``stats``). ``max_len`` drops training pairs longer than that many tokens on either side
    (evaluation keeps everything). ``reference_text`` is the raw line, saved as the test predictions' reference.
    """

    def __init__(self, dir: str | None = None, tokenizer: str = "word", bpe_vocab_size: int = 16000,
                 max_len: int | None = 100, max_train_examples: int | None = None,
                 max_eval_examples: int | None = None, **kwargs):
        super().__init__(**kwargs)
        if tokenizer not in ("word", "bpe"):
            raise ValueError(f"data.tokenizer must be 'word' or 'bpe', got {tokenizer!r}")
        self.dir, self.tokenizer, self.bpe_vocab_size, self.max_len = dir, tokenizer, bpe_vocab_size, max_len
        self.limits = {"train": max_train_examples, "validation": max_eval_examples, "test": max_eval_examples}
        self.references: dict[str, list[str]] = {}

    def _tokenizers(self, train: list[dict]):
        if self.tokenizer == "word":
            from coda_exp.data.seq2seq.iwslt import IWSLT15_ENVI

            return IWSLT15_ENVI.vocabularies(self.dir)
        from coda_exp.data.common.tokenization import cached_bpe

        fingerprint = hashlib.sha1(json.dumps([len(train), train[0], train[-1]]).encode()).hexdigest()
        tok, _ = cached_bpe(lambda: (t for r in train for t in (r["src"], r["tgt"])), fingerprint,
                            self.bpe_vocab_size, self.cache_dir / "iwslt15_envi")
        return tok, tok

    def build(self) -> None:
        from coda_exp.data.seq2seq.iwslt import IWSLT15_ENVI

        raw = {s: _cap(list(IWSLT15_ENVI.read(s, self.dir, drop_empty=s == "train")), self.limits[s])
               for s in SPLITS}
        self.src_tokenizer, self.tgt_tokenizer = self._tokenizers(raw["train"])
        for split, rows in raw.items():
            pairs = [(self.src_tokenizer.encode(r["src"]), self.tgt_tokenizer.encode(r["tgt"])) for r in rows]
            if split == "train" and self.max_len:
                kept = [p for p in pairs if max(len(p[0]), len(p[1])) <= self.max_len]
                self.stats["train_dropped_too_long"] = len(pairs) - len(kept)
                pairs = kept
            self.splits[split] = EncodedPairs(pairs)
            self.references[split] = [r["tgt"] for r in rows]
        self.stats.update(src_vocab=self.src_tokenizer.vocab_size, tgt_vocab=self.tgt_tokenizer.vocab_size,
                          tokenizer=self.tokenizer)

    def evaluate(self, split: str, indices: list[int], hypotheses: list[str]) -> dict[str, float]:
        from coda_exp.metrics.bleu import detokenize, sacrebleu_score, tokenized_bleu

        refs = [self.references[split][i] for i in indices]
        score, signature = sacrebleu_score([detokenize(h) for h in hypotheses], [detokenize(r) for r in refs])
        self.stats["sacrebleu_signature"] = signature
        return {"bleu": score, "bleu_tok": tokenized_bleu(hypotheses, refs)}

    def reference_text(self, split: str, index: int) -> str:
        return self.references[split][index]
