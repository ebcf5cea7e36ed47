"""Sequence-to-sequence data modules: (source text, target text) -> token ids -> padded teacher-forcing batches.

Batches: ``src_ids`` (B, S), ``src_mask`` (B, S) True = real token, ``tgt_in`` (B, T) = BOS + target,
``tgt_out`` (B, T) = target + EOS, ``tgt_mask`` (B, T), ``index`` (B,) the example's position in its split.
Special ids are shared by every tokenizer (:mod:`coda_exp.data.common.vocab`): pad 0, bos 1, eos 2, unk 3.

Evaluation is the task's (:mod:`coda_exp.tasks.seq2seq_eval`): a data module only says which evaluations its
benchmark reports (``evaluations``: ``bleu``, ``execution``) and hands over the raw examples they score against
(``targets(split)``: one dict per example with the raw target text ``tgt`` and, for AlgoLisp, its ``tests``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from coda_exp.data.common.base import DataModule
from coda_exp.data.common.splits import SPLITS
from coda_exp.data.common.tokenization import CharTokenizer
from coda_exp.data.common.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID


def pad_batch(seqs: Sequence[Sequence[int]]) -> torch.Tensor:
    """(B, longest) long tensor, right-padded with PAD (one tensor construction: fast for many short rows)."""
    width = max(1, max(len(s) for s in seqs))
    return torch.tensor([[*s, *([PAD_ID] * (width - len(s)))] for s in seqs], dtype=torch.long)


def collate_seq2seq(rows: list[dict]) -> dict[str, torch.Tensor]:
    """rows of ``{"src": ids, "tgt": ids, "index": int}`` -> a padded teacher-forcing batch."""
    src = pad_batch([r["src"] for r in rows])
    tgt_in = pad_batch([[BOS_ID, *r["tgt"]] for r in rows])
    tgt_out = pad_batch([[*r["tgt"], EOS_ID] for r in rows])
    return {"src_ids": src, "src_mask": src != PAD_ID, "tgt_in": tgt_in, "tgt_out": tgt_out,
            "tgt_mask": tgt_out != PAD_ID, "index": torch.tensor([r["index"] for r in rows], dtype=torch.long)}


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


class Seq2SeqDataModule(DataModule):
    """Base of the sequence families: ``build()`` fills ``self.splits`` (EncodedPairs or IterableDataset),
    ``self.src_tokenizer`` and ``self.tgt_tokenizer``, and, where the benchmark has raw targets to score against,
    ``self.examples`` (split -> one dict per example, ``tgt`` its raw target text). ``evaluations`` names what the
    task computes from them besides exact-match accuracy. ``max_tokens`` (map-style splits) switches *training*
    batches to token-based batching (T2T's ``batch_size`` in tokens); evaluation batches hold ``eval_batch_size``.
    """

    collate = staticmethod(collate_seq2seq)
    evaluations: tuple[str, ...] = ()

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.src_tokenizer = None
        self.tgt_tokenizer = None
        self.examples: dict[str, list[dict]] = {}

    def model_kwargs(self) -> dict:
        return {"src_vocab_size": self.src_tokenizer.vocab_size, "tgt_vocab_size": self.tgt_tokenizer.vocab_size,
                "pad_id": PAD_ID, "bos_id": BOS_ID, "eos_id": EOS_ID}

    def task_kwargs(self) -> dict:
        """Special ids, the target decoder, the raw examples (``targets``; None when there are none), the
        evaluations of the benchmark, and ``run_info`` (this module's ``stats``: evaluations record their
        settings there, e.g. the sacreBLEU signature, so that they reach the run record)."""
        return {"pad_id": PAD_ID, "bos_id": BOS_ID, "eos_id": EOS_ID, "unk_id": UNK_ID,
                "decode_text": self.tgt_tokenizer.decode, "targets": self.targets if self.examples else None,
                "evaluations": list(self.evaluations), "run_info": self.stats}

    def targets(self, split: str) -> list[dict]:
        """The raw examples of ``split`` in index order (``tgt``: the target text as in the data files)."""
        return self.examples[split]

    def encode_split(self, split: str, rows: list[dict]) -> EncodedPairs:
        return EncodedPairs([(self.src_tokenizer.encode(r["src"]), self.tgt_tokenizer.encode(r["tgt"]))
                             for r in rows])

    def split_loader(self, split: str) -> DataLoader:
        ds = self.splits[split]
        lengths = ds.lengths() if split == "train" and isinstance(ds, EncodedPairs) else None
        return self.loader(ds, train=split == "train", lengths=lengths)


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

    def __init__(self, num_train: int, num_validation: int, num_test: int, data_seed: int = 1234, **kwargs):
        super().__init__(**kwargs)
        sizes = {"train": num_train, "validation": num_validation, "test": num_test}
        self.sizes = {k: n if self.limit(k) is None else min(n, self.limit(k)) for k, n in sizes.items()}
        self.data_seed = data_seed

    def build(self) -> None:
        from coda_exp.data.seq2seq.mlu import MLU, MLU_CHARS, MLUStream

        self.src_tokenizer = self.tgt_tokenizer = tok = CharTokenizer(MLU_CHARS)
        for split in SPLITS:
            n = self.sizes[split]
            if self.dir is not None:
                rows = [r for r, _ in zip(MLU.read(split, Path(self.dir)), range(n))]
                self.splits[split] = self.encode_split(split, rows)
            else:
                self.splits[split] = _EncodedStream(MLUStream(split, num_examples=n, seed=self.data_seed), tok)
                self.stats[f"{split}_examples"] = n
        self.stats["data_seed"] = self.data_seed
        self.stats["source"] = self.dir or "generated"
