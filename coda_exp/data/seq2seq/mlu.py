"""Mathematical Language Understanding (Wangperawong 2018; CoDA Table 6): a seeded, stateless, streamed generator.

An example assigns two integers in [-1000, 1000) to ``x`` and ``y`` (in either order) and asks for one of the six
expressions ``x+y x-y x*y y+x y-x y*x``; the target is its value, e.g. ``y=691,x=-999,y*x`` -> ``-690309``. The
space holds 2000 * 2000 * 6 * 2 = 48M distinct inputs; the paper uses 12M of them and holds out 1/11.

* **Index -> example.** A position ``p`` in ``[0, 48M)`` maps through a seeded bijection (a 6-round Feistel network
  on 26 bits with cycle-walking) to an example code, decoded in mixed radix to ``(x, y, expression, order)``.
  Distinct positions give distinct examples, so no stream ever repeats an example.
* **Split = function of the example, not of its position.** The *group* of an example forgets what cannot change
  the computation: the order of the two assignments and the order of the operands of ``+`` and ``*`` (so
  ``x=1,y=2,x+y``, ``y=2,x=1,x+y`` and ``x=1,y=2,y+x`` are one group, while ``x-y`` and ``y-x`` are two). A keyed
  64-bit hash of the group holds out 1/11 of the groups; one more bit of the same hash splits the held-out groups
  evenly into ``validation`` and ``test``. The key is a constant, independent of the seed, so no seed's training
  stream can ever contain an example, or a trivial rewrite of an example, of any seed's validation or test set.
* **A split's stream** is the examples of that split in position order, truncated to ``num_examples``; with the
  paper's sizes the three streams together take the positions ``[0, ~12M)``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from coda_exp.data.common.errors import DataError, require_files
from coda_exp.data.common.files import iter_lines
from coda_exp.data.common.readers import Reader, register
from coda_exp.data.common.splits import SPLITS
from coda_exp.io import atomic_write

MLU_LOW, MLU_HIGH = -1000, 1000  # values are drawn from [MLU_LOW, MLU_HIGH)
MLU_EXPRESSIONS = ("x+y", "x-y", "x*y", "y+x", "y-x", "y*x")
_GROUP_OF_EXPR = np.array([0, 1, 2, 0, 3, 2], dtype=np.uint64)  # x+y==y+x, x*y==y*x; x-y, y-x distinct
_NVAL = MLU_HIGH - MLU_LOW
MLU_SPACE = _NVAL * _NVAL * len(MLU_EXPRESSIONS) * 2  # 48,000,000 distinct input strings
MLU_SPLITS = SPLITS  # a split code is its position here
MLU_HELD_OUT_FRACTION = 1 / 11
MLU_SPLIT_KEY = 0xC0DA_2019_0611  # fixed: the split never depends on the data seed
MLU_DEFAULT_SEED = 1234
MLU_PAPER_TRAIN, MLU_PAPER_VALIDATION, MLU_PAPER_TEST = 10_909_091, 545_454, 545_455  # 12M pairs, 1/11 held out

MLU_CHARS = "0123456789-+*=,xy"
# the longest input (``x=-1000,y=-1000,x*y``) and answer (``1000000``, ``-999000``) of the whole space, in characters
MLU_MAX_SRC_CHARS = len(f"x={MLU_LOW},y={MLU_LOW},x*y")
MLU_MAX_TGT_CHARS = max(len(str(MLU_LOW * MLU_LOW)), len(str(MLU_LOW * (MLU_HIGH - 1))))
SRC_RE = re.compile(r"^[xy]=-?[0-9]+,[xy]=-?[0-9]+,[xy][+\-*][xy]$")
TGT_RE = re.compile(r"^-?[0-9]+$")

_BITS, _HALF = 26, 13
_HALF_MASK = (1 << _HALF) - 1
_M64 = (1 << 64) - 1
_C1, _C2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _mix_py(z: int) -> int:
    """splitmix64's finaliser on Python ints (must agree with :func:`_mix_np`)."""
    z &= _M64
    z = ((z ^ (z >> 30)) * _C1) & _M64
    z = ((z ^ (z >> 27)) * _C2) & _M64
    return z ^ (z >> 31)


