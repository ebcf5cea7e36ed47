"""Token-based batching (Tensor2Tensor's ``batch_size`` counts tokens): similar lengths together, padded cost bounded.

Examples are grouped into length buckets of width ``bucket_width`` (lengths 1..w, w+1..2w, ...). A bucket whose
longest example has ``L`` tokens is cut into batches of ``max(1, max_tokens // L)`` examples, so every batch has
``batch_size × max_len_in_batch ≤ max_tokens``. With ``shuffle`` the members of each bucket and then the list of
batches are permuted with a generator seeded by ``(seed, epoch)``: batches change from epoch to epoch while their
number does not (``len()`` is fixed). Without ``shuffle`` batches come bucket by bucket (shortest first), in
index order within a bucket (evaluation).

Distributed training: every rank builds the same global list and keeps every ``num_replicas``-th batch from
``rank`` on. To give all ranks the same number of batches without repeating an example, the largest batches are
halved until the count divides ``num_replicas`` (only when there are fewer examples than ranks are examples
repeated); with ``drop_last`` the surplus batches are dropped instead. Under Lightning nothing needs setting:
Lightning re-creates this sampler with a ``DistributedSampler`` as ``sampler`` and the replica count, rank and
epoch are read from it.

Ranking evaluation: :class:`GroupBatchSampler` packs whole groups (a query and its candidates) into batches of at
most ``max_examples`` examples, a larger group alone in its batch, so a truncated evaluation (Lightning's sanity
check, ``limit_val_batches``) cuts between groups, never inside one. Under DDP each rank takes every
``num_replicas``-th batch (whole groups again, each on one rank).

Resuming mid-epoch: both training samplers take ``skip``, what the next pass leaves out from its start (this rank's
examples or batches already trained on), and then 0. :class:`TokenBatchSampler` takes it as a constructor argument
so that it survives Lightning's re-creation under DDP; :class:`EpochShuffleSampler` is itself a
``DistributedSampler``, which Lightning keeps as it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import BatchSampler, DistributedSampler, Sampler


class _EpochCounter:
    """Holds the epoch; Lightning calls ``set_epoch`` on a batch sampler's ``sampler`` attribute."""

    def __init__(self) -> None:
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)


class EpochShuffleSampler(DistributedSampler):
    """A permutation of ``range(num_examples)`` drawn from ``(seed, epoch)``: epoch ``e`` has the same order in a run
    resumed from a checkpoint as in the uninterrupted run (Lightning calls ``set_epoch`` before each epoch; the
    order is drawn lazily, at the first batch). Under DDP rank ``r`` of ``num_replicas`` takes every
    ``num_replicas``-th example of that one permutation from ``r`` on, the permutation padded from its start to a
    multiple of ``num_replicas`` (as torch's ``DistributedSampler`` pads); one process takes all of it. A
    ``DistributedSampler``, so Lightning does not replace it with its own, whose order a resumed run could not
    skip into."""

    def __init__(self, num_examples: int, seed: int = 0, num_replicas: int = 1, rank: int = 0):
        super().__init__(range(num_examples), num_replicas=num_replicas, rank=rank, shuffle=True, seed=int(seed))
        self.skip = 0  # this rank's examples the next pass leaves out from its start (a run resumed mid-epoch), then 0

    def __iter__(self) -> Iterator[int]:
        gen = torch.Generator().manual_seed(int(np.random.SeedSequence([self.seed, self.epoch]).generate_state(1)[0]))
        order = torch.randperm(len(self.dataset), generator=gen).tolist()
        while len(order) < self.total_size:  # padded from its start, so every rank has num_samples examples
            order += order[: self.total_size - len(order)]
        skip, self.skip = self.skip, 0
        yield from order[self.rank: self.total_size: self.num_replicas][skip:]


def replicas_and_rank(num_replicas: int | None, rank: int | None, sampler) -> tuple[int, int]:
    """(processes, this one's rank) of a batch sampler: as given, else from Lightning's ``DistributedSampler``
    injected as ``sampler`` under DDP, else one process."""
    if isinstance(sampler, DistributedSampler):  # injected by Lightning under DDP
        num_replicas = sampler.num_replicas if num_replicas is None else num_replicas
        rank = sampler.rank if rank is None else rank
    num_replicas, rank = 1 if num_replicas is None else int(num_replicas), 0 if rank is None else int(rank)
    if not 0 <= rank < num_replicas:
        raise ValueError(f"rank {rank} outside 0..{num_replicas - 1}")
    return num_replicas, rank


