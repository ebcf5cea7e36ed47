"""Sequence-to-sequence data modules: (source text, target text) -> token ids -> padded teacher-forcing batches.

Batches: ``src_ids`` (B, S), ``src_mask`` (B, S) True = real token, ``tgt_in`` (B, T) = BOS + target,
``tgt_out`` (B, T) = target + EOS, ``tgt_mask`` (B, T), ``index`` (B,) the example's position in its split.
Special ids are shared by every tokenizer (:mod:`coda_exp.data.common.vocab`): pad 0, bos 1, eos 2, unk 3.

Evaluation is the task's (:mod:`coda_exp.tasks.seq2seq_eval`): a data module only says which evaluations its
benchmark reports (``evaluations``: ``bleu``, ``execution``) and hands over the raw examples they score against
(``targets(split)``: one dict per example with the raw target text ``tgt`` and, for AlgoLisp, its ``tests``).
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from coda_exp.data.common.base import DataModule
from coda_exp.data.common.encoders import check_state, new_state, tokenizer_from_state, tokenizer_state
from coda_exp.data.common.errors import DataError
from coda_exp.data.common.splits import SPLITS
from coda_exp.data.common.tokenization import CharTokenizer
from coda_exp.data.common.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from coda_exp.data.seq2seq.mlu import MLU_MAX_SRC_CHARS, MLU_MAX_TGT_CHARS


def pad_batch(seqs: Sequence[Sequence[int]], width: int | None = None) -> torch.Tensor:
    """(B, longest) long tensor, right-padded with PAD (one tensor construction: fast for many short rows).
    ``width``: (B, width) instead (static shapes); a :class:`DataError` when a row is longer."""
    longest = max(1, max(len(s) for s in seqs))
    if width is not None and longest > width:
        raise DataError(f"a sequence of {longest} tokens is longer than the static width {width} "
                        f"(data.static_shapes): raise the width or turn static shapes off")
    width = longest if width is None else width
    return torch.tensor([[*s, *([PAD_ID] * (width - len(s)))] for s in seqs], dtype=torch.long)


def teacher_forcing_batch(src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor,
                          index: torch.Tensor) -> dict[str, torch.Tensor]:
    """The batch dict every sequence family trains on, its masks derived from the padding (True = real token)."""
    return {"src_ids": src, "src_mask": src != PAD_ID, "tgt_in": tgt_in, "tgt_out": tgt_out,
            "tgt_mask": tgt_out != PAD_ID, "index": index}


def collate_seq2seq(rows: list[dict], widths: tuple[int, int] | None = None) -> dict[str, torch.Tensor]:
    """rows of ``{"src": ids, "tgt": ids, "index": int}`` -> a padded teacher-forcing batch; ``widths``
    (source, target + 1): every batch padded to these lengths (static shapes) instead of its longest row."""
    src_w, tgt_w = widths if widths is not None else (None, None)
    return teacher_forcing_batch(pad_batch([r["src"] for r in rows], src_w),
                                 pad_batch([[BOS_ID, *r["tgt"]] for r in rows], tgt_w),
                                 pad_batch([[*r["tgt"], EOS_ID] for r in rows], tgt_w),
                                 torch.tensor([r["index"] for r in rows], dtype=torch.long))


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

    ``static_shapes`` (the fast path, ``trainer=gpu_fast``): every batch of a split has the same shape, so that a
    captured CUDA graph or a compiled step serves them all: sequences are padded to ``static_widths(split)``
    (``STATIC_WIDTHS`` where a benchmark knows its longest source and target, else the longest of the split) and
    the last partial training batch of an epoch is dropped. Padding changes no result: masks keep it out.
    """
    FAMILIES = ("seq2seq",)

    collate = staticmethod(collate_seq2seq)
    evaluations: tuple[str, ...] = ()
    #: (source ids, target ids + 1) every example fits, where the benchmark fixes them (MLU); None: from the split
    STATIC_WIDTHS: tuple[int, int] | None = None

    def __init__(self, static_shapes: bool = False, **kwargs):
        super().__init__(**kwargs)
        if static_shapes and self.max_tokens is not None:
            raise ValueError("data.static_shapes needs batches of data.batch_size sequences: set data.max_tokens=null")
        self.static_shapes = bool(static_shapes)
        self.src_tokenizer = None
        self.tgt_tokenizer = None
        self.examples: dict[str, list[dict]] = {}

    def static_widths(self, split: str) -> tuple[int, int]:
        """(source width, target width) of ``split``'s static batches (target width counts BOS or EOS)."""
        if self.STATIC_WIDTHS is not None:
            return self.STATIC_WIDTHS
        pairs = self.splits[split].pairs
        return (max(1, max((len(s) for s, _ in pairs), default=1)), max((len(t) for _, t in pairs), default=0) + 1)

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

    INPUT_FIELDS = ("src",)
    INPUT_IDS = ("src",)  # the encoded inputs' token ids (UNK_ID: a token the model does not know)

    def encoder_state(self) -> dict:
        return new_state("seq2seq", src=tokenizer_state(self.src_tokenizer), tgt=tokenizer_state(self.tgt_tokenizer))

    def restore_encoders(self, state: dict) -> None:
        self.restored = check_state(state, "seq2seq")
        self.src_tokenizer = tokenizer_from_state(state["src"])  # one object when the model shared one vocabulary
        self.tgt_tokenizer = self.src_tokenizer if state["tgt"] == state["src"] else tokenizer_from_state(state["tgt"])

    def encode_inputs(self, rows: list[dict]) -> list[dict]:
        return [{"src": self.src_tokenizer.encode(r["src"]), "tgt": [], "index": i} for i, r in enumerate(rows)]

    def targets(self, split: str) -> list[dict]:
        """The raw examples of ``split`` in index order (``tgt``: the target text as in the data files)."""
        return self.examples[split]

    def encode_split(self, split: str, rows: list[dict]) -> EncodedPairs:
        return EncodedPairs([(self.src_tokenizer.encode(r["src"]), self.tgt_tokenizer.encode(r["tgt"]))
                             for r in rows])

    def split_loader(self, split: str) -> DataLoader:
        ds = self.splits[split]
        if self.static_shapes and isinstance(ds, EncodedPairs):
            return self.static_loader(ds, split)
        lengths = ds.lengths() if split == "train" and isinstance(ds, EncodedPairs) else None
        return self.loader(ds, train=split == "train", lengths=lengths)

    def static_loader(self, ds: EncodedPairs, split: str) -> DataLoader:
        """Batches of one shape (``static_shapes``): the plain loader's order, padded to ``static_widths``,
        training without its last partial batch; pinned memory where CUDA is available (asynchronous copies)."""
        train = split == "train"
        return self.loader(ds, train, collate=functools.partial(collate_seq2seq, widths=self.static_widths(split)),
                           drop_last=train, pin_memory=torch.cuda.is_available())


