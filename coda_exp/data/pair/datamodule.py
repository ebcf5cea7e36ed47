"""LightningDataModule for text-pair tasks (classification and ranking): files/hub -> examples -> ids -> batches."""

from __future__ import annotations

import logging

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
from coda_exp.data.common.vocab import PAD_ID, Vocab, tokenize
from coda_exp.data.pair.readers import get_pair_reader

log = logging.getLogger(__name__)
FEATURES = datasets.Features({"text_a": datasets.Value("string"), "text_b": datasets.Value("string"),
                              "label": datasets.Value("int64"), "group": datasets.Value("string")})


def _collate(rows: list[dict]) -> dict[str, torch.Tensor]:
    """Pad ``a_ids``/``b_ids`` to the longest in the batch; masks are True on real tokens."""
    out: dict[str, torch.Tensor] = {}
    for side in ("a", "b"):
        seqs = [r[f"{side}_ids"] for r in rows]
        width = max(1, max(len(s) for s in seqs))
        ids = torch.full((len(rows), width), PAD_ID, dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
        out[f"{side}_ids"] = ids
        out[f"{side}_mask"] = ids != PAD_ID
    out["label"] = torch.tensor([r["label"] for r in rows], dtype=torch.long)
    out["group"] = torch.tensor([r["group_idx"] for r in rows], dtype=torch.long)
    out["index"] = torch.tensor([r["index"] for r in rows], dtype=torch.long)
    return out


EVAL_PROTOCOLS = ("answered", "clean", "raw")


class PairDataModule(LabelledDataModule):
    """Reads a pair benchmark (``dataset``: snli, wikiqa, ...) from ``dir`` (official files) or the hub.

    ``dir=None`` loads ``hub_id`` with the ``datasets`` library. The vocabulary is built on the training split
    (``min_freq``, ``max_vocab``) and cached under ``cache_dir``; ``embeddings.path`` optionally loads GloVe /
    word2vec text vectors for it, and with ``embeddings.extend_vocab`` (default) adds the validation/test words
    that the vectors cover (frozen vectors need no training; other unseen words stay ``<unk>``).

    Ranking tasks (``ranking=True``): ``eval_protocol`` says which groups (questions) validation and test keep:
    ``answered`` drops groups with no positive candidate (the standard WikiQA protocol), ``clean`` also drops
    groups whose candidates are all positive (TrecQA "clean"), ``raw`` keeps every group (groups with no positive
    are then skipped by MAP/MRR, which are undefined for them). Training keeps every candidate.

    Benchmarks without a validation file (MNLI, whose development sets are its test sets here) take it from
    the training file: ``validation_from_train`` (a fraction) of the training examples, drawn with the fixed
    ``holdout_seed`` (not the run's seed, so every run selects its model on the same examples). Likewise a split
    capped by ``max_train_examples`` / ``max_eval_examples`` is a random subset drawn with the fixed
    ``subset_seed``: runs of different seeds train and are tested on the same examples, so a comparison across
    seeds measures the models, not which subset each seed drew. Several test
    sets (``test_<name>`` splits of the reader) give several test dataloaders, in the reader's order.
    """
    FAMILIES = ("pair_classification", "ranking")

    collate = staticmethod(_collate)

    def __init__(self, dataset: str, dir: str | None = None, cache_dir: str = "cache", batch_size: int = 64,
                 eval_batch_size: int | None = 256, max_len_a: int | None = None, max_len_b: int | None = None,
                 lowercase: bool = True, min_freq: int = 1, max_vocab: int | None = None,
                 embeddings: dict | None = None, ranking: bool = False, eval_protocol: str = "answered",
                 max_train_examples: int | None = None, max_eval_examples: int | None = None,
                 num_workers: int = 0, seed: int = 0, validation_from_train: float | None = None,
                 holdout_seed: int = 0, subset_seed: int = 0):
        super().__init__(dir=dir, cache_dir=cache_dir, batch_size=batch_size, eval_batch_size=eval_batch_size,
                         max_train_examples=max_train_examples, max_eval_examples=max_eval_examples,
                         num_workers=num_workers, seed=seed)
        self.reader = get_pair_reader(dataset)
        self.max_len = {"a": max_len_a, "b": max_len_b}
        self.lowercase = lowercase
        self.min_freq, self.max_vocab = min_freq, max_vocab
        self.embeddings_cfg = dict(embeddings or {})
        self.ranking = ranking
        if eval_protocol not in EVAL_PROTOCOLS:
            raise DataError(f"eval_protocol must be one of {list(EVAL_PROTOCOLS)}, got {eval_protocol!r}")
        self.eval_protocol = eval_protocol
        if validation_from_train is not None and not 0.0 < validation_from_train < 1.0:
            raise DataError(f"validation_from_train must be a fraction in (0, 1), got {validation_from_train!r}")
        if "validation" not in self.reader.splits() and validation_from_train is None:
            raise DataError(f"{self.reader.name} has no validation file; set data.validation_from_train to the "
                            "fraction of the training file to hold out for validation")
        self.validation_from_train, self.holdout_seed = validation_from_train, holdout_seed
        self.subset_seed = subset_seed
        self.test_sets = self.reader.test_splits()
        self.vocab: Vocab | None = None
        self.vocab_key = ""  # the cached vocabulary's key (it names the encoded datasets' cache too)
        self.embedding_matrix: torch.Tensor | None = None

    def model_kwargs(self) -> dict:
        """Constructor arguments of the network that come from the data (call after ``setup``)."""
        return {"vocab_size": len(self.vocab), "num_classes": self.num_classes, "embeddings": self.embedding_matrix}

    def task_kwargs(self) -> dict:
        """Constructor arguments of the task module that come from the data: the number of classes and, when
        there are several test sets, their names (``test_matched`` -> ``matched``: metrics ``test/acc_matched``)."""
        kwargs: dict = {"num_classes": self.num_classes}
        if self.test_sets != ["test"]:
            kwargs["test_sets"] = [s.removeprefix("test_") for s in self.test_sets]
        return kwargs

    # -- loading ------------------------------------------------------------------------------------------
    def _raw_split(self, split: str) -> datasets.Dataset:
        return cached_split(self.reader, split, self.dir, self.cache_dir, FEATURES, "pair-raw-v2")

    def _prepare_split(self, split: str, ds: datasets.Dataset) -> datasets.Dataset:
        limit = self.limit(split)
        if self.ranking and split != "train" and self.eval_protocol != "raw":
            positive, negative = set(), set()
            for g, y in zip(ds["group"], ds["label"]):
                (positive if y == 1 else negative).add(g)
            keep = positive if self.eval_protocol == "answered" else positive & negative
            groups = positive | negative
            ds = ds.filter(lambda g: g in keep, input_columns="group")
            self.stats[f"{split}_groups_dropped_no_positive"] = len(groups - positive)
            if self.eval_protocol == "clean":
                self.stats[f"{split}_groups_dropped_all_positive"] = len(positive - negative)
            if len(ds) == 0:
                raise DataError(f"{self.reader.name}: split {split!r} has no question left under eval_protocol="
                                f"{self.eval_protocol!r} (it needs a correct answer"
                                + (" and a wrong one)" if self.eval_protocol == "clean" else ")"))
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
                ds = ds.shuffle(seed=self.subset_seed).select(range(limit))
        groups = {g: i for i, g in enumerate(dict.fromkeys(ds["group"]))}
        if self.ranking and split != "train":  # what MAP/MRR average over: the questions with a correct answer
            answered = {g for g, y in zip(ds["group"], ds["label"]) if y == 1}
            self.stats[f"{split}_questions"] = len(groups)
            self.stats[f"{split}_questions_scored"] = len(answered)  # the others are skipped by the ranking metrics
        ds = ds.map(lambda g, idx: {"group_idx": groups[g], "index": idx}, input_columns="group",
                    with_indices=True)
        return ds

    def _ids(self, texts: list[str], side: str) -> list[list[int]]:
        """The ids of one side's texts: words (lower-cased when ``lowercase``) capped at ``max_len_<side>``."""
        cap, lookup = self.max_len[side], self.vocab.lookup
        toks = (tokenize(t, self.lowercase) for t in texts)
        return [lookup(t[:cap] if cap else t) for t in toks]

    def _encode(self, ds: datasets.Dataset) -> datasets.Dataset:
        vocab, lower, ml = self.vocab, self.lowercase, self.max_len

        def enc(batch):
            return {f"{side}_ids": self._ids(batch[f"text_{side}"], side) for side in ("a", "b")}

        fp = fingerprint("pair-enc-v2", ds._fingerprint, self.vocab_key, len(vocab), lower, ml)
        return ds.map(enc, batched=True, desc="tokenising", new_fingerprint=fp)

    def _build_vocab(self, train: datasets.Dataset) -> Vocab:
        # v2: special ids pad 0, bos 1, eos 2, unk 3 (v1 had pad 0, unk 1)
        self.vocab_key = fingerprint("vocab-v2", train._fingerprint, self.lowercase, self.min_freq, self.max_vocab)
        path = self.cache_dir / self.reader.name / f"vocab-{self.vocab_key}.json"
        texts = (tokenize(t, self.lowercase) for col in ("text_a", "text_b") for t in train[col])
        return Vocab.cached(path, lambda: Vocab.build(texts, min_freq=self.min_freq, max_size=self.max_vocab))

    def _eval_words(self, raw: dict[str, datasets.Dataset]) -> set[str]:
        """Words of the validation and test texts that the training vocabulary lacks (candidates for pretrained
        vectors: with frozen embeddings they need no training, as in Parikh et al.'s and the CoDA setups)."""
        words: set[str] = set()
        for split, ds in raw.items():
            if split != "train":
                for col in ("text_a", "text_b"):
                    words.update(w for t in ds[col] for w in tokenize(t, self.lowercase))
        return words - set(self.vocab.stoi)

    def _raw_splits(self) -> dict[str, datasets.Dataset]:
        names = ["train", *(["validation"] if self.validation_from_train is None else []), *self.test_sets]
        wanted = self.read_splits(["train", "validation", *self.test_sets])
        held_out = self.validation_from_train is not None and "validation" in wanted  # validation: part of train
        raw = {s: self._raw_split(s) for s in names if s in wanted or (s == "train" and held_out)}
        if held_out:
            if self.ranking:
                raise DataError("validation_from_train is for classification; ranking tasks need whole groups")
            train = raw["train"]
            k = max(1, round(self.validation_from_train * len(train)))
            if k >= len(train):
                raise DataError(f"{self.reader.name}: cannot hold out {k} of {len(train)} training examples")
            perm = train.shuffle(seed=self.holdout_seed)
            raw["validation"], raw["train"] = perm.select(range(k)), perm.select(range(k, len(train)))
            self.stats["validation_held_out_from_train"] = k
        return raw

    def build(self) -> None:
        raw = {s: self._prepare_split(s, d) for s, d in self._raw_splits().items()}
        path = self.embeddings_cfg.get("path")
        if self.restored is not None:  # the trained model's vocabulary: its vectors are in its weights
            path = self.restored["embeddings"] is not None
        else:
            self.vocab = self._build_vocab(raw["train"])
        if path and self.restored is None:  # before encoding: the vocabulary may grow by evaluation words the vectors cover
            extra = self._eval_words(raw) if self.embeddings_cfg.get("extend_vocab", True) else None
            train_size = len(self.vocab)
            self.embedding_matrix, found = load_pretrained(path, self.vocab, lowercase=self.lowercase,
                                                           seed=self.seed, extra_words=extra)
            self.stats["embeddings_found"] = found
            self.stats["vocab_added_from_embeddings"] = len(self.vocab) - train_size
        self.splits = {s: self._encode(d) for s, d in raw.items()}
        self.stats["vocab_size"] = len(self.vocab)
        if not path:
            self.warn_untrained_vectors(
                "no pretrained embeddings (data.embeddings.path is null): word vectors are randomly initialised "
                "and trained, so numbers will not match the paper's")
        log.info("%s: %s", self.reader.name, self.stats)

    # -- loaders ------------------------------------------------------------------------------------------
    def split_loader(self, split: str) -> DataLoader:
        """Ranking evaluation batches hold whole groups (up to ``eval_batch_size`` candidates, a larger group
        alone): the sanity check and ``limit_val_batches`` then cut between groups, never inside one."""
        ds = self.splits[split].select_columns(["a_ids", "b_ids", "label", "group_idx", "index"])
        train = split == "train"
        return self.loader(ds, train=train, groups=ds["group_idx"] if self.ranking and not train else None)

    def test_dataloader(self) -> DataLoader | list[DataLoader]:
        """One loader per test set (a list when there are several; their order is ``task_kwargs()["test_sets"]``)."""
        loaders = [self.split_loader(s) for s in self.test_sets]
        return loaders[0] if len(loaders) == 1 else loaders

    # -- a trained model's vocabulary: eval and predict --------------------------------------------------------
    INPUT_FIELDS = ("text_a", "text_b")  # and, for ranking, an optional "group" (the query the pair belongs to)
    INPUT_IDS = ("a_ids", "b_ids")  # the encoded inputs' token ids (UNK_ID: a token the model does not know)

    def encoder_state(self) -> dict:
        return new_state("pair", vocab=tokenizer_state(self.vocab), embeddings=table_shape(self.embedding_matrix))

    def restore_encoders(self, state: dict) -> None:
        self.restored = check_state(state, "pair")
        self.vocab = tokenizer_from_state(state["vocab"])
        self.vocab_key = state_key(state["vocab"])
        self.embedding_matrix = placeholder_table(state["embeddings"])

    def encode_inputs(self, rows: list[dict]) -> list[dict]:
        groups = {g: i for i, g in enumerate(dict.fromkeys(str(r.get("group", "")) for r in rows))}
        a, b = self._ids([r["text_a"] for r in rows], "a"), self._ids([r["text_b"] for r in rows], "b")
        return [{"a_ids": x, "b_ids": y, "label": 0, "group_idx": groups[str(r.get("group", ""))], "index": i}
                for i, (r, x, y) in enumerate(zip(rows, a, b))]

    def split_groups(self, split: str) -> list[str]:
        """Group (query) ids of a split, in ``group_idx`` order, for writing predictions."""
        return list(dict.fromkeys(self.splits[split]["group"]))