def _mix_np(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_C1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_C2)
    return z ^ (z >> np.uint64(31))


@lru_cache(maxsize=64)
def _round_keys(seed: int) -> tuple[int, ...]:
    return tuple(_mix_py(_mix_py(seed + 0x9E3779B97F4A7C15) + r * 0x632BE59BD9B4E019) for r in range(6))


def _feistel(v: np.ndarray, keys: tuple[int, ...]) -> np.ndarray:
    """A bijection of [0, 2**26): balanced Feistel rounds with a splitmix round function."""
    left, right = v >> np.uint64(_HALF), v & np.uint64(_HALF_MASK)
    for k in keys:
        f = _mix_np(right ^ np.uint64(k)) & np.uint64(_HALF_MASK)
        left, right = right, left ^ f
    return (left << np.uint64(_HALF)) | right


def permute_positions(positions: np.ndarray, seed: int) -> np.ndarray:
    """Example codes of ``positions`` (each in [0, MLU_SPACE)): a seeded bijection of [0, MLU_SPACE)."""
    keys = _round_keys(int(seed))
    v = _feistel(np.asarray(positions, dtype=np.uint64), keys)
    out = v >= np.uint64(MLU_SPACE)
    while out.any():  # cycle-walking keeps the bijection inside the space
        v[out] = _feistel(v[out], keys)
        out = v >= np.uint64(MLU_SPACE)
    return v


def _decode(codes: np.ndarray):
    """Mixed radix: code = ((order * 6 + expr) * 2000 + yi) * 2000 + xi."""
    c = codes.astype(np.int64)
    xi, c = c % _NVAL, c // _NVAL
    yi, c = c % _NVAL, c // _NVAL
    return xi, yi, c % len(MLU_EXPRESSIONS), c // len(MLU_EXPRESSIONS)


def _split_codes(xi: np.ndarray, yi: np.ndarray, expr: np.ndarray, key: int) -> np.ndarray:
    """0 = train, 1 = validation, 2 = test, from a keyed hash of the example's group."""
    group = (_GROUP_OF_EXPR[expr] * np.uint64(_NVAL) + yi.astype(np.uint64)) * np.uint64(_NVAL) + xi.astype(np.uint64)
    h = _mix_np(group ^ np.uint64(key & _M64))
    held = (h % np.uint64(11)) == 0
    return np.where(held, 1 + ((h >> np.uint64(40)) & np.uint64(1)).astype(np.int64), 0)


def _format(x, y, expr, order) -> list[tuple[str, str]]:
    exprs, out = MLU_EXPRESSIONS, []
    for xv, yv, e, o, r in zip(*(a.tolist() for a in (x, y, expr, order)), _results(x, y, expr)):
        out.append((f"x={xv},y={yv},{exprs[e]}" if o == 0 else f"y={yv},x={xv},{exprs[e]}", str(r)))
    return out


def _results(x, y, expr) -> list[int]:
    a = np.where(expr < 3, x, y)
    b = np.where(expr < 3, y, x)
    op = expr % 3
    return np.where(op == 0, a + b, np.where(op == 1, a - b, a * b)).tolist()


def mlu_examples(positions, seed: int) -> list[tuple[str, str]]:
    """``(src, tgt)`` of each position, vectorised (the fast path behind :func:`mlu_example`)."""
    xi, yi, expr, order = _decode(permute_positions(np.asarray(positions, dtype=np.int64), seed))
    return _format(xi + MLU_LOW, yi + MLU_LOW, expr, order)


def mlu_example(index: int, seed: int = MLU_DEFAULT_SEED) -> tuple[str, str]:
    """The example at position ``index`` in [0, MLU_SPACE) of the seed's permutation, as ``(src, tgt)``."""
    if not 0 <= index < MLU_SPACE:
        raise IndexError(f"MLU position {index} outside [0, {MLU_SPACE})")
    return mlu_examples([index], seed)[0]