class TokenBatchSampler(BatchSampler):
    """Yields lists of dataset indices whose padded size ``len(batch) × max length`` is at most ``max_tokens``."""

    def __init__(self, lengths: Sequence[int], max_tokens: int, shuffle: bool = True, seed: int = 0,
                 bucket_width: int = 8, drop_last: bool = False, num_replicas: int | None = None,
                 rank: int | None = None, sampler: Sampler | None = None, skip: int = 0):
        if max_tokens < 1 or bucket_width < 1:
            raise ValueError(f"max_tokens ({max_tokens}) and bucket_width ({bucket_width}) must be positive")
        self.lengths = np.maximum(np.asarray(lengths, dtype=np.int64).reshape(-1), 1)  # empty rows still pad to 1
        if len(self.lengths) == 0:
            raise ValueError("TokenBatchSampler got no examples")
        longest = int(self.lengths.max())
        if longest > max_tokens:
            i = int(self.lengths.argmax())
            raise ValueError(f"example {i} has {longest} tokens, more than max_tokens={max_tokens}; truncate the "
                             f"inputs (max_len) or raise max_tokens")
        self.num_replicas, self.rank = replicas_and_rank(num_replicas, rank, sampler)
        self.max_tokens, self.shuffle, self.seed = int(max_tokens), shuffle, int(seed)
        self.bucket_width, self.drop_last = int(bucket_width), drop_last
        # the epoch lives on ``sampler``: Lightning's DistributedSampler, or our own counter
        self.sampler = sampler if hasattr(sampler, "epoch") and hasattr(sampler, "set_epoch") else _EpochCounter()
        keys = (self.lengths - 1) // self.bucket_width
        self.buckets: list[np.ndarray] = [np.flatnonzero(keys == k) for k in np.unique(keys)]
        self.bucket_sizes = [max(1, self.max_tokens // int(self.lengths[b].max())) for b in self.buckets]
        self._cache: tuple[int, list[list[int]]] | None = None
        self.skip = int(skip)  # this rank's batches the next pass leaves out from its start (a run resumed
        # mid-epoch), then 0; an argument, so that Lightning's re-creation of this sampler under DDP keeps it

    @property
    def epoch(self) -> int:
        return int(self.sampler.epoch)

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    @property
    def batch_size(self) -> int:  # the largest number of examples in a batch (for code that asks for one)
        return max(self.bucket_sizes)

    def global_batches(self, epoch: int | None = None) -> list[list[int]]:
        """Every rank's batches of ``epoch`` (before sharding): rank r gets items r, r + R, r + 2R, ..."""
        epoch = self.epoch if epoch is None else epoch
        rng = np.random.default_rng([self.seed, epoch])
        batches: list[list[int]] = []
        for members, size in zip(self.buckets, self.bucket_sizes):
            order = rng.permutation(members) if self.shuffle else members
            batches += [order[i: i + size].tolist() for i in range(0, len(order), size)]
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return self._even_out(batches)

    def _even_out(self, batches: list[list[int]]) -> list[list[int]]:
        r = self.num_replicas
        surplus = len(batches) % r
        if surplus == 0:
            return batches
        if self.drop_last and len(batches) >= r:
            return batches[: len(batches) - surplus]
        n = len(batches)
        for k in range(r - surplus):
            j = max(range(len(batches)), key=lambda i: (len(batches[i]), -i))  # largest, earliest
            b = batches[j]
            if len(b) < 2:  # fewer examples than ranks: repeat examples from the start
                batches.append([batches[k % n][0]])
                continue
            half = (len(b) + 1) // 2
            batches[j: j + 1] = [b[:half], b[half:]]
        return batches

    def _local(self) -> list[list[int]]:
        epoch = self.epoch
        if self._cache is None or self._cache[0] != epoch:
            self._cache = (epoch, self.global_batches(epoch)[self.rank:: self.num_replicas])
        return self._cache[1]

    def __iter__(self) -> Iterator[list[int]]:
        skip, self.skip = self.skip, 0
        yield from self._local()[skip:]

    def __len__(self) -> int:
        return len(self._local())


class GroupBatchSampler(BatchSampler):
    """Evaluation batches of whole groups: ``groups`` (one group id per dataset index) in order of first
    appearance, each group's members in index order, consecutive groups packed while a batch holds at most
    ``max_examples`` examples; a group larger than that is a batch of its own. Nothing is shuffled.

    Under DDP (``num_replicas``, ``rank``, or Lightning's injected ``DistributedSampler`` as ``sampler``, read as
    :class:`TokenBatchSampler` reads it) rank ``r`` takes batches r, r + R, ...; to give every rank the same number
    of batches, batches of several groups are split between groups (largest first), and only where none is left
    to split are batches repeated from the start (as ``DistributedSampler`` pads: the metrics count an example id
    once)."""

    def __init__(self, groups: Sequence[int], max_examples: int, num_replicas: int | None = None,
                 rank: int | None = None, sampler: Sampler | None = None):
        if max_examples < 1:
            raise ValueError(f"max_examples ({max_examples}) must be positive")
        members: dict[int, list[int]] = {}
        for i, g in enumerate(groups):
            members.setdefault(int(g), []).append(i)
        if not members:
            raise ValueError("GroupBatchSampler got no examples")
        self.num_replicas, self.rank = replicas_and_rank(num_replicas, rank, sampler)
        self.max_examples, self.drop_last = int(max_examples), False
        self.sampler = sampler if sampler is not None else range(len(groups))
        batches: list[list[list[int]]] = []  # each batch a list of groups
        for group in members.values():
            if batches and sum(map(len, batches[-1])) + len(group) <= self.max_examples:
                batches[-1].append(group)
            else:
                batches.append([group])
        self.batches = [[i for group in batch for i in group] for batch in self._even_out(batches)]

    def _even_out(self, batches: list[list[list[int]]]) -> list[list[list[int]]]:
        r = self.num_replicas
        while len(batches) % r:
            j = max(range(len(batches)), key=lambda i: (len(batches[i]) > 1, sum(map(len, batches[i])), -i))
            b = batches[j]
            if len(b) < 2:  # every batch is one group: repeat batches from the start
                batches += [batches[k % len(batches)] for k in range(r - len(batches) % r)]
                break
            half = (len(b) + 1) // 2
            batches[j: j + 1] = [b[:half], b[half:]]
        return batches

    @property
    def batch_size(self) -> int:  # the most examples a batch of several groups holds (for code that asks for one)
        return self.max_examples

    def global_batches(self) -> list[list[int]]:
        """Every rank's batches (before sharding): rank r gets items r, r + R, r + 2R, ..."""
        return self.batches

    def __iter__(self) -> Iterator[list[int]]:
        yield from self.batches[self.rank:: self.num_replicas]

    def __len__(self) -> int:
        return len(self.batches[self.rank:: self.num_replicas])