class _EncodedStream(IterableDataset):
    """Encodes a stream of ``{"src", "tgt", "index"}`` strings with a tokenizer; a new epoch order per pass."""

    def __init__(self, stream, tokenizer):
        self.stream, self.tokenizer = stream, tokenizer
        self._passes = 0
        self._start = 0

    def __len__(self) -> int:
        return len(self.stream)

    def resume(self, epoch: int, start: int = 0) -> None:
        """The next pass is epoch ``epoch``, from its ``start``-th example on (a run resumed mid-epoch)."""
        self._passes, self._start = int(epoch), int(start)

    def __iter__(self):
        if hasattr(self.stream, "set_epoch"):
            self.stream.set_epoch(self._passes)
        self._passes += 1
        start, self._start = self._start, 0
        if hasattr(self.stream, "start"):
            self.stream.start = start
        enc = self.tokenizer.encode
        for ex in self.stream:
            yield {"src": enc(ex["src"]), "tgt": enc(ex["tgt"]), "index": ex["index"]}


class MLUBatches(IterableDataset):
    """Static-shape batches of one generated MLU split, encoded a batch at a time (``data.static_shapes``).

    The examples and their order are the plain loader's (``stream`` read in groups of ``batch_size``). ``repeat``
    (training): never ends, epoch after epoch (each in its own order, ``stream.set_epoch``), each epoch's last
    partial batch dropped, starting each pass at batch ``start_batch`` of the whole sequence (a callable: read at
    each pass, the data module's ``stream_position``; so a resumed run trains on what the uninterrupted run would
    have, and a new Lightning epoch, every ``trainer.limit_train_batches`` batches, goes on where the last one
    stopped instead of training on the same batches again); the trainer's ``max_steps`` ends training.
    Without ``repeat`` (evaluation): one pass, the last batch as it comes.
    """

    def __init__(self, stream, tokenizer: CharTokenizer, batch_size: int, widths: tuple[int, int],
                 repeat: bool = False, start_batch: int | Callable[[], int] = 0):
        self.stream, self.tokenizer, self.batch_size, self.widths = stream, tokenizer, int(batch_size), widths
        self.repeat = bool(repeat)
        self.start_batch = start_batch if callable(start_batch) else int(start_batch)

    def batches_per_epoch(self) -> int:
        return len(self.stream) // self.batch_size

    def __iter__(self):
        if not self.repeat:
            yield from self._pass(self.stream, drop_last=False)
            return
        per_epoch = self.batches_per_epoch()
        if per_epoch == 0:
            raise DataError(f"MLU: the {self.stream.split} split has {len(self.stream)} examples, fewer than one "
                            f"batch of {self.batch_size}")
        start = self.start_batch() if callable(self.start_batch) else self.start_batch
        epoch, skip = divmod(int(start), per_epoch)
        world = self.stream._rank_world()[1]
        while True:
            stream = copy.copy(self.stream)
            stream.set_epoch(epoch)
            stream.start = skip * self.batch_size * world  # examples of the epoch already trained on, all ranks
            yield from self._pass(stream, drop_last=True)
            epoch, skip = epoch + 1, 0

    def _pass(self, stream, drop_last: bool):
        src, tgt, index = [], [], []
        for ex in stream:
            src.append(ex["src"])
            tgt.append(ex["tgt"])
            index.append(ex["index"])
            if len(src) == self.batch_size:
                yield self.encode(src, tgt, index)
                src, tgt, index = [], [], []
        if src and not drop_last:
            yield self.encode(src, tgt, index)

    def encode(self, src: list[str], tgt: list[str], index: list[int]) -> dict[str, torch.Tensor]:
        """Texts -> the teacher-forcing batch of ``collate_seq2seq``, padded to ``widths``."""
        enc, (src_w, tgt_w) = self.tokenizer.encode_padded, self.widths
        try:
            batch = (enc(src, width=src_w), enc(tgt, bos=True, width=tgt_w), enc(tgt, eos=True, width=tgt_w))
        except ValueError as e:
            raise DataError(f"MLU {self.stream.split}: {e}") from None
        return teacher_forcing_batch(*batch, torch.tensor(index, dtype=torch.long))