def parse_mlu(src: str) -> tuple[int, int, str, int]:
    """``(x, y, expression, order)`` of an input string; order 0 = ``x`` assigned first."""
    if not SRC_RE.match(src):
        raise ValueError(f"not an MLU input: {src!r}; expected e.g. 'x=85,y=-523,x*y'")
    first, second, expr = src.split(",")
    (n1, v1), (n2, v2) = first.split("="), second.split("=")
    if n1 == n2:
        raise ValueError(f"not an MLU input: {src!r}; x and y must each be assigned once")
    x, y = (int(v1), int(v2)) if n1 == "x" else (int(v2), int(v1))
    return x, y, expr, 0 if n1 == "x" else 1


def mlu_answer(src: str) -> int:
    x, y, expr, _ = parse_mlu(src)
    a, b = (x, y) if expr[0] == "x" else (y, x)
    return {"+": a + b, "-": a - b, "*": a * b}[expr[1]]


def mlu_group(src: str) -> tuple[int, int, str]:
    """The canonical tuple an example's split depends on: ``(x, y, x+y | x-y | y-x | x*y)``."""
    x, y, expr, _ = parse_mlu(src)
    return x, y, {"y+x": "x+y", "y*x": "x*y"}.get(expr, expr)


def mlu_split_of(src: str, split_key: int = MLU_SPLIT_KEY) -> str:
    """``"train"``, ``"validation"`` or ``"test"``: the split every generator assigns this input to."""
    x, y, expr, _ = parse_mlu(src)
    if not (MLU_LOW <= x < MLU_HIGH and MLU_LOW <= y < MLU_HIGH):
        raise ValueError(f"{src!r}: values outside [{MLU_LOW}, {MLU_HIGH}) belong to no split")
    group = (int(_GROUP_OF_EXPR[MLU_EXPRESSIONS.index(expr)]) * _NVAL + y - MLU_LOW) * _NVAL + x - MLU_LOW
    h = _mix_py(group ^ (split_key & _M64))
    return MLU_SPLITS[0 if h % 11 else 1 + ((h >> 40) & 1)]


_SCAN = 1 << 20  # positions hashed per vectorised step when counting


