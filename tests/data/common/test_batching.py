import random

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from coda_exp.data.common.batching import TokenBatchSampler


def lengths(n=300, seed=0, hi=60):
    rng = random.Random(seed)
    return [rng.randint(1, hi) for _ in range(n)]


def cost(batch, lens):
    return len(batch) * max(lens[i] for i in batch)


@pytest.mark.parametrize("shuffle", [True, False])
def test_token_budget_and_each_example_once(shuffle):
    lens = lengths()
    s = TokenBatchSampler(lens, max_tokens=200, shuffle=shuffle, seed=3, bucket_width=4)
    for epoch in range(3):
        s.set_epoch(epoch)
        batches = list(s)
        assert all(cost(b, lens) <= 200 for b in batches)
        flat = [i for b in batches for i in b]
        assert sorted(flat) == list(range(len(lens)))  # every example exactly once
        assert len(batches) == len(s)


def test_batches_group_similar_lengths():
    lens = lengths(hi=100)
    s = TokenBatchSampler(lens, max_tokens=400, bucket_width=8)
    for b in s:
        span = max(lens[i] for i in b) - min(lens[i] for i in b)
        assert span < 8  # one bucket per batch
    # padded tokens are a small share of the total, unlike random batches of the same count
    padded = sum(cost(b, lens) for b in s)
    assert sum(lens) / padded > 0.85


def test_deterministic_by_seed_and_epoch():
    lens = lengths()
    a = TokenBatchSampler(lens, 200, seed=1)
    b = TokenBatchSampler(lens, 200, seed=1)
    assert list(a) == list(b)
    first = list(a)
    a.set_epoch(1)
    b.set_epoch(1)
    assert list(a) == list(b) != first
    assert len(a) == len(first)  # the number of batches does not change with the epoch
    c = TokenBatchSampler(lens, 200, seed=2)
    assert list(c) != first
    a.set_epoch(0)
    assert list(a) == first


def test_no_shuffle_is_sorted_by_bucket():
    lens = [5, 1, 9, 2, 8]
    s = TokenBatchSampler(lens, max_tokens=10, shuffle=False, bucket_width=4)
    # buckets 1-4 {1, 3} (longest 2: 5 fit), 5-8 {0, 4} (longest 8: 1 fits), 9-12 {2}; index order inside
    assert list(s) == [[1, 3], [0], [4], [2]]
    assert s.epoch == 0


@pytest.mark.parametrize("n,replicas", [(300, 2), (301, 3), (37, 4), (5, 4), (3, 4)])
def test_ddp_shards_disjoint_equal_and_complete(n, replicas):
    lens = lengths(n)
    shards = [TokenBatchSampler(lens, 200, seed=5, num_replicas=replicas, rank=r) for r in range(replicas)]
    for epoch in (0, 1):
        for s in shards:
            s.set_epoch(epoch)
        got = [list(s) for s in shards]
        assert len({len(g) for g in got}) == 1  # equal number of batches on every rank
        flat = [i for g in got for b in g for i in b]
        if n >= replicas:
            assert sorted(flat) == list(range(n))  # disjoint, and together every example once
        else:
            assert set(flat) == set(range(n))  # fewer examples than ranks: some repeat, none lost
        assert all(cost(b, lens) <= 200 for g in got for b in g)


def test_ddp_drop_last_drops_surplus_batches():
    lens = lengths(301)
    full = TokenBatchSampler(lens, 200, seed=5).global_batches()
    shards = [TokenBatchSampler(lens, 200, seed=5, num_replicas=3, rank=r, drop_last=True) for r in range(3)]
    got = [list(s) for s in shards]
    assert len({len(g) for g in got}) == 1 and sum(map(len, got)) == len(full) - len(full) % 3
    flat = [i for g in got for b in g for i in b]
    assert len(flat) == len(set(flat))


def test_errors():
    with pytest.raises(ValueError, match="example 1 has 50 tokens, more than max_tokens=40"):
        TokenBatchSampler([3, 50], max_tokens=40)
    with pytest.raises(ValueError, match="rank 2 outside"):
        TokenBatchSampler([3], 40, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="no examples"):
        TokenBatchSampler([], 40)


def test_dataloader_and_lightning_ddp_injection():
    """Lightning re-creates a BatchSampler subclass with a DistributedSampler: rank, replicas, epoch come from it."""
    from lightning_fabric.utilities.data import _replace_dunder_methods, _set_sampler_epoch
    from pytorch_lightning.utilities.data import _update_dataloader
    from torch.utils.data import BatchSampler

    lens = lengths(50)
    data = list(range(50))
    with _replace_dunder_methods(DataLoader, "dataset"), _replace_dunder_methods(BatchSampler):
        loader = DataLoader(data, batch_sampler=TokenBatchSampler(lens, 200, seed=4),
                            collate_fn=lambda rows: torch.tensor(rows))
    assert sorted(torch.cat(list(loader)).tolist()) == data
    _set_sampler_epoch(loader, 3)  # what the fit loop does at each epoch start
    assert loader.batch_sampler.epoch == 3

    shards = []
    for rank in range(2):
        dist = DistributedSampler(data, num_replicas=2, rank=rank, shuffle=True)
        new = _update_dataloader(loader, dist)
        bs = new.batch_sampler
        assert isinstance(bs, TokenBatchSampler) and (bs.num_replicas, bs.rank) == (2, rank)
        _set_sampler_epoch(new, 1)
        assert bs.epoch == 1
        shards.append(torch.cat(list(new)).tolist())
    assert sorted(shards[0] + shards[1]) == data


