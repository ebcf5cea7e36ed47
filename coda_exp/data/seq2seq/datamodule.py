"""Sequence-to-sequence data modules: (source text, target text) -> token ids -> padded teacher-forcing batches.

Batches: ``src_ids`` (B, S), ``src_mask`` (B, S) True = real token, ``tgt_in`` (B, T) = BOS + target,
``tgt_out`` (B, T) = target + EOS, ``tgt_mask`` (B, T), ``index`` (B,) the example's position in its split.
Special ids are shared by every tokenizer: pad 0, bos 1, eos 2, unk 3.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from coda_exp.data.common.batching import EpochShuffleSampler, TokenBatchSampler

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPLITS = ("train", "validation", "test")


def pad_batch(seqs: Sequence[Sequence[int]]) -> torch.Tensor:
    """(B, longest) long tensor, right-padded with PAD (one tensor construction: fast for many short rows)."""
    width = max(1, max(len(s) for s in seqs))
    return torch.tensor([[*s, *([PAD] * (width - len(s)))] for s in seqs], dtype=torch.long)


def collate_seq2seq(rows: list[dict]) -> dict[str, torch.Tensor]:
    """rows of ``{"src": ids, "tgt": ids, "index": int}`` -> a padded teacher-forcing batch."""
    src = pad_batch([r["src"] for r in rows])
    tgt_in = pad_batch([[BOS, *r["tgt"]] for r in rows])
    tgt_out = pad_batch([[*r["tgt"], EOS] for r in rows])
    return {"src_ids": src, "src_mask": src != PAD, "tgt_in": tgt_in, "tgt_out": tgt_out,
            "tgt_mask": tgt_out != PAD, "index": torch.tensor([r["index"] for r in rows], dtype=torch.long)}


class EncodedPairs(Dataset):
    """A map-style split of already-encoded ``(src ids, tgt ids)`` pairs."""

    def __init__(self, pairs: list[tuple[list[int], list[int]]]):
        self.pairs = pairs

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> dict:
        src, tgt = self.pairs[i]
        return {"src": src, "tgt": tgt, "index": i}

    def lengths(self) -> list[int]:
        return [max(len(s), len(t) + 1) for s, t in self.pairs]


class Seq2SeqDataModule(pl.LightningDataModule, ABC):
    """Base class: subclasses fill ``self.splits`` (train/validation/test -> EncodedPairs or IterableDataset),
    ``self.src_tokenizer`` and ``self.tgt_tokenizer`` in ``build()``, and may override ``evaluate``.

    ``cache_dir`` holds trained tokenizers. ``batch_size`` counts sequences; ``max_tokens`` (when set, for map-style splits) switches training batches to
    token-based batching bucketed by length (T2T's ``batch_size`` in tokens).
    """

    def __init__(self, batch_size: int = 64, eval_batch_size: int | None = None, max_tokens: int | None = None,
                 num_workers: int = 0, seed: int = 0, cache_dir: str = "cache"):
        super().__init__()
        self.cache_dir = Path(cache_dir)
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.max_tokens = max_tokens
        self.num_workers, self.seed = num_workers, seed
        self.splits: dict[str, Dataset] = {}
        self.src_tokenizer = None
        self.tgt_tokenizer = None
        self.stats: dict = {}
        self.warnings: list[str] = []

    @abstractmethod
    def build(self) -> None:
        """Read/generate the data and fill ``splits``, ``src_tokenizer`` and ``tgt_tokenizer``."""

    def setup(self, stage: str | None = None) -> None:
        if not self.splits:
            self.build()
            for name, ds in self.splits.items():
                if not isinstance(ds, IterableDataset):
                    self.stats[f"{name}_examples"] = len(ds)

    def model_kwargs(self) -> dict:
        return {"src_vocab_size": self.src_tokenizer.vocab_size, "tgt_vocab_size": self.tgt_tokenizer.vocab_size,
                "pad_id": PAD, "bos_id": BOS, "eos_id": EOS}

    def task_kwargs(self) -> dict:
        return {"pad_id": PAD, "bos_id": BOS, "eos_id": EOS, "unk_id": UNK,
                "decode_text": self.tgt_tokenizer.decode, "evaluator": self.evaluate,
                "reference_text": self.reference_text}

    def evaluate(self, split: str, indices: list[int], hypotheses: list[str]) -> dict[str, float | list]:
        """Extra metrics of decoded hypotheses (BLEU, execution accuracy...); none by default. A list value (one
        entry per hypothesis) is a per-example outcome, saved with the test predictions."""
        return {}

    def reference_text(self, split: str, index: int) -> str | None:
        """The raw target text of example ``index`` of ``split`` (as in the data files), or None when this data
        module keeps none (then the task decodes the reference ids, where unknown words read ``<unk>``)."""
        return None

    def _loader(self, split: str, train: bool) -> DataLoader:
        ds = self.splits[split]
        common = {"collate_fn": collate_seq2seq, "num_workers": self.num_workers,
                  "persistent_workers": self.num_workers > 0}
        if isinstance(ds, IterableDataset):
            return DataLoader(ds, batch_size=self.batch_size if train else self.eval_batch_size, **common)
        if train and self.max_tokens:
            sampler = TokenBatchSampler(ds.lengths(), max_tokens=self.max_tokens, shuffle=True, seed=self.seed)
            return DataLoader(ds, batch_sampler=sampler, **common)
        gen = torch.Generator().manual_seed(self.seed)
        return DataLoader(ds, batch_size=self.batch_size if train else self.eval_batch_size,
                          sampler=EpochShuffleSampler(len(ds), self.seed) if train else None, generator=gen, **common)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("validation", train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", train=False)


class _EncodedStream(IterableDataset):
    """Encodes a stream of ``{"src", "tgt", "index"}`` strings with a tokenizer; a new epoch order per pass."""

    def __init__(self, stream, tokenizer):
        self.stream, self.tokenizer = stream, tokenizer
        self._passes = 0

    def __len__(self) -> int:
        return len(self.stream)

    def __iter__(self):
        if hasattr(self.stream, "set_epoch"):
            self.stream.set_epoch(self._passes)
        self._passes += 1
        enc = self.tokenizer.encode
        for ex in self.stream:
            yield {"src": enc(ex["src"]), "tgt": enc(ex["tgt"]), "index": ex["index"]}


class MLUDataModule(Seq2SeqDataModule):
    """Mathematical Language Understanding (CoDA Table 6), generated on the fly by :mod:`coda_exp.data.seq2seq.mlu`.

    Character level, one shared vocabulary. ``data_seed`` fixes the dataset (the same for every training seed,
    so seeds vary only the model's initialisation and batch order); the train/validation/test split is a
    function of each example, so they never overlap. Paper size: 12M pairs, 1/11 held out.
    With ``dir`` set, the examples are read from ``train.txt``/``dev.txt``/``test.txt`` (``input:target`` lines,
    as ``scripts/make_mlu.py`` writes them) instead. ``max_train_examples``/``max_eval_examples`` cap the sizes.
    """

    def __init__(self, num_train: int, num_validation: int, num_test: int, data_seed: int = 1234,
                 dir: str | None = None, max_train_examples: int | None = None,
                 max_eval_examples: int | None = None, **kwargs):
        super().__init__(**kwargs)
        cap = {"train": max_train_examples, "validation": max_eval_examples, "test": max_eval_examples}
        sizes = {"train": num_train, "validation": num_validation, "test": num_test}
        self.sizes = {k: min(n, cap[k]) if cap[k] is not None else n for k, n in sizes.items()}
        self.data_seed, self.dir = data_seed, dir

    def build(self) -> None:
        from coda_exp.data.seq2seq.mlu import MLU_FILES, CharTokenizer, MLUStream, read_mlu_file

        self.src_tokenizer = self.tgt_tokenizer = tok = CharTokenizer()
        for split, n in self.sizes.items():
            if self.dir is not None:
                rows = read_mlu_file(Path(self.dir) / MLU_FILES[split])
                self.splits[split] = EncodedPairs([(tok.encode(r["src"]), tok.encode(r["tgt"]))
                                                   for r, _ in zip(rows, range(n))])
            else:
                self.splits[split] = _EncodedStream(MLUStream(split, num_examples=n, seed=self.data_seed), tok)
                self.stats[f"{split}_examples"] = n
        self.stats["data_seed"] = self.data_seed
        self.stats["source"] = self.dir or "generated"