@lru_cache(maxsize=32)
def _chunk_counts(seed: int, split: int, num_examples: int, chunk: int, key: int) -> np.ndarray:
    """Examples of ``split`` in each chunk of ``chunk`` positions, up to the chunk that completes num_examples."""
    counts, total, start = [], 0, 0
    rate = 10 / 11 if split == 0 else 1 / 22
    while total < num_examples:
        step = -(-min(_SCAN, int((num_examples - total) / rate * 1.05) + 4096) // chunk) * chunk
        if start >= MLU_SPACE:
            raise DataError(f"MLU: the {MLU_SPLITS[split]} split holds only {total} examples "
                            f"(of {MLU_SPACE} in the whole space); asked for {num_examples}")
        pos = np.arange(start, min(start + step, MLU_SPACE), dtype=np.int64)
        xi, yi, expr, _ = _decode(permute_positions(pos, seed))
        hit = (_split_codes(xi, yi, expr, key) == split).astype(np.int64)
        c = np.add.reduceat(hit, np.arange(0, len(hit), chunk))
        counts.append(c)
        total += int(c.sum())
        start += step
    out = np.concatenate(counts)
    cum = np.cumsum(out)
    last = int(np.searchsorted(cum, num_examples))  # first chunk where the running count reaches num_examples
    out = out[: last + 1].copy()
    out[-1] -= int(cum[last]) - num_examples
    out.flags.writeable = False
    return out


def _default_shard() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class MLUStream(IterableDataset):
    """The first ``num_examples`` examples of one split, generated lazily as ``{"src", "tgt", "index", "position"}``.

    ``index`` is the example's place ``t`` in the split's stream (in this epoch's order), ``position`` its position in
    the seed's permutation (``mlu_example(position, seed)`` rebuilds it). Sharding: DDP rank ``r`` of ``W`` takes the
    ``t`` with ``t % W == r`` (the remainder ``num_examples % W`` is dropped so that every rank yields the same
    number); within a rank, DataLoader worker ``k`` of ``K`` takes every ``K``-th chunk of ``chunk_size`` positions.
    ``shard=None`` reads the rank from ``torch.distributed`` when it is initialised. ``start`` (a multiple of W)
    resumes after ``start`` examples of the epoch. With ``shuffle`` (default: train only) each epoch visits the
    same examples in another order (chunk order and order within chunks drawn from ``(seed, epoch)``); call
    :meth:`set_epoch` before each epoch. Without it the order is the position order.
    """

    def __init__(self, split: str = "train", num_examples: int = MLU_PAPER_TRAIN, seed: int = MLU_DEFAULT_SEED,
                 shard: tuple[int, int] | None = None, start: int = 0, shuffle: bool | None = None,
                 epoch: int = 0, chunk_size: int = 8192, split_key: int = MLU_SPLIT_KEY):
        if split not in MLU_SPLITS:
            raise ValueError(f"MLU split {split!r} unknown; expected one of {MLU_SPLITS}")
        if num_examples < 0 or start < 0 or chunk_size < 1:
            raise ValueError("num_examples and start must be >= 0 and chunk_size >= 1")
        self.split, self.num_examples, self.seed = split, int(num_examples), int(seed)
        self.shard, self.start, self.epoch = shard, int(start), int(epoch)
        self.shuffle = split == "train" if shuffle is None else bool(shuffle)
        self.chunk_size, self.split_key = int(chunk_size), int(split_key)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def _rank_world(self) -> tuple[int, int]:
        rank, world = self.shard if self.shard is not None else _default_shard()
        if not 0 <= rank < world:
            raise ValueError(f"shard {(rank, world)}: expected 0 <= rank < world")
        if self.start % world:
            raise ValueError(f"start={self.start} must be a multiple of the world size {world}")
        return rank, world

    def __len__(self) -> int:
        """Examples this rank yields (all its workers together)."""
        _, world = self._rank_world()
        return max(0, self.num_examples // world * world - self.start) // world

    def __iter__(self) -> Iterator[dict]:
        rank, world = self._rank_world()
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        end = self.num_examples // world * world
        if self.start >= end:
            return
        code, seed, size = MLU_SPLITS.index(self.split), self.seed, self.chunk_size
        counts = _chunk_counts(seed, code, self.num_examples, size, self.split_key)
        order = np.arange(len(counts))
        if self.shuffle:
            order = np.random.default_rng([seed, self.epoch, 0xC0DA]).permutation(len(counts))
        offsets = np.concatenate([[0], np.cumsum(counts[order])])
        for j in range(worker, len(order), workers):
            c, t0 = int(order[j]), int(offsets[j])
            lo, hi = max(t0, self.start), min(t0 + int(counts[c]), end)
            first = lo + (rank - lo) % world
            if first >= hi:
                continue
            pos = np.arange(c * size, min((c + 1) * size, MLU_SPACE), dtype=np.int64)
            xi, yi, expr, order_ = _decode(permute_positions(pos, seed))
            keep = np.flatnonzero(_split_codes(xi, yi, expr, self.split_key) == code)[: int(counts[c])]
            if self.shuffle:
                keep = np.random.default_rng([seed, self.epoch, c]).permutation(keep)
            keep = keep[first - t0: hi - t0: world]
            pairs = _format(xi[keep] + MLU_LOW, yi[keep] + MLU_LOW, expr[keep], order_[keep])
            for i, ((src, tgt), p) in enumerate(zip(pairs, pos[keep].tolist())):
                yield {"src": src, "tgt": tgt, "index": first + i * world, "position": p}


MLU_FILES = {"train": "train.txt", "validation": "dev.txt", "test": "test.txt"}


def write_mlu_files(out_dir: str | os.PathLike, num_train: int = MLU_PAPER_TRAIN, num_test: int = MLU_PAPER_TEST,
                    seed: int = MLU_DEFAULT_SEED, num_dev: int | None = None) -> dict[str, Path]:
    """``train.txt``, ``dev.txt``, ``test.txt`` (one ``input:target`` line each, position order) in ``out_dir``.

    ``num_dev`` defaults to ``num_test``. The files hold exactly what :class:`MLUStream` yields unshuffled. Every
    size is checked (a DataError) before anything is written, and the three files are renamed into place only once
    all three are written, so a failure leaves a set already in ``out_dir`` whole.
    """
    out = Path(out_dir)
    sizes = {"train": num_train, "validation": num_test if num_dev is None else num_dev, "test": num_test}
    streams = {split: MLUStream(split, n, seed, shard=(0, 1), shuffle=False) for split, n in sizes.items()}
    for split, stream in streams.items():
        if stream.num_examples > MLU_SPACE:
            raise DataError(f"MLU: asked for {stream.num_examples} {split} examples; the whole space holds "
                            f"{MLU_SPACE}")
        if stream.num_examples:  # counts the split's examples (cached for the write below): too few is an error
            _chunk_counts(stream.seed, MLU_SPLITS.index(split), stream.num_examples, stream.chunk_size,
                          stream.split_key)
    out.mkdir(parents=True, exist_ok=True)
    paths = {split: out / MLU_FILES[split] for split in sizes}
    with ExitStack() as stack:  # each file is renamed over the old one only when all three are written
        files = {split: stack.enter_context(atomic_write(path)) for split, path in paths.items()}
        for split, stream in streams.items():
            files[split].writelines(f"{ex['src']}:{ex['tgt']}\n" for ex in stream)
    return paths


MLU_HINT = "write them with `coda-exp make-mlu --out-dir DIR` (`python scripts/make_mlu.py` in a checkout)"


def read_mlu_file(path: str | os.PathLike, verify: bool = True, split: str | None = None) -> Iterator[dict]:
    """Examples ``{"src", "tgt", "index"}`` of an ``input:target`` file; spaces are insignificant and removed.

    Every malformed line is a :class:`DataError` naming ``file:line``; with ``verify`` a wrong target is one too.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"MLU: no file {str(path)!r}; {MLU_HINT}")
    index = 0
    for lineno, line in iter_lines(path, split, "one 'input:target' pair per line"):
        text = "".join(line.split())
        if not text:
            continue
        where = f"{path}:{lineno}"
        if text.count(":") != 1:
            raise DataError(f"{where}: expected one 'input:target' pair, e.g. 'x=85,y=-523,x*y:-44455'")
        src, tgt = text.split(":")
        try:
            parse_mlu(src)
        except ValueError as e:
            raise DataError(f"{where}: {e}") from None
        if not TGT_RE.match(tgt):
            raise DataError(f"{where}: target {tgt!r} is not an integer")
        if verify and int(tgt) != mlu_answer(src):
            raise DataError(f"{where}: target {tgt} is wrong for {src!r} (expected {mlu_answer(src)})")
        yield {"src": src, "tgt": tgt, "index": index}
        index += 1


@dataclass(frozen=True)
class MLUReader(Reader):
    """MLU written to files (``train.txt``, ``dev.txt``, ``test.txt``); without files, MLU is generated."""

    def layout(self) -> str:
        return ", ".join(MLU_FILES.values())

    def local_files(self, directory: Path, split: str) -> list[Path]:
        needed = [MLU_FILES[split]]
        return [require_files(self.name, directory, needed, MLU_FILES.values(), MLU_HINT) / needed[0]]

    def read_local(self, directory: Path, split: str) -> Iterator[dict]:
        yield from read_mlu_file(self.local_files(directory, split)[0], split=split)


MLU = register(MLUReader(name="mlu", hub_id=None, source_hint=MLU_HINT))
