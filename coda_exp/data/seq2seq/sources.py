"""File-based sequence-to-sequence data modules: AlgoLisp (CoDA Table 7) and IWSLT'15 En→Vi (Tables 4, 9)."""

from __future__ import annotations

from pathlib import Path

from coda_exp.data.common.base import fingerprint
from coda_exp.data.common.errors import DataError
from coda_exp.data.common.splits import SPLITS
from coda_exp.data.common.tokenization import cached_bpe
from coda_exp.data.common.vocab import UNK_ID, Vocab
from coda_exp.data.seq2seq.algolisp import ALGOLISP, ALGOLISP_SOURCE_HINT
from coda_exp.data.seq2seq.datamodule import Seq2SeqDataModule
from coda_exp.data.seq2seq.iwslt import IWSLT15_ENVI


def vocabulary_of(texts, min_freq: int = 1) -> Vocab:
    """A whitespace-token vocabulary of ``texts``, most frequent first (ties alphabetical: deterministic)."""
    return Vocab.build((t.split() for t in texts), min_freq=min_freq)


class AlgoLispDataModule(Seq2SeqDataModule):
    """AlgoLisp (Polosukhin & Skidanov 2018): problem text -> the program's flattened ``short_tree``.

    Reads ``metaset3.{train,dev,test}.jsonl`` from ``dir``. Source and target vocabularies are built on the
    training split (words of the statement; program tokens, brackets included). The task evaluates decoded
    programs by exact match and by ``execution`` on the problem's input/output tests (``acc_exec``).
    """

    evaluations = ("execution",)

    def __init__(self, dir: str | None = None, min_freq: int = 1, **kwargs):
        super().__init__(dir=dir, **kwargs)
        if dir is None:
            raise DataError(f"algolisp: set data.dir to the folder holding metaset3.{{train,dev,test}}.jsonl "
                            f"(there is no hub copy). {ALGOLISP_SOURCE_HINT}")
        self.min_freq = min_freq

    def build(self) -> None:
        for split in self.read_splits(SPLITS):
            rows = list(ALGOLISP.read(split, self.dir))
            self.examples[split] = rows if self.limit(split) is None else rows[: self.limit(split)]
        if self.restored is None:  # else the trained model's vocabularies (restore_encoders)
            train = self.examples["train"]
            self.src_tokenizer = vocabulary_of((r["src"] for r in train), self.min_freq)
            self.tgt_tokenizer = vocabulary_of((r["tgt"] for r in train), self.min_freq)
        for split, rows in self.examples.items():
            self.splits[split] = self.encode_split(split, rows)
            unknown = [r for r in rows if r["unknown"]]
            if unknown:  # their programs fail every test: execution accuracy cannot reach 100 %
                self.warn(f"algolisp {split}: {len(unknown)} of {len(rows)} gold programs use symbols the "
                          f"interpreter does not know (first: {unknown[0]['where']}: {unknown[0]['unknown'][:3]}): "
                          "their tests fail whatever the model decodes")
        self.stats.update(src_vocab=self.src_tokenizer.vocab_size, tgt_vocab=self.tgt_tokenizer.vocab_size)


#: the share of unknown training tokens above which the vocabularies are said to be wrong (the release's own: ~1-3 %)
UNK_WARNING = 0.2


