"""LightningDataModule for text-pair tasks (classification and ranking): files/hub -> examples -> ids -> batches."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import datasets
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from coda_exp.data.embeddings import load_pretrained
from coda_exp.data.errors import DataError
from coda_exp.data.readers import SPLITS, Reader, get_reader
from coda_exp.data.vocab import Vocab, tokenize

log = logging.getLogger(__name__)


def _file_key(path: Path) -> str:
    st = path.stat()
    return f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"


def _fingerprint(*parts: object) -> str:
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _examples(reader: Reader, path: str | None, split: str):  # generator for datasets.Dataset.from_generator
    yield from (reader.read_local(Path(path)) if path else reader.read_hub(split))


def _collate(rows: list[dict]) -> dict[str, torch.Tensor]:
    """Pad ``a_ids``/``b_ids`` to the longest in the batch; masks are True on real tokens."""
    out: dict[str, torch.Tensor] = {}
    for side in ("a", "b"):
        seqs = [r[f"{side}_ids"] for r in rows]
        width = max(1, max(len(s) for s in seqs))
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
        out[f"{side}_ids"] = ids
        out[f"{side}_mask"] = ids != 0
    out["label"] = torch.tensor([r["label"] for r in rows], dtype=torch.long)
    out["group"] = torch.tensor([r["group_idx"] for r in rows], dtype=torch.long)
    out["index"] = torch.tensor([r["index"] for r in rows], dtype=torch.long)
    return out


class PairDataModule(pl.LightningDataModule):
    """Reads a pair benchmark (``dataset``: snli, wikiqa, ...) from ``dir`` (official files) or the hub.

    ``dir=None`` loads ``hub_id`` with the ``datasets`` library. The vocabulary is built on the training split
    (``min_freq``, ``max_vocab``) and cached under ``cache_dir``; ``embeddings.path`` optionally loads GloVe /
    word2vec text vectors for it. Ranking tasks (``ranking=True``) keep, for validation and test, only the
    groups (questions) with at least one positive candidate when ``eval_only_answered`` is set (the standard
    WikiQA protocol).
    """

    def __init__(self, dataset: str, dir: str | None = None, cache_dir: str = "cache", batch_size: int = 64,
                 eval_batch_size: int | None = None, max_len_a: int | None = None, max_len_b: int | None = None,
                 lowercase: bool = True, min_freq: int = 1, max_vocab: int | None = None,
                 embeddings: dict | None = None, ranking: bool = False, eval_only_answered: bool = True,
                 max_train_examples: int | None = None, max_eval_examples: int | None = None,
                 num_workers: int = 0, seed: int = 0):
        super().__init__()
        self.reader = get_reader(dataset)
        self.dir = dir
        self.cache_dir = Path(cache_dir)
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.max_len = {"a": max_len_a, "b": max_len_b}
        self.lowercase = lowercase
        self.min_freq, self.max_vocab = min_freq, max_vocab
        self.embeddings_cfg = dict(embeddings or {})
        self.ranking, self.eval_only_answered = ranking, eval_only_answered
        self.max_examples = {"train": max_train_examples, "validation": max_eval_examples,
                             "test": max_eval_examples}
        self.num_workers, self.seed = num_workers, seed
        self.splits: dict[str, datasets.Dataset] = {}
        self.vocab: Vocab | None = None
        self.embedding_matrix: torch.Tensor | None = None
        self.stats: dict[str, int] = {}
        self.warnings: list[str] = []

    @property
    def num_classes(self) -> int:
        return len(self.reader.label_names)

    @property
    def label_names(self) -> tuple[str, ...]:
        return self.reader.label_names

    def model_kwargs(self) -> dict:
        """Constructor arguments of the network that come from the data (call after ``setup``)."""
        return {"vocab_size": len(self.vocab), "num_classes": self.num_classes, "embeddings": self.embedding_matrix}

    def task_kwargs(self) -> dict:
        """Constructor arguments of the task module that come from the data."""
        return {"num_classes": self.num_classes}

    # -- loading ------------------------------------------------------------------------------------------
    def _raw_split(self, split: str) -> datasets.Dataset:
        if self.dir is not None:
            path = self.reader.path(self.dir, split)
            key = _file_key(path)
            src = str(path)
        else:
            src, key = None, f"hub:{self.reader.hub_id}:{split}"
        fp = _fingerprint("raw-v1", self.reader.name, key)
        try:
            ds = datasets.Dataset.from_generator(
                _examples, gen_kwargs={"reader": self.reader, "path": src, "split": split},
                cache_dir=str(self.cache_dir / "datasets"), fingerprint=fp,
                features=datasets.Features({"text_a": datasets.Value("string"), "text_b": datasets.Value("string"),
                                            "label": datasets.Value("int64"), "group": datasets.Value("string")}),
            )
        except DataError:
            raise
        except Exception as e:  # datasets wraps generator errors; surface ours, explain hub failures
            cause = e
            while cause is not None and not isinstance(cause, DataError):
                cause = cause.__cause__ or cause.__context__
            if isinstance(cause, DataError):
                raise cause from None
            if self.dir is None:
                raise DataError(
                    f"{self.reader.name}: no data.dir was given and the hub dataset {self.reader.hub_id!r} could "
                    f"not be loaded ({type(e).__name__}: {e}). Download the official files "
                    f"{', '.join(self.reader.expected_files())} and pass data.dir=DIR. {self.reader.source_hint}"
                ) from e
            raise
        if len(ds) == 0:
            raise DataError(f"{self.reader.name}: split {split!r} ({src or self.reader.hub_id}) has no examples")
        return ds

    def _prepare_split(self, split: str, ds: datasets.Dataset) -> datasets.Dataset:
        limit = self.max_examples[split]
        if self.ranking and split != "train" and self.eval_only_answered:
            answered = {g for g, y in zip(ds["group"], ds["label"]) if y == 1}
            before = len(set(ds["group"]))
            ds = ds.filter(lambda g: g in answered, input_columns="group")
            self.stats[f"{split}_groups_dropped_no_positive"] = before - len(answered)
            if len(ds) == 0:
                raise DataError(f"{self.reader.name}: split {split!r} has no question with a correct answer")
        if limit is not None and len(ds) > limit:
            if self.ranking:  # keep whole groups (first groups up to ~limit pairs) so MAP/MRR stay meaningful
                keep, groups = [], set()
                for i, g in enumerate(ds["group"]):
                    if g not in groups and len(keep) >= limit:
                        break
                    groups.add(g)
                    keep.append(i)
                ds = ds.select(keep)
            else:
                ds = ds.shuffle(seed=self.seed).select(range(limit))
        groups = {g: i for i, g in enumerate(dict.fromkeys(ds["group"]))}
        ds = ds.map(lambda g, idx: {"group_idx": groups[g], "index": idx}, input_columns="group",
                    with_indices=True)
        return ds

    def _encode(self, ds: datasets.Dataset) -> datasets.Dataset:
        vocab, lower, ml = self.vocab, self.lowercase, self.max_len

        def enc(batch):
            out = {}
            for side in ("a", "b"):
                toks = [tokenize(t, lower) for t in batch[f"text_{side}"]]
                out[f"{side}_ids"] = [vocab.encode(t[: ml[side]] if ml[side] else t) for t in toks]
            return out

        return ds.map(enc, batched=True, desc="tokenising")

    def _build_vocab(self, train: datasets.Dataset) -> Vocab:
        fp = _fingerprint("vocab-v1", train._fingerprint, self.lowercase, self.min_freq, self.max_vocab)
        path = self.cache_dir / self.reader.name / f"vocab-{fp}.json"
        if path.is_file():
            return Vocab.load(path)
        texts = (tokenize(t, self.lowercase) for col in ("text_a", "text_b") for t in train[col])
        vocab = Vocab.build(texts, min_freq=self.min_freq, max_size=self.max_vocab)
        vocab.save(path)
        return vocab

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        raw = {s: self._prepare_split(s, self._raw_split(s)) for s in SPLITS}
        self.vocab = self._build_vocab(raw["train"])
        self.splits = {s: self._encode(d) for s, d in raw.items()}
        for s, d in self.splits.items():
            self.stats[f"{s}_examples"] = len(d)
        self.stats["vocab_size"] = len(self.vocab)
        path = self.embeddings_cfg.get("path")
        if path:
            self.embedding_matrix, found = load_pretrained(path, self.vocab, lowercase=self.lowercase,
                                                           seed=self.seed)
            self.stats["embeddings_found"] = found
        else:
            msg = ("no pretrained embeddings (data.embeddings.path is null): word vectors are randomly initialised "
                   "and trained, so numbers will not match the paper's")
            log.warning(msg)
            self.warnings.append(msg)
        log.info("%s: %s", self.reader.name, self.stats)

    # -- loaders ------------------------------------------------------------------------------------------
    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        ds = self.splits[split].select_columns(["a_ids", "b_ids", "label", "group_idx", "index"])
        gen = torch.Generator().manual_seed(self.seed)
        return DataLoader(ds, batch_size=self.batch_size if shuffle else self.eval_batch_size, shuffle=shuffle,
                          collate_fn=_collate, num_workers=self.num_workers, generator=gen,
                          persistent_workers=self.num_workers > 0)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("validation", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)

    def split_groups(self, split: str) -> list[str]:
        """Group (query) ids of a split, in ``group_idx`` order, for writing predictions."""
        return list(dict.fromkeys(self.splits[split]["group"]))