def test_epoch_shuffle_one_process_is_the_seed_epoch_permutation_and_ranks_share_it():
    """One process: the permutation drawn from (seed, epoch), as before it was a DistributedSampler (the data order
    of committed runs). Under DDP each rank takes every num_replicas-th example of that permutation, padded from
    its start, and is a DistributedSampler, so Lightning keeps it instead of injecting its own."""
    import numpy as np

    from coda_exp.data.common.batching import EpochShuffleSampler

    one = EpochShuffleSampler(11, seed=4)
    one.set_epoch(2)
    gen = torch.Generator().manual_seed(int(np.random.SeedSequence([4, 2]).generate_state(1)[0]))
    order = torch.randperm(11, generator=gen).tolist()
    assert list(one) == order and len(one) == 11
    shards = [EpochShuffleSampler(11, seed=4, num_replicas=3, rank=r) for r in range(3)]
    for s in shards:
        s.set_epoch(2)
        assert isinstance(s, DistributedSampler) and len(s) == 4
    padded = order + order[:1]
    assert [list(s) for s in shards] == [padded[r::3] for r in range(3)]
    shards[1].skip = 2  # a resumed run: this rank's examples already trained on, left out of the next pass only
    assert list(shards[1]) == padded[1::3][2:]
    assert list(shards[1]) == padded[1::3]


def test_token_batches_skip_survives_lightnings_ddp_re_creation():
    """``skip`` is a constructor argument: Lightning re-creates a batch sampler under DDP from the arguments it was
    made with, so a skip set afterwards would be lost and the resumed rank would train on its first batches again."""
    from lightning_fabric.utilities.data import _replace_dunder_methods
    from pytorch_lightning.utilities.data import _update_dataloader
    from torch.utils.data import BatchSampler

    lens, data = lengths(50), list(range(50))
    for rank in range(2):
        whole = TokenBatchSampler(lens, 200, seed=4, num_replicas=2, rank=rank)
        with _replace_dunder_methods(DataLoader, "dataset"), _replace_dunder_methods(BatchSampler):
            loader = DataLoader(data, batch_sampler=TokenBatchSampler(lens, 200, seed=4, num_replicas=2, rank=rank,
                                                                      skip=2))
        new = _update_dataloader(loader, DistributedSampler(data, num_replicas=2, rank=rank, shuffle=True))
        assert [b.tolist() for b in new] == [torch.tensor(b).tolist() for b in list(whole)[2:]]


class _Rows:
    """The loader of a data module whose trainer is (world_size, rank, global_step): no data family needed."""

    def __init__(self, world, rank, step, max_tokens=None, limit=1.0, accumulate=1):
        from types import SimpleNamespace

        from coda_exp.data.common.base import DataModule

        class Module(DataModule):
            build = model_kwargs = task_kwargs = None

        self.dm = Module(batch_size=4, max_tokens=max_tokens, seed=7)
        self.dm.collate = lambda rows: rows
        trainer = SimpleNamespace(world_size=world, global_rank=rank, global_step=step, limit_train_batches=limit,
                                  accumulate_grad_batches=accumulate)
        type(self.dm).trainer = property(lambda _: trainer)

    def batches(self, lens=None):
        data = list(range(30))
        return [list(b) for b in self.dm.loader(data, train=True, lengths=lens)]


@pytest.mark.parametrize("max_tokens", [None, 120])  # shuffled examples, token batches
def test_a_resumed_rank_leaves_out_its_batches_of_the_epoch_already_trained_on(max_tokens):
    """Under DDP each rank's training loader is its own shard (no Lightning sampler needed) and a run resumed at
    global step k starts at batch k mod (the rank's batches an epoch), as the uninterrupted rank went on."""
    lens = lengths(30, hi=30) if max_tokens else None
    for rank in range(2):
        whole = _Rows(2, rank, 0, max_tokens).batches(lens)
        assert 2 < len(whole) < 8
        resumed = _Rows(2, rank, len(whole) + 2, max_tokens).batches(lens)  # 2 batches into the next epoch
        assert resumed == whole[2:]
    shards = [_Rows(2, r, 0, max_tokens).batches(lens) for r in range(2)]
    assert sorted(i for s in shards for b in s for i in b) == list(range(30))  # every example once