class IWSLTDataModule(Seq2SeqDataModule):
    """IWSLT'15 English→Vietnamese, the Stanford release (train / tst2012 dev / tst2013 test).

    ``tokenizer="bpe"`` (the default) learns byte-pair encoding on the release's tokenised training text (cached):
    with ``shared_vocab`` one vocabulary of ``bpe_vocab_size`` on both sides' text, the same tokenizer for source
    and target (the paper's setting as near as we get it: T2T's ``translate_envi_iwslt32k`` builds one subword
    vocabulary of about 2**15 for both languages, with its own SubwordTextEncoder, not BPE); without it, one of
    ``bpe_vocab_size`` per side. ``"word"`` reads the release's own word lists ``vocab.{en,vi}`` (Luong & Manning's
    setting; ``<unk>`` for every other word), one per language, so ``shared_vocab`` cannot be true with it
    (``None``, the default, and what a configuration saved without the key means: shared for BPE, per language for
    words). The task
    scores decoded hypotheses against the *raw* reference lines (``bleu`` evaluation: ``bleu_t2t``, t2t-bleu, the
    paper's metric; ``bleu_tok``; ``bleu``). ``max_len`` drops training pairs longer than that many tokens (of the
    chosen tokenizer) on either side (evaluation keeps everything).
    """

    evaluations = ("bleu",)

    def __init__(self, dir: str | None = None, tokenizer: str = "bpe", shared_vocab: bool | None = None,
                 bpe_vocab_size: int = 32768, max_len: int | None = 256, **kwargs):
        super().__init__(dir=dir, **kwargs)
        if tokenizer not in ("word", "bpe"):
            raise DataError(f"data.tokenizer must be 'word' or 'bpe', got {tokenizer!r}")
        if tokenizer == "word" and shared_vocab:
            raise DataError("data.tokenizer=word reads one vocabulary per language (vocab.en, vocab.vi), not one for "
                            "both: add data.shared_vocab=false (the model's embeddings follow it)")
        self.tokenizer, self.shared_vocab = tokenizer, tokenizer == "bpe" if shared_vocab is None else shared_vocab
        self.bpe_vocab_size, self.max_len = bpe_vocab_size, max_len

    def _tokenizers(self, train: list[dict]):
        if self.tokenizer == "word":
            return IWSLT15_ENVI.vocabularies(self.dir)
        cache = self.cache_dir / "iwslt15_envi"
        if self.shared_vocab:
            key = fingerprint(len(train), train[0], train[-1])
            tok, _ = cached_bpe(lambda: (t for r in train for t in (r["src"], r["tgt"])), key, self.bpe_vocab_size,
                                cache)
            return tok, tok
        return tuple(cached_bpe(lambda side=side: (r[side] for r in train),
                                fingerprint(side, len(train), train[0], train[-1]), self.bpe_vocab_size, cache)[0]
                     for side in ("src", "tgt"))

    def build(self) -> None:
        for split in self.read_splits(SPLITS):
            rows = list(IWSLT15_ENVI.read(split, self.dir))
            self.examples[split] = rows if self.limit(split) is None else rows[: self.limit(split)]
        if self.restored is None:  # else the trained model's tokenizers (restore_encoders)
            self.src_tokenizer, self.tgt_tokenizer = self._tokenizers(self.examples["train"])
        for split, rows in self.examples.items():
            pairs = self.encode_split(split, rows)
            if split == "train" and self.max_len:
                kept = [p for p in pairs.pairs if max(len(p[0]), len(p[1])) <= self.max_len]
                self.stats["train_dropped_too_long"] = len(pairs) - len(kept)
                pairs.pairs = kept
            self.splits[split] = pairs
        self.stats.update(src_vocab=self.src_tokenizer.vocab_size, tgt_vocab=self.tgt_tokenizer.vocab_size,
                          tokenizer=self.tokenizer, shared_vocab=self.src_tokenizer is self.tgt_tokenizer)
        if "train" in self.splits:  # an evaluation with the trained model's tokenizers reads no training file
            self._check_unknown_share()

    def _check_unknown_share(self) -> None:
        """The share of training tokens each vocabulary does not know (``train_unk_src`` / ``_tgt`` in the stats):
        a few percent with the release's own; over :data:`UNK_WARNING` means swapped or foreign vocabularies, which
        trained to a model of <unk>s without a word."""
        pairs = self.splits["train"].pairs
        for side, lang, index in (("src", IWSLT15_ENVI.src_lang, 0), ("tgt", IWSLT15_ENVI.tgt_lang, 1)):
            tokens = sum(len(p[index]) for p in pairs)
            share = sum(t == UNK_ID for p in pairs for t in p[index]) / tokens if tokens else 0.0
            self.stats[f"train_unk_{side}"] = round(share, 4)
            if share > UNK_WARNING:
                where = (f"{Path(self.dir) / IWSLT15_ENVI.vocab_prefix}.{lang}" if self.tokenizer == "word"
                         else "the BPE vocabulary")
                self.warn(f"{share:.0%} of the training {side} tokens ({lang}) are unknown to {where}: the "
                          "vocabularies may be swapped or of another corpus (the release's own leave a few percent)")
