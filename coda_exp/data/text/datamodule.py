"""LightningDataModule for single-text classification (IMDb, SST-2, SST-5, Yelp): files/hub -> BPE or word ids ->
batches."""

from __future__ import annotations

import logging
from pathlib import Path

import datasets
import torch
from torch.utils.data import DataLoader

from coda_exp.data.common.base import LabelledDataModule, cached_split, fingerprint
from coda_exp.data.common.embeddings import load_pretrained
from coda_exp.data.common.encoders import (
    check_state,
    new_state,
    placeholder_table,
    state_key,
    table_shape,
    tokenizer_from_state,
    tokenizer_state,
)
from coda_exp.data.common.errors import DataError
from coda_exp.data.common.splits import SPLITS
from coda_exp.data.common.tokenization import BPETokenizer, cached_bpe
from coda_exp.data.common.vocab import EOS_ID, PAD_ID, Vocab, tokenize
from coda_exp.data.text.readers import ImdbReader, get_text_reader

log = logging.getLogger(__name__)
TOKENIZERS = ("bpe", "word")

FEATURES = datasets.Features({"text": datasets.Value("string"), "label": datasets.Value("int64"),
                              "index": datasets.Value("int64")})


def collate_text(rows: list[dict]) -> dict[str, torch.Tensor]:
    """``ids`` (B, L) padded with 0 to the longest row, ``mask`` (B, L) True on real tokens, ``label``/``index`` (B,);
    ``length`` (B,): each text's tokens before truncation, where the rows carry ``full_length`` (AttConv Figure 5)."""
    width = max(1, max(len(r["ids"]) for r in rows))
    ids = torch.full((len(rows), width), PAD_ID, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, r in enumerate(rows):
        n = len(r["ids"])
        ids[i, :n] = torch.as_tensor(r["ids"], dtype=torch.long)
        mask[i, :n] = True
    batch = {"ids": ids, "mask": mask, "label": torch.tensor([r["label"] for r in rows], dtype=torch.long),
             "index": torch.tensor([r["index"] for r in rows], dtype=torch.long)}
    if rows and "full_length" in rows[0]:
        batch["length"] = torch.tensor([r["full_length"] for r in rows], dtype=torch.long)
    return batch


class TextClassificationDataModule(LabelledDataModule):
    """Reads ``dataset`` (imdb, sst2, sst5, yelp) from ``dir`` (official files) or, with ``dir=None``, the hub.

    ``tokenizer="bpe"`` (CoDA Table 5): a BPE vocabulary of ``bpe_vocab_size`` is learnt on the training split
    actually used (after ``max_train_examples``) and cached under ``cache_dir/<dataset>/``; texts are encoded
    without lower-casing. ``tokenizer="word"`` (AttConv): texts are split into words and punctuation marks by
    :func:`~coda_exp.data.common.vocab.tokenize` (lower-cased when ``lowercase``); the project's
    :class:`~coda_exp.data.common.vocab.Vocab` is built on the training split (``min_freq``, ``max_vocab``) and
    cached there too; ``embeddings.path`` loads GloVe / word2vec text vectors for it
    (:func:`~coda_exp.data.common.embeddings.load_pretrained`; words missing from the file get random vectors),
    given to the model as ``model_kwargs()["embeddings"]`` (None without a file; whether the model fine-tunes them
    is the model's choice), and with ``embeddings.extend_vocab`` the validation/test words the file covers join
    the vocabulary. Either way texts are truncated to their first ``max_len`` tokens (the last one is ``eos`` when ``append_eos``, Tensor2Tensor's convention for
    class-label problems). Batches hold ``batch_size`` examples, or, when ``max_tokens`` is set, as many as fit in
    ``max_tokens`` padded tokens (:class:`~coda_exp.data.common.batching.TokenBatchSampler`, also for evaluation).
    ``min_words`` > 0 drops, from every split, texts of fewer whitespace-separated words (Yin & Schütze's Yelp
    loader: 4), counted in ``stats`` (``<split>_dropped_short``) and recorded as a warning.
    ``index`` is the example's position in its split as the reader yields it (kept through subsetting), so test
    predictions map back to the files; a split capped by ``max_*_examples`` is a random subset drawn with the
    fixed ``subset_seed`` (the same examples for every run seed). ``val_fraction`` is IMDb's held-out share of ``train`` (0: validate on
    the test set, as Tensor2Tensor did); it is ignored for SST, whose files have a dev split.
    """
    FAMILIES = ("text_classification",)

    def __init__(self, dataset: str, dir: str | None = None, cache_dir: str = "cache", tokenizer: str = "bpe",
                 bpe_vocab_size: int = 8192, bpe_min_frequency: int = 2, max_len: int = 512,
                 append_eos: bool = True, batch_size: int = 64, eval_batch_size: int | None = 256,
                 max_tokens: int | None = None, bucket_width: int = 8, val_fraction: float = 0.1,
                 max_train_examples: int | None = None, max_eval_examples: int | None = None,
                 num_workers: int = 0, seed: int = 0, subset_seed: int = 0, lowercase: bool = True,
                 min_freq: int = 1, max_vocab: int | None = None, embeddings: dict | None = None,
                 min_words: int = 0):
        super().__init__(dir=dir, cache_dir=cache_dir, batch_size=batch_size, eval_batch_size=eval_batch_size,
                         max_tokens=max_tokens, bucket_width=bucket_width, max_train_examples=max_train_examples,
                         max_eval_examples=max_eval_examples, num_workers=num_workers, seed=seed)
        if tokenizer not in TOKENIZERS:
            raise DataError(f"unknown tokenizer {tokenizer!r} for text classification; available: {list(TOKENIZERS)}")
        if max_len < 1 or (append_eos and max_len < 2):
            raise DataError(f"max_len={max_len} leaves no room for text")
        if max_tokens is not None and max_tokens < max_len:
            raise DataError(f"max_tokens={max_tokens} is below max_len={max_len}: a full-length example would not "
                            "fit in any batch")
        options = {"val_fraction": val_fraction} if isinstance(get_text_reader(dataset), ImdbReader) else {}
        self.reader = get_text_reader(dataset, **options)
        self.tokenizer_name, self.bpe_vocab_size, self.bpe_min_frequency = tokenizer, bpe_vocab_size, bpe_min_frequency
        self.max_len, self.append_eos = max_len, append_eos
        self.subset_seed = subset_seed
        self.lowercase, self.min_freq, self.max_vocab, self.min_words = lowercase, min_freq, max_vocab, min_words
        self.embeddings_cfg = dict(embeddings or {})
        self.tokenizer: BPETokenizer | Vocab | None = None
        self.tokenizer_path: Path | None = None  # the cached BPE file or word vocabulary (its name is the data key)
        self.encoding_key = ""  # what the encoded datasets' cache depends on besides the raw data
        self.embedding_matrix = None  # (vocab, dim) pretrained vectors with tokenizer="word" and embeddings.path

    def model_kwargs(self) -> dict:
        """Constructor arguments of the network that come from the data (call after ``setup``)."""
        kwargs = {"vocab_size": self.tokenizer.vocab_size, "num_classes": self.num_classes, "pad_id": PAD_ID}
        if self.tokenizer_name == "word":
            kwargs["embeddings"] = self.embedding_matrix
        return kwargs

    def task_kwargs(self) -> dict:
        return {"num_classes": self.num_classes}

    # -- loading ------------------------------------------------------------------------------------------
    collate = staticmethod(collate_text)

    def _raw_split(self, split: str) -> datasets.Dataset:
        ds = cached_split(self.reader, split, self.dir, self.cache_dir, FEATURES, "text-raw-v2")
        if self.min_words > 0:
            n, least = len(ds), self.min_words
            ds = ds.filter(lambda t: len(t.split()) >= least, input_columns="text", desc=f"short texts ({split})",
                           new_fingerprint=fingerprint("text-min-words-v1", ds._fingerprint, least))
            self.stats[f"{split}_dropped_short"] = n - len(ds)
            if len(ds) == 0:
                raise DataError(f"{self.reader.name}: no {split} text has {least} words or more (data.min_words)")
        limit = self.limit(split)
        if limit is not None and len(ds) > limit:
            ds = ds.shuffle(seed=self.subset_seed).select(range(limit))
        return ds

    def _build_tokenizer(self, train: datasets.Dataset) -> BPETokenizer:
        tok, path = cached_bpe(lambda: iter(train["text"]), fingerprint=train._fingerprint,
                               vocab_size=self.bpe_vocab_size, cache_dir=self.cache_dir / self.reader.name,
                               min_frequency=self.bpe_min_frequency)
        self.tokenizer_path, self.encoding_key = path, path.name
        return tok

    def _build_vocab(self, raw: dict[str, datasets.Dataset]) -> Vocab:
        """The word vocabulary of the training texts (cached), grown by the evaluation words that the pretrained
        vectors cover when ``embeddings.extend_vocab``; sets ``embedding_matrix`` when ``embeddings.path``."""
        lower, train = self.lowercase, raw["train"]
        key = fingerprint("text-vocab-v1", train._fingerprint, lower, self.min_freq, self.max_vocab)
        self.tokenizer_path = self.cache_dir / self.reader.name / f"vocab-{key}.json"
        vocab = Vocab.cached(self.tokenizer_path, lambda: Vocab.build((tokenize(t, lower) for t in train["text"]),
                                                                       self.min_freq, self.max_vocab))
        path = self.embeddings_cfg.get("path")
        if not path:
            self.warn_untrained_vectors(
                "no pretrained embeddings (data.embeddings.path is null): word vectors are randomly initialised "
                "and trained, so numbers will not match the paper's")
        else:
            extra = None
            if self.embeddings_cfg.get("extend_vocab", True):
                words = {w for s, d in raw.items() if s != "train" for t in d["text"] for w in tokenize(t, lower)}
                extra = words - set(vocab.stoi)
            size = len(vocab)
            self.embedding_matrix, found = load_pretrained(path, vocab, lowercase=lower, seed=self.seed,
                                                           extra_words=extra)
            self.stats["embeddings_found"], self.stats["vocab_added_from_embeddings"] = found, len(vocab) - size
        self.encoding_key = f"{self.tokenizer_path.name}:{lower}:{sorted(self.embeddings_cfg.items())}:{len(vocab)}"
        return vocab

    def _ids(self, texts: list[str]) -> list[list[int]]:
        if isinstance(self.tokenizer, Vocab):
            return [self.tokenizer.lookup(tokenize(t, self.lowercase)) for t in texts]
        return self.tokenizer.encode_batch(texts)

    def _truncated(self, texts: list[str]) -> dict[str, list]:
        """``ids`` (the first ``max_len`` tokens, the last one ``eos`` when ``append_eos``), their ``length`` and
        ``full_length`` (the tokens before truncation) of each text."""
        keep = self.max_len - 1 if self.append_eos else self.max_len
        ids = self._ids(texts)
        out = [x[:keep] + [EOS_ID] if self.append_eos else x[:keep] for x in ids]
        return {"ids": out, "length": [len(x) for x in out], "full_length": [len(x) for x in ids]}

    def _encode(self, ds: datasets.Dataset, split: str) -> datasets.Dataset:
        max_len, eos = self.max_len, self.append_eos
        keep = max_len - 1 if eos else max_len

        def enc(batch):
            return self._truncated(batch["text"])

        fp = fingerprint("text-enc-v1", ds._fingerprint, self.encoding_key, max_len, eos)
        ds = ds.map(enc, batched=True, desc=f"tokenising {split}", new_fingerprint=fp)
        full = ds["full_length"]
        self.stats[f"{split}_truncated"] = sum(n > keep for n in full)
        self.stats[f"{split}_mean_tokens"] = round(sum(full) / len(full), 2)
        return ds

    def build(self) -> None:
        self.stats["dataset"] = self.reader.name  # sst2 / sst5 share task `sst`: tables tell them apart by this
        raw = {s: self._raw_split(s) for s in self.read_splits(SPLITS)}
        words = self.tokenizer_name == "word"
        if self.restored is None:
            self.tokenizer = self._build_vocab(raw) if words else self._build_tokenizer(raw["train"])
        self.splits = {s: self._encode(d, s) for s, d in raw.items()}
        self.stats["vocab_size"] = self.tokenizer.vocab_size
        for note in self.reader.notes(self.dir):
            self.warn(note)
        dropped = {s: self.stats.get(f"{s}_dropped_short", 0) for s in SPLITS}
        if any(dropped.values()):
            self.warn(f"{self.reader.name}: dropped texts of fewer than {self.min_words} words (data.min_words): "
                      + ", ".join(f"{n} from {s}" for s, n in dropped.items()))
        log.info("%s: %s", self.reader.name, self.stats)

    # -- loaders ------------------------------------------------------------------------------------------
    def split_loader(self, split: str) -> DataLoader:
        ds = self.splits[split]
        return self.loader(ds.select_columns(["ids", "label", "index", "full_length"]), train=split == "train",
                           lengths=ds["length"])

    # -- a trained model's tokenizer: eval and predict ---------------------------------------------------------
    INPUT_FIELDS = ("text",)
    INPUT_IDS = ("ids",)  # the encoded inputs' token ids (UNK_ID: a token the model does not know)

    def encoder_state(self) -> dict:
        return new_state("text", tokenizer=tokenizer_state(self.tokenizer), kind=self.tokenizer_name,
                         embeddings=table_shape(self.embedding_matrix))

    def restore_encoders(self, state: dict) -> None:
        self.restored = check_state(state, "text")
        if state["kind"] != self.tokenizer_name:
            raise DataError(f"checkpoint: its tokenizer is {state['kind']!r}, but data.tokenizer is "
                            f"{self.tokenizer_name!r}")
        self.tokenizer = tokenizer_from_state(state["tokenizer"])
        self.encoding_key = f"restored:{state_key(state['tokenizer'])}:{self.lowercase}"
        self.embedding_matrix = placeholder_table(state["embeddings"])

    def encode_inputs(self, rows: list[dict]) -> list[dict]:
        enc = self._truncated([r["text"] for r in rows])
        return [{"ids": ids, "label": 0, "index": i, "full_length": n}
                for i, (ids, n) in enumerate(zip(enc["ids"], enc["full_length"]))]