@pytest.mark.parametrize("limit,accumulate,trained", [(3, 1, 3), (0.5, 1, 4), (5, 2, 5), (0.75, 2, 6), (100, 1, 8)])
def test_a_run_resumed_under_a_batch_limit_leaves_out_what_its_shortened_epoch_trained_on(limit, accumulate,
                                                                                           trained):
    """``trainer.limit_train_batches`` (an int: the first N batches of each epoch; a float: that fraction of them,
    rounded down) shortens every epoch, so the step a run resumes at falls elsewhere in its epoch. Before, a limit
    made the resumed loader start its epoch from the first batch again (8 batches an epoch here)."""
    whole = _Rows(1, 0, 0).batches()  # the epoch's order (Lightning's set_epoch draws another for each epoch)
    assert len(whole) == 8
    steps = -(-trained // accumulate)  # an epoch's steps: Lightning steps on an epoch's last batch too
    for done in range(steps):  # resumed `done` steps into epoch 1
        resumed = _Rows(1, 0, steps + done, limit=limit, accumulate=accumulate).batches()
        assert resumed == whole[done * accumulate:]


@pytest.mark.parametrize("step,limit,accumulate,position", [
    (7, 1.0, 1, 7), (7, None, 2, 14),  # an endless loader: accumulate batches a step
    (7, 3, 1, 7), (4, 5, 2, 5 + 2), (7, 5, 2, 5 + 5 + 2)])  # epochs of 5 batches: 3 steps each, the last on 1 batch
def test_an_endless_stream_goes_on_at_the_batches_the_run_trained_on(step, limit, accumulate, position):
    """Where an endless training stream (MLU's static batches) starts a pass: the batches trained so far. Before,
    the global step: a resumed run under gradient accumulation started at half the batches it had trained on."""
    rows = _Rows(1, 0, step, limit=limit, accumulate=accumulate)
    assert rows.dm.stream_position() == position


def test_group_batches_hold_whole_groups_up_to_the_size():
    """Evaluation of a ranking split: consecutive groups packed up to ``max_examples``, a larger group alone, every
    example once and in index order; so cutting the batch list anywhere (a sanity check, ``limit_val_batches``)
    cuts between groups."""
    from coda_exp.data.common.batching import GroupBatchSampler

    groups = [0] * 10 + [1] * 10 + [2] * 3 + [3] * 12 + [4] * 2 + [5] * 4
    s = GroupBatchSampler(groups, 7)
    batches = list(s)
    assert batches == [list(range(10)), list(range(10, 20)), list(range(20, 23)), list(range(23, 35)),
                       list(range(35, 41))]  # 10, 10 and 12 alone; 3 (+ 12 > 7); 2 + 4 together
    assert len(s) == 5 and s.batch_size == 7
    for batch in batches:  # no group is split between batches
        assert all(groups.count(groups[b]) == sum(groups[i] == groups[b] for i in batch) for b in batch)
    udc = [g for g in range(6) for _ in range(10)]
    assert [len(b) for b in GroupBatchSampler(udc, 25)] == [20, 20, 20]
    assert [len(b) for b in GroupBatchSampler(udc, 500)] == [60]
    scattered = [1, 0, 1, 0]  # groups need not be contiguous: first appearance, index order within a group
    assert list(GroupBatchSampler(scattered, 2)) == [[0, 2], [1, 3]]
    with pytest.raises(ValueError, match="no examples"):
        GroupBatchSampler([], 7)


@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_group_batches_under_ddp_put_each_group_on_one_rank_and_even_out(world):
    """Lightning injects its DistributedSampler; every rank gets the same number of batches; each group is
    evaluated whole on one rank (a repeat only where there are fewer groups than ranks, counted once by id)."""
    from lightning_fabric.utilities.data import _replace_dunder_methods
    from pytorch_lightning.utilities.data import _update_dataloader
    from torch.utils.data import BatchSampler

    from coda_exp.data.common.batching import GroupBatchSampler

    groups = [g for g, n in enumerate([10, 10, 3, 2, 4, 10]) for _ in range(n)]
    data = list(range(len(groups)))
    with _replace_dunder_methods(DataLoader, "dataset"), _replace_dunder_methods(BatchSampler):
        loader = DataLoader(data, batch_sampler=GroupBatchSampler(groups, 20), collate_fn=lambda rows: rows)
    shards = []
    for rank in range(world):
        new = _update_dataloader(loader, DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False))
        assert (new.batch_sampler.num_replicas, new.batch_sampler.rank) == (world, rank)
        shards.append(list(new))
    assert len({len(s) for s in shards}) == 1
    seen = [i for s in shards for b in s for i in b]
    assert set(seen) == set(data)
    for s in shards:
        for b in s:
            assert sorted(b) == [i for i in data if groups[i] in {groups[j] for j in b}]  # whole groups
    if world <= 4:  # enough groups to split batches between them: no example repeated
        assert sorted(seen) == data
