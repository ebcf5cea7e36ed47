"""Static-shape batches (``data.static_shapes``, the fast path): the plain loader's examples, one shape, resumable."""

from __future__ import annotations

import pytest
import torch

from coda_exp.data.common.errors import DataError
from coda_exp.data.common.vocab import BOS_ID, EOS_ID, PAD_ID
from coda_exp.data.seq2seq.datamodule import MLUDataModule, collate_seq2seq
from coda_exp.data.seq2seq.mlu import MLU_HIGH, MLU_LOW, MLU_MAX_SRC_CHARS, MLU_MAX_TGT_CHARS, mlu_answer
from tests import FIXTURES


def mlu_module(static: bool, tmp_path, **kw) -> MLUDataModule:
    args = {"num_train": 50, "num_validation": 20, "num_test": 30, "batch_size": 8, "eval_batch_size": 12,
            "seed": 3, "cache_dir": str(tmp_path)}
    dm = MLUDataModule(static_shapes=static, **{**args, **kw})
    dm.setup("fit")
    return dm


def unpad(batch: dict, i: int) -> tuple[list[int], list[int], list[int]]:
    return tuple(batch[k][i][batch[m][i]].tolist() for k, m in
                 (("src_ids", "src_mask"), ("tgt_in", "tgt_mask"), ("tgt_out", "tgt_mask")))


def rows(batches) -> list[tuple]:
    return [(int(b["index"][i]), *unpad(b, i)) for b in batches for i in range(len(b["index"]))]


def test_the_collated_masks_follow_the_raw_lengths():
    raw = [{"src": [5, 6, 7], "tgt": [8], "index": 0}, {"src": [9], "tgt": [10, 11, 12], "index": 1}]
    for widths in (None, (6, 5)):
        b = collate_seq2seq(raw, widths)
        for i, r in enumerate(raw):
            assert b["src_mask"][i].tolist() == [j < len(r["src"]) for j in range(b["src_ids"].shape[1])]
            assert b["tgt_mask"][i].tolist() == [j < len(r["tgt"]) + 1 for j in range(b["tgt_out"].shape[1])]
            assert b["tgt_in"][i, : len(r["tgt"]) + 1].tolist() == [BOS_ID, *r["tgt"]]
            assert b["tgt_out"][i, : len(r["tgt"]) + 1].tolist() == [*r["tgt"], EOS_ID]
        assert widths is None or (b["src_ids"].shape[1], b["tgt_in"].shape[1]) == widths
    with pytest.raises(DataError, match="longer than the static width 2"):
        collate_seq2seq(raw, (2, 5))


def test_mlu_static_widths_hold_the_longest_pair_of_the_space():
    assert (MLU_MAX_SRC_CHARS, MLU_MAX_TGT_CHARS) == (19, 7)
    extremes = [f"x={a},y={b},{e}" for a in (MLU_LOW, MLU_HIGH - 1) for b in (MLU_LOW, MLU_HIGH - 1)
                for e in ("x*y", "y-x", "x+y")]
    assert max(len(s) for s in extremes) == MLU_MAX_SRC_CHARS
    assert max(len(str(mlu_answer(s))) for s in extremes) == MLU_MAX_TGT_CHARS


@pytest.mark.parametrize("split", ["train", "validation", "test"])
def test_mlu_static_batches_hold_the_plain_loaders_examples_in_one_shape(tmp_path, split):
    plain = list(mlu_module(False, tmp_path).split_loader(split))
    loader = mlu_module(True, tmp_path).split_loader(split)
    if split == "train":  # an endless stream: one epoch's full batches (the partial last one is dropped)
        assert len(plain[-1]["index"]) < 8
        plain = plain[:-1]
        static = take(loader, len(plain))
    else:
        static = list(loader)
    assert rows(static) == rows(plain)
    full = [b for b in static if len(b["index"]) == len(static[0]["index"])]
    assert {(b["src_ids"].shape[1], b["tgt_in"].shape[1], b["tgt_out"].shape[1]) for b in full} == {(19, 8, 8)}
    assert all(b["src_mask"].dtype == torch.bool and not b["src_ids"][~b["src_mask"]].any() for b in static)


def take(loader, n: int) -> list[dict]:
    it = iter(loader)
    return [next(it) for _ in range(n)]


class _Trainer:
    def __init__(self, step: int):
        self.global_step = step


def test_mlu_training_stream_goes_on_across_epochs_and_resumes_at_the_global_step(tmp_path):
    dm = mlu_module(True, tmp_path)
    per_epoch = 50 // 8  # 6 full batches, the last 2 examples dropped
    whole = rows(take(dm.split_loader("train"), 2 * per_epoch + 2))
    first, second = whole[: per_epoch * 8], whole[per_epoch * 8: 2 * per_epoch * 8]
    assert sorted(r[0] for r in first) == sorted(r[0] for r in second)  # the same examples...
    assert first != second  # ...in another order in epoch 2
    for step in (1, per_epoch, per_epoch + 3):
        dm.trainer = _Trainer(step)
        assert rows(take(dm.split_loader("train"), 2)) == whole[step * 8: (step + 2) * 8]


def test_static_map_style_batches_pad_to_the_splits_longest_and_drop_the_partial_batch(tmp_path):
    dm = MLUDataModule(num_train=10, num_validation=5, num_test=5, dir=str(FIXTURES / "mlu"), batch_size=4,
                       static_shapes=True, cache_dir=str(tmp_path))
    dm.setup("fit")
    train = list(dm.split_loader("train"))
    assert len(train) == 10 // 4 and {b["src_ids"].shape for b in train} == {(4, 19)}
    plain = MLUDataModule(num_train=10, num_validation=5, num_test=5, dir=str(FIXTURES / "mlu"), batch_size=4,
                          cache_dir=str(tmp_path))
    plain.setup("fit")
    assert rows(train) == rows(list(plain.split_loader("train")))[:8]
    assert PAD_ID == 0


def test_static_shapes_refuse_token_batching():
    with pytest.raises(ValueError, match="data.max_tokens=null"):
        MLUDataModule(num_train=10, num_validation=5, num_test=5, static_shapes=True, max_tokens=64)
