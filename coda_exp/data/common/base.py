"""The base DataModule: what the pipeline relies on, filled in by each family.

The pipeline calls ``setup()``, then builds the network with ``model_kwargs()`` and the task with
``task_kwargs()``, trains on the loaders, and writes ``stats`` (counts, vocabulary sizes, data settings) and
``warnings`` (protocol deviations) into the run record. A family subclasses :class:`DataModule` and fills in
:meth:`DataModule.build` (read the splits into ``self.splits``), :meth:`DataModule.model_kwargs`,
:meth:`DataModule.task_kwargs` and ``collate`` (rows -> a batch); loaders, example caps and the ``datasets``
cache of reader output are shared here.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import shutil
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from coda_exp.data.common.batching import EpochShuffleSampler, GroupBatchSampler, TokenBatchSampler
from coda_exp.data.common.data_cache import arrow_error, damaged_folder
from coda_exp.data.common.errors import DataError, os_reason
from coda_exp.data.common.readers import Reader
from coda_exp.data.common.splits import is_test_split
from coda_exp.errors import cause_of, full_disk, what_to_free

log = logging.getLogger(__name__)


def fingerprint(*parts: object) -> str:
    """A short stable hash of ``parts`` (cache keys)."""
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _reader_examples(reader: Reader, directory: str | None, split: str):  # for datasets.Dataset.from_generator
    """The reader's examples; an OSError reading the data (a file or folder this user cannot read, a disk error)
    is a DataError naming the file, not the datasets library's DatasetGenerationError around it."""
    try:
        yield from reader.read(split, directory)
    except OSError as e:
        what = f"{e.filename}: cannot be read" if e.filename else (
            f"{reader.name}: the {split} split cannot be read from {directory or 'the hub'}")
        raise DataError(f"{what} ({os_reason(e)}) (read for the {split} split)") from None


def cached_split(reader: Reader, split: str, directory: str | os.PathLike | None, cache_dir: Path, features,
                 version: str):
    """The examples of ``split`` as a :class:`datasets.Dataset` cached under ``cache_dir/datasets`` (keyed by the
    reader's ``source_key``). The reader's :class:`DataError` (file and line) is raised as is, not wrapped."""
    import datasets

    directory = None if directory is None else str(directory)
    fp = fingerprint(version, reader.name, split, reader.source_key(split, directory))
    try:
        return datasets.Dataset.from_generator(
            _reader_examples, gen_kwargs={"reader": reader, "directory": directory, "split": split},
            cache_dir=str(cache_dir / "datasets"), fingerprint=fp, features=features)
    except DataError:
        raise
    except Exception as e:  # datasets wraps generator errors: surface ours
        cause = cause_of(e, DataError)
        if cause is not None:
            raise cause from None
        raise


def trained_per_epoch(per_epoch: int, limit: float | None) -> int:
    """The batches of an epoch of ``per_epoch`` that Lightning trains on under ``trainer.limit_train_batches``
    ``limit`` (its ``_parse_num_batches``): an int caps them, a float is that fraction of them (rounded down);
    None (the config's null) is all of them. A run resumed mid-epoch skips into that shortened epoch."""
    if limit is None or isinstance(limit, bool):
        return per_epoch
    if isinstance(limit, int):
        return min(per_epoch, limit)
    return int(per_epoch * float(limit))


def _accumulation(trainer) -> int:
    """Batches a step of ``trainer`` (``accumulate_grad_batches``, at least 1)."""
    return max(int(getattr(trainer, "accumulate_grad_batches", 1) or 1), 1)


def _epoch_and_batches(trainer, trained: int) -> tuple[int, int]:
    """(epoch, batches of it trained on) after ``trainer``'s global step, with ``trained`` batches an epoch: an epoch
    is ``ceil(trained / accumulate)`` steps (Lightning also steps on an epoch's last batch)."""
    accumulate = _accumulation(trainer)
    epoch, steps = divmod(int(trainer.global_step), math.ceil(trained / accumulate))
    return epoch, steps * accumulate