class MLUDataModule(Seq2SeqDataModule):
    """Mathematical Language Understanding (CoDA Table 6), generated on the fly by :mod:`coda_exp.data.seq2seq.mlu`.

    Character level, one shared vocabulary. ``data_seed`` fixes the dataset (the same for every training seed,
    so seeds vary only the model's initialisation and batch order); the train/validation/test split is a
    function of each example, so they never overlap. Paper size: 12M pairs, 1/11 held out.
    With ``dir`` set, the examples are read from ``train.txt``/``dev.txt``/``test.txt`` (``input:target`` lines,
    as ``scripts/make_mlu.py`` writes them) instead. ``max_train_examples``/``max_eval_examples`` cap the sizes.
    """

    generated_without_dir = True  # data.dir null: generated, no files or hub needed (scripts/check_sweep_data.py)

    STATIC_WIDTHS = (MLU_MAX_SRC_CHARS, MLU_MAX_TGT_CHARS + 1)  # (19, 8): every MLU pair fits

    def __init__(self, num_train: int, num_validation: int, num_test: int, data_seed: int = 1234, **kwargs):
        super().__init__(**kwargs)
        sizes = {"train": num_train, "validation": num_validation, "test": num_test}
        self.sizes = {k: n if self.limit(k) is None else min(n, self.limit(k)) for k, n in sizes.items()}
        self.data_seed = data_seed
        self._notes: list[str] = []

    def build(self) -> None:
        from coda_exp.data.seq2seq.mlu import MLU_CHARS, MLUStream

        if self.restored is None:
            self.src_tokenizer = self.tgt_tokenizer = CharTokenizer(MLU_CHARS)
        tok = self.src_tokenizer
        read: dict[str, list[dict]] = {}
        for split in self.read_splits(SPLITS):
            n = self.sizes[split]
            if self.dir is not None:
                read[split] = rows = self._read(split)
                self.splits[split] = self.encode_split(split, rows)
            else:
                self.splits[split] = _EncodedStream(MLUStream(split, num_examples=n, seed=self.data_seed), tok)
                self.stats[f"{split}_examples"] = n
        self.stats["data_seed"] = self.data_seed
        self.stats["source"] = self.dir or "generated"
        if read:
            self._check_files(read)
            self._notes = self._files_notes(read)

    def scale_notes(self) -> list[str]:
        return list(self._notes)

    def files_notes(self) -> list[str]:
        """What :meth:`scale_notes` says once ``setup`` has read the files, from the same rows read alone (not
        encoded nor checked, most of ``setup``'s time), for a caller that plans runs without training them
        (``scripts/reproduce_table6_gpu.py``: which runs have a record); none for generated data (no ``dir``)."""
        if self.dir is None:
            return []
        return self._files_notes({split: self._read(split) for split in self.read_splits(SPLITS)})

    def _read(self, split: str) -> list[dict]:
        """The first ``sizes[split]`` rows of ``split``'s file in ``dir``."""
        from coda_exp.data.seq2seq.mlu import MLU

        return [r for r, _ in zip(MLU.read(split, Path(self.dir)), range(self.sizes[split]))]

    def _files_notes(self, read: dict[str, list[dict]]) -> list[str]:
        """The scale label's entries for MLU files. Files whose first rows are this ``data_seed``'s generated examples
        in position order (what ``coda-exp make-mlu`` writes) hold the first examples of each split, as a generated
        run does: a split shorter than configured is named as the override a generated run of the same examples
        would have (``data.num_train=100000``), so tables keep it apart from the configured size and pool it with
        that run. Files of other examples are ``data.files=<digest of what was read>``, another dataset. The fixtures
        (a smoke test, its record marked ``fixture_data``) add nothing."""
        import hashlib

        from coda_exp.data.seq2seq.mlu import MLU_FILES, MLUStream
        from coda_exp.environment import is_fixture_data

        if is_fixture_data(self.dir):
            return []
        for split, rows in read.items():
            first = [(r["src"], r["tgt"]) for r in rows[:16]]
            made = MLUStream(split, len(first), self.data_seed, shard=(0, 1), shuffle=False)
            if first != [(ex["src"], ex["tgt"]) for ex in made]:
                digest = hashlib.sha1()
                for name, rows_ in read.items():
                    digest.update(f"{name}\n".encode())
                    digest.update("\n".join(f"{r['src']}:{r['tgt']}" for r in rows_).encode())
                note = f"data.files={digest.hexdigest()[:10]}"
                self.warn(f"MLU: {MLU_FILES[split]} in {self.dir} is not data_seed {self.data_seed}'s generated data "
                          f"(its first rows differ from what `coda-exp make-mlu --seed {self.data_seed}` writes): "
                          f"the record's scale names these files by their content, {note}, and tables keep them "
                          "apart from generated MLU")
                return [note]
        short = [(split, len(rows)) for split, rows in read.items() if len(rows) < self.sizes[split]]
        for split, n in short:
            self.warn(f"MLU: {MLU_FILES[split]} in {self.dir} holds {n} examples, fewer than the configured "
                      f"{self.sizes[split]}: the record's scale says data.num_{split}={n}, as a generated run of "
                      "those examples would")
        return [f"data.num_{split}={n}" for split, n in short]

    def _check_files(self, read: dict[str, list[dict]]) -> None:
        """MLU files that are not the paper's task: an input of the training file in an evaluation file (a test set
        copied from the training one scores memory, not understanding), or values outside [-1000, 1000). A warning
        each (files from elsewhere may split otherwise), kept in the record."""
        from coda_exp.data.seq2seq.mlu import MLU_FILES, MLU_HIGH, MLU_LOW, parse_mlu

        train = {r["src"] for r in read.get("train", ())}  # an evaluation reads no training file
        for split in [s for s in ("validation", "test") if s in read]:
            shared = [r["src"] for r in read[split] if r["src"] in train]
            if shared:
                self.warn(f"MLU: {len(shared)} of {len(read[split])} inputs of {MLU_FILES[split]} are in "
                          f"{MLU_FILES['train']} too (e.g. {shared[0]}): the {split} scores memory, not understanding")
        for split, rows in read.items():
            outside = [r["src"] for r in rows if not all(MLU_LOW <= v < MLU_HIGH for v in parse_mlu(r["src"])[:2])]
            if outside:
                self.warn(f"MLU: {len(outside)} inputs of {MLU_FILES[split]} have values outside [{MLU_LOW}, "
                          f"{MLU_HIGH}) (e.g. {outside[0]}), the paper's range")

    def split_loader(self, split: str) -> DataLoader:
        """With ``static_shapes``, a generated split comes as :class:`MLUBatches`, each pass training from the
        batches the run has trained on (``stream_position``: 0 for a new run; a resumed run's restored step)."""
        ds = self.splits[split]
        train = split == "train"
        if not (self.static_shapes and isinstance(ds, _EncodedStream)):
            if train and isinstance(ds, _EncodedStream) and self.trainer is not None:
                self._resume_stream(ds)
            return super().split_loader(split)
        batches = MLUBatches(ds.stream, self.src_tokenizer, self.batch_size if train else self.eval_batch_size,
                             self.static_widths(split), repeat=train, start_batch=self.stream_position if train else 0)
        return DataLoader(batches, batch_size=None, pin_memory=torch.cuda.is_available())

    def _resume_stream(self, ds: _EncodedStream) -> None:
        """The plain loader of a run resumed from a checkpoint: Lightning restores the epoch and step, not a
        stream's position, so the stream starts at the restored epoch (its order) and skips the batches of that
        epoch already trained on, instead of training on them again."""
        per_epoch = math.ceil(len(ds) / self.batch_size)  # every epoch has this many batches (the last one partial)
        position = self.resume_position(per_epoch)  # the next batch: its epoch and place in it
        if position is None:
            return
        epoch, done = position
        world = ds.stream._rank_world()[1]
        ds.resume(epoch, done * self.batch_size * world)