class DataModule(pl.LightningDataModule, ABC):
    """Base of every family's data module.

    ``dir``: the folder of the official files (None: the hub, or a generator); ``cache_dir``: tokenizers,
    vocabularies, cached datasets; ``batch_size`` examples per training batch (``eval_batch_size`` for
    evaluation), or, when ``max_tokens`` is set and the family passes lengths, as many as fit in ``max_tokens``
    padded tokens (length buckets of ``bucket_width``); ``max_train_examples`` / ``max_eval_examples`` cap the splits (see ``limit``).
    """

    collate: Callable[[list], dict]  # rows of a split -> a batch of tensors (each family's own)
    #: the ``task.family`` values whose batches a subclass makes (a task YAML of another family is refused before any
    #: data loads: :mod:`coda_exp.node_keys`); empty (a class that does not say): not checked
    FAMILIES: tuple[str, ...] = ()

    def __init__(self, dir: str | None = None, cache_dir: str = "cache", batch_size: int = 64,
                 eval_batch_size: int | None = None, max_tokens: int | None = None,
                 bucket_width: int = 8, max_train_examples: int | None = None, max_eval_examples: int | None = None,
                 num_workers: int = 0, seed: int = 0):
        super().__init__()
        self.dir = dir
        self.cache_dir = Path(cache_dir)
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        self.max_tokens, self.bucket_width = max_tokens, bucket_width
        self.max_train_examples, self.max_eval_examples = max_train_examples, max_eval_examples
        self.num_workers, self.seed = num_workers, seed
        self.splits: dict[str, Dataset] = {}
        self.stats: dict[str, int | float | str] = {}
        self.warnings: list[str] = []
        self.restored: dict | None = None  # the trained model's tokenizers (restore_encoders), else built from data
        self.only_splits: tuple[str, ...] | None = None  # an evaluation's splits (read_splits); None: every split
        self.trained_weights = False  # the network takes a checkpoint's weights, word vectors included (eval, predict)

    # -- the form a family fills in ------------------------------------------------------------------------
    @abstractmethod
    def build(self) -> None:
        """Read (or generate) the data and fill ``self.splits`` and the tokenizers / vocabulary."""

    @abstractmethod
    def model_kwargs(self) -> dict:
        """Constructor arguments of the network that come from the data (vocabulary sizes, classes, vectors)."""

    @abstractmethod
    def task_kwargs(self) -> dict:
        """Constructor arguments of the task module that come from the data (classes, special ids, targets)."""

    # -- a trained model's tokenizers (coda_exp.data.common.encoders): eval and predict --------------------
    #: the fields of one input of ``coda-exp predict`` (JSONL keys, or a TSV file's header); () = not supported
    INPUT_FIELDS: tuple[str, ...] = ()
    #: the keys of ``encode_inputs``' rows holding token ids (lists, or lists of lists): inputs of unknown tokens
    INPUT_IDS: tuple[str, ...] = ()

    def encoder_state(self) -> dict | None:
        """The tokenizers (and vector-table shape) a trained model needs to read new text, as a plain dict saved in
        its checkpoints (call after ``setup``); None where a family keeps none (its checkpoints are then evaluated
        on tokenizers rebuilt from the training files)."""
        return None

    def restore_encoders(self, state: dict) -> None:
        """Use a trained model's saved tokenizers (:meth:`encoder_state`) instead of building them from the training
        split: before ``setup`` (evaluation: the splits are encoded with them) or instead of it (prediction)."""
        raise DataError(f"{type(self).__name__}: this data family saves no tokenizers in its checkpoints")

    def read_splits(self, names: Sequence[str]) -> list[str]:
        """The splits of ``names`` (a family's) that ``setup`` reads: every one, unless the trained model's
        tokenizers are restored and an evaluation named the ones it reads (``only_splits``: ``validation``,
        ``test``; a ``test_<name>`` split is a test split), so that ``coda-exp eval split=test`` needs the test
        files only, not the training ones."""
        if self.restored is None or self.only_splits is None:
            return list(names)
        return [n for n in names if ("test" if is_test_split(n) else n) in self.only_splits]

    def encode_inputs(self, rows: list[dict]) -> list[dict]:
        """Inputs of ``coda-exp predict`` (dicts with :data:`INPUT_FIELDS`) -> rows ``collate`` batches (labels
        and targets are placeholders), encoded exactly as the evaluation splits are."""
        raise DataError(f"coda-exp predict: not supported for the {type(self).__name__} family yet")

    # -- shared ---------------------------------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        """``build`` the splits; a split cache of the ``datasets`` library that cannot be read (cut short by a run
        stopped while writing it) is deleted and built again from the data files, with a warning naming it."""
        if self.splits:
            return
        before = (dict(self.stats), list(self.warnings))
        rebuilt: list[tuple[Path, str]] = []
        while True:
            try:
                self.build()
                break
            except Exception as err:
                damaged = self._damaged_cache(err, [folder for folder, _ in rebuilt])
                if damaged is None:
                    raise
                rebuilt.append(damaged)
                self.splits, self.stats, self.warnings = {}, dict(before[0]), list(before[1])
        for folder, why in rebuilt:
            self.warn(f"the data cache {folder} could not be read ({why}: a run stopped while writing it?); it was "
                      "deleted and built again from the data files")
        for name, ds in self.splits.items():
            if not isinstance(ds, IterableDataset):
                self.stats[f"{name}_examples"] = len(ds)

    def _damaged_cache(self, err: Exception, rebuilt: list[Path]) -> tuple[Path, str] | None:
        """After ``build`` raised ``err``: the folder of a damaged split cache, deleted (and why it was), for
        ``setup`` to build again; None where ``err`` is not about the cache. A DataError where the disk is full, or
        the cache cannot be read and cannot be rebuilt here (already rebuilt, outside ``cache_dir``, not deleted)."""
        failed = full_disk(err)
        if failed is not None:
            raise DataError(f"{failed.strerror} writing the data cache under {self.cache_dir}"
                            f"{' (' + failed.filename + ')' if failed.filename else ''}: {what_to_free(failed)} "
                            "or put the cache elsewhere (paths.cache_dir=...), then run again") from None
        unreadable = arrow_error(err)
        if unreadable is None:
            return None
        why = f"{type(unreadable).__name__}: {unreadable}"
        folder = damaged_folder(unreadable, self.cache_dir)
        if folder is not None and folder not in rebuilt:
            try:
                shutil.rmtree(folder)
                return folder, why
            except OSError:
                pass  # the message below: the user deletes it
        where = str(folder or self.cache_dir)
        if self.dir is None:  # a hub dataset: the datasets library's own cache may be the one
            import datasets

            where += f" (or, for a dataset from the hub, {datasets.config.HF_DATASETS_CACHE})"
        raise DataError(f"the data cache under {where} cannot be read ({why}; a run stopped while writing it, or a "
                        "full disk?): delete that folder and run again, it is rebuilt from the data files") from None

    def scale_notes(self) -> list[str]:
        """What the data read says that the configuration does not, for the record's ``scale`` label
        (``coda_exp.fingerprint.amend_scale``), each as ``key=value``; read after ``setup``. Empty here: a family
        whose configured sizes or generated data a folder of files can depart from says so (MLU)."""
        return []

    def warn(self, message: str) -> None:
        """A protocol deviation worth keeping with the run: logged (once, by rank 0 under DDP, where every rank
        reads the same data) and recorded in ``warnings``."""
        if pl.utilities.rank_zero_only.rank == 0:
            log.warning(message)
        self.warnings.append(message)

    def warn_untrained_vectors(self, message: str) -> None:
        """:meth:`warn` that no pretrained vectors initialise the word vectors (``message``), for a model trained
        here only: where the network takes a checkpoint's weights (``trained_weights``: ``coda-exp eval`` and
        ``predict``; or its tokenizers are restored) its vectors are the trained ones, and the warning would mislead."""
        if self.restored is None and not self.trained_weights:
            self.warn(message)

    def limit(self, split: str) -> int | None:
        """The cap on the examples of ``split``: ``max_train_examples`` for train, ``max_eval_examples`` else."""
        return self.max_train_examples if split == "train" else self.max_eval_examples

    def subset(self, split: str, examples: list) -> list:
        """``examples`` capped by :meth:`limit`: a random subset drawn with the fixed ``subset_seed`` (the same
        examples for every run seed, so models are compared on one subset), kept in file order."""
        limit = self.limit(split)
        if limit is None or len(examples) <= limit:
            return examples
        keep = sorted(random.Random(getattr(self, "subset_seed", 0)).sample(range(len(examples)), limit))
        return [examples[i] for i in keep]

    def loader(self, ds: Dataset, train: bool, lengths: Sequence[int] | None = None, collate: Callable | None = None,
               drop_last: bool = False, pin_memory: bool = False, groups: Sequence[int] | None = None) -> DataLoader:
        """A DataLoader over ``ds``: token-based batches when ``max_tokens`` is set and ``lengths`` given,
        else ``batch_size`` (train, shuffled anew each epoch from ``(seed, epoch)``) or ``eval_batch_size`` (in order).
        ``groups`` (evaluation of a ranking split: a group id per example) makes batches of whole groups of up to
        ``eval_batch_size`` examples (``GroupBatchSampler``), so a truncated evaluation never cuts a group.
        ``collate`` replaces the family's ``collate``; ``drop_last`` and ``pin_memory`` are DataLoader's."""
        common = {"collate_fn": collate or self.collate, "num_workers": self.num_workers,
                  "persistent_workers": self.num_workers > 0, "pin_memory": pin_memory}
        size = self.batch_size if train else self.eval_batch_size
        if isinstance(ds, IterableDataset):
            return DataLoader(ds, batch_size=size, **common)
        if groups is not None and not train:  # Lightning shards it under DDP, as token batches
            return DataLoader(ds, batch_sampler=GroupBatchSampler(groups, size), **common)
        if self.max_tokens is not None and lengths is not None:
            kwargs = {"shuffle": train, "seed": self.seed, "bucket_width": self.bucket_width,
                      **(self.shard() if train else {})}  # evaluation: Lightning shards it under DDP
            sampler = TokenBatchSampler(lengths, self.max_tokens, **kwargs)
            skip = self.trained_batches(len(sampler)) if train else 0
            if skip:  # re-made with it: an argument, which Lightning's re-creation under DDP keeps
                sampler = TokenBatchSampler(lengths, self.max_tokens, skip=skip, **kwargs)
            return DataLoader(ds, batch_sampler=sampler, **common)
        # training order: a permutation per (seed, epoch), so a resumed run sees the epochs of the uninterrupted one
        shuffle = EpochShuffleSampler(len(ds), self.seed, **self.shard()) if train else None
        if train:
            shuffle.skip = size * self.trained_batches(len(shuffle) // size if drop_last else
                                                       math.ceil(len(shuffle) / size))
        return DataLoader(ds, batch_size=size, sampler=shuffle, generator=torch.Generator().manual_seed(self.seed),
                          drop_last=drop_last, **common)

    def shard(self) -> dict[str, int]:
        """This process's share of the training data under DDP (``num_replicas``, ``rank``: the trainer's world
        size and global rank; one process when there is no trainer)."""
        trainer = self.trainer
        if trainer is None or getattr(trainer, "world_size", 1) == 1:
            return {"num_replicas": 1, "rank": 0}
        return {"num_replicas": int(trainer.world_size), "rank": int(trainer.global_rank)}

    def trained_batches(self, per_epoch: int) -> int:
        """The batches of the current epoch a run resumed mid-epoch has trained on in this process (0 for a new run,
        or at an epoch's start): Lightning restores the epoch and step, not a loader's
        place in its epoch, so the training loader leaves them out and the resumed run trains on what the
        uninterrupted one would have, bit for bit. ``per_epoch``: this process's batches an epoch (its shard under
        DDP)."""
        position = self.resume_position(per_epoch)
        return 0 if position is None else position[1]

    def resume_position(self, per_epoch: int) -> tuple[int, int] | None:
        """(epoch, batches of it trained on) of the next training batch of a run resumed from the trainer's
        restored global step, with ``per_epoch`` batches an epoch in the loader, of which Lightning trains on the
        first ``trainer.limit_train_batches`` (:func:`trained_per_epoch`); None for a new run. Under gradient
        accumulation a step is ``accumulate_grad_batches`` batches, and Lightning also steps on an epoch's last batch
        (a run stops only after a step: ``stops.GracefulStop``)."""
        trainer = self.trainer
        if trainer is None or not trainer.global_step or per_epoch <= 0:
            return None
        trained = trained_per_epoch(per_epoch, getattr(trainer, "limit_train_batches", None))
        if trained <= 0:
            return None
        return _epoch_and_batches(trainer, trained)

    def stream_position(self) -> int:
        """The training batches the run has trained on so far, for an endless loader (no epochs of its own, so
        Lightning's epochs are ``trainer.limit_train_batches`` batches, or never end): ``accumulate_grad_batches`` a
        step, and an int limit's epochs step on their last batch too. Read at each pass of the loader (a new
        Lightning epoch, a resumed run), so that the stream goes on where the run is instead of starting again."""
        trainer = self.trainer
        if trainer is None:
            return 0
        limit = getattr(trainer, "limit_train_batches", None)
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            epoch, batches = _epoch_and_batches(trainer, limit)
            return epoch * limit + batches
        return int(trainer.global_step) * _accumulation(trainer)  # a fraction: Lightning takes 1.0 of an endless loader

    def split_loader(self, split: str) -> DataLoader:
        """The loader of ``split`` (families override it to add lengths or select columns)."""
        return self.loader(self.splits[split], train=split == "train")

    def train_dataloader(self) -> DataLoader:
        return self.split_loader("train")

    def val_dataloader(self) -> DataLoader:
        return self.split_loader("validation")

    def test_dataloader(self) -> DataLoader | list[DataLoader]:
        return self.split_loader("test")

    def predict_dataloader(self) -> DataLoader | list[DataLoader]:
        return self.test_dataloader()


class LabelledDataModule(DataModule):
    """A classification family's base: the classes are its reader's labels (``reader.label_names``)."""

    reader: Reader

    @property
    def label_names(self) -> tuple[str, ...]:
        return self.reader.label_names

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

    def setup(self, stage: str | None = None) -> None:
        fresh = not self.splits
        super().setup(stage)
        if fresh:
            self.check_training_classes()

    def check_training_classes(self) -> None:
        """A training split holding examples of one class only (every SST label 0: a wrong or damaged file) is a
        warning naming its file and the count of each class: the model would learn to predict that class."""
        train = self.splits.get("train")
        if train is None or isinstance(train, IterableDataset) or not len(train):
            return
        counts = Counter(train["label"])
        if len(counts) > 1:
            return
        if self.dir is None:
            source = f"the hub dataset {self.reader.hub_id!r}"
        else:
            source = ", ".join(str(p) for p in self.reader.local_files(Path(self.dir), "train"))
        capped = " (after data.max_train_examples)" if self.max_train_examples is not None else ""
        per_class = ", ".join(f"{name}: {counts.get(i, 0)}" for i, name in enumerate(self.label_names))
        self.warn(f"{self.reader.name}: every training example{capped} is of one class ({per_class}), read from "
                  f"{source}; the model can only learn to predict that class: is it the right file?")
