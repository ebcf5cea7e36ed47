"""The MLU generator: exact format and arithmetic, determinism, disjoint splits, sharding, resuming, files."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from coda_exp.data.common.errors import DataError
from coda_exp.data.common.tokenization import CharTokenizer
from coda_exp.data.seq2seq import mlu
from coda_exp.data.seq2seq.mlu import (
    MLU_CHARS,
    MLU_SPACE,
    MLUStream,
    mlu_example,
    mlu_examples,
    mlu_group,
    mlu_split_of,
    read_mlu_file,
    write_mlu_files,
)

SRC = re.compile(r"^[xy]=-?\d+,[xy]=-?\d+,[xy][+\-*][xy]$")
TGT = re.compile(r"^-?\d+$")


def independent_eval(src: str) -> tuple[int, int, int]:
    """Parse and evaluate without the module's helpers: returns (x, y, value)."""
    *assigns, expr = src.split(",")
    env = dict(a.split("=") for a in assigns)
    assert sorted(env) == ["x", "y"], src  # both assigned, once each
    env = {k: int(v) for k, v in env.items()}
    return env["x"], env["y"], eval(expr, {}, env)  # expr is one of x+y ... y*x (checked by SRC)


def stream(split, n, **kw):
    kw.setdefault("shard", (0, 1))
    return list(MLUStream(split, n, **kw))


def test_format_and_arithmetic_of_every_generated_example():
    rng = np.random.default_rng(0)
    pairs = mlu_examples(rng.integers(0, MLU_SPACE, 20_000), seed=3) + mlu_examples(np.arange(5000), seed=3)
    pairs += [(e["src"], e["tgt"]) for e in stream("test", 3000)]
    exprs, orders, xs = set(), set(), []
    for src, tgt in pairs:
        assert SRC.match(src) and TGT.match(tgt), (src, tgt)
        assert set(src) <= set(MLU_CHARS) and set(tgt) <= set(MLU_CHARS)
        x, y, value = independent_eval(src)
        assert -1000 <= x < 1000 and -1000 <= y < 1000
        assert int(tgt) == value, src
        exprs.add(src.split(",")[2])
        orders.add(src[0])
        xs.append(x)
    assert exprs == {"x+y", "x-y", "x*y", "y+x", "y-x", "y*x"} and orders == {"x", "y"}
    assert min(xs) == -1000 and max(xs) == 999  # the whole range is reachable
    assert abs(np.mean(xs) + 0.5) < 15  # roughly uniform over [-1000, 1000)


def test_single_example_agrees_with_vectorised_path_and_bounds():
    assert [mlu_example(i, 7) for i in (0, 1, MLU_SPACE - 1)] == mlu_examples([0, 1, MLU_SPACE - 1], 7)
    with pytest.raises(IndexError):
        mlu_example(MLU_SPACE, 7)


def test_permutation_is_injective_and_stays_in_the_space():
    pos = np.random.default_rng(1).choice(MLU_SPACE, 500_000, replace=False)
    codes = mlu.permute_positions(pos, seed=11)
    assert codes.max() < MLU_SPACE and len(np.unique(codes)) == len(pos)


def test_deterministic_by_seed():
    a, b, c = stream("train", 2000, seed=5), stream("train", 2000, seed=5), stream("train", 2000, seed=6)
    assert a == b
    assert [e["src"] for e in a] != [e["src"] for e in c]
    assert stream("test", 500, seed=5) == stream("test", 500, seed=5)


def test_train_and_held_out_never_share_a_group_and_fractions():
    train = stream("train", 200_000, shuffle=False)
    held = stream("validation", 10_000) + stream("test", 10_000)
    train_groups = {mlu_group(e["src"]) for e in train}
    assert not train_groups & {mlu_group(e["src"]) for e in held}
    assert len({e["src"] for e in train + held}) == len(train) + len(held)  # no example repeats
    # the split of an example is the same function everywhere (numpy stream == Python helper)
    for e in train[:3000]:
        assert mlu_split_of(e["src"]) == "train"
    for split, part in (("validation", held[:2000]), ("test", held[10_000:12_000])):
        assert all(mlu_split_of(e["src"]) == split for e in part)
    # the held-out fraction over the raw positions is 1/11, split evenly between validation and test
    xi, yi, expr, _ = mlu._decode(mlu.permute_positions(np.arange(400_000), mlu.MLU_DEFAULT_SEED))
    codes = mlu._split_codes(xi, yi, expr, mlu.MLU_SPLIT_KEY)
    assert abs((codes > 0).mean() - 1 / 11) < 0.004
    assert abs((codes == 1).mean() - 1 / 22) < 0.003 and abs((codes == 2).mean() - 1 / 22) < 0.003


def test_rewrites_of_an_example_share_its_split():
    for src, _ in mlu_examples(np.arange(3000), seed=2):
        x, y, expr, _ = mlu.parse_mlu(src)
        rewrites = [f"x={x},y={y},{expr}", f"y={y},x={x},{expr}"]
        if expr[1] in "+*":
            swapped = expr[::-1]
            rewrites += [f"x={x},y={y},{swapped}", f"y={y},x={x},{swapped}"]
        assert len({mlu_split_of(r) for r in rewrites}) == 1


@pytest.mark.parametrize("shuffle", [False, True])
def test_rank_and_worker_shards_are_disjoint_and_cover(monkeypatch, shuffle):
    n, world, workers = 5003, 3, 2
    full = stream("train", n, shuffle=shuffle, chunk_size=512)
    parts = []
    for rank in range(world):
        ds = MLUStream("train", n, shard=(rank, world), shuffle=shuffle, chunk_size=512)
        per_rank = []
        for k in range(workers):
            monkeypatch.setattr(mlu, "get_worker_info", lambda k=k: SimpleNamespace(id=k, num_workers=workers))
            per_rank += list(ds)
        assert len(per_rank) == len(ds) == n // world  # every rank the same number
        assert all(e["index"] % world == rank for e in per_rank)
        parts += per_rank
    monkeypatch.undo()
    assert sorted(e["index"] for e in parts) == list(range(n // world * world))  # disjoint and covering
    by_index = {e["index"]: e for e in full}
    assert all(by_index[e["index"]] == e for e in parts)


def test_real_dataloader_workers_split_the_stream():
    ds = MLUStream("train", 3000, shard=(0, 1), shuffle=False, chunk_size=256)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    got = sorted(e["index"] for e in loader)
    assert got == list(range(3000))


def test_resume_from_offset_and_epochs():
    full = stream("train", 4000, shuffle=True, epoch=2, chunk_size=300)
    assert stream("train", 4000, shuffle=True, epoch=2, chunk_size=300, start=1234) == full[1234:]
    assert [e["index"] for e in full] == list(range(4000))
    other = MLUStream("train", 4000, shard=(0, 1), shuffle=True, chunk_size=300)
    other.set_epoch(3)
    other = list(other)
    assert [e["src"] for e in other] != [e["src"] for e in full]
    assert sorted(e["position"] for e in other) == sorted(e["position"] for e in full)  # same set each epoch
    plain = stream("train", 4000, shuffle=False)
    assert sorted(e["position"] for e in plain) == sorted(e["position"] for e in full)
    assert [e["position"] for e in plain] == sorted(e["position"] for e in plain)  # position order
    assert all(mlu_example(e["position"], mlu.MLU_DEFAULT_SEED) == (e["src"], e["tgt"]) for e in plain[:50])
    sharded = MLUStream("train", 4000, shard=(1, 2), start=1000, shuffle=False)
    assert [e["index"] for e in sharded] == list(range(1001, 4000, 2)) and len(sharded) == 1500
    with pytest.raises(ValueError, match="multiple of the world size"):
        list(MLUStream("train", 100, shard=(0, 2), start=3))


def test_write_and_read_files(tmp_path):
    paths = write_mlu_files(tmp_path, num_train=300, num_test=40, seed=9, num_dev=20)
    assert {p.name for p in paths.values()} == {"train.txt", "dev.txt", "test.txt"}
    for split, n in (("train", 300), ("validation", 20), ("test", 40)):
        rows = list(read_mlu_file(paths[split]))
        want = stream(split, n, seed=9, shuffle=False)
        assert [(r["src"], r["tgt"]) for r in rows] == [(e["src"], e["tgt"]) for e in want]
    assert paths["train"].read_text().splitlines()[0].count(":") == 1


def test_files_whose_test_set_repeats_the_training_set_or_leave_the_range_are_a_warning(tmp_path):
    """A test.txt copied from train.txt, and values outside [-1000, 1000), were read without a word."""
    from coda_exp.data.seq2seq.datamodule import MLUDataModule

    def built():
        dm = MLUDataModule(num_train=30, num_validation=4, num_test=4, dir=str(tmp_path), batch_size=4,
                           cache_dir=str(tmp_path / "cache"), data_seed=9)
        dm.setup("fit")
        return dm

    paths = write_mlu_files(tmp_path, num_train=30, num_test=4, seed=9, num_dev=4)
    assert built().warnings == []  # make-mlu's files: disjoint splits, the paper's range, the sizes configured
    paths["test"].write_text(paths["train"].read_text())
    dev = paths["validation"].read_text().splitlines()
    paths["validation"].write_text("\n".join(dev[:-1] + ["x=5000,y=1,x+y:5001"]) + "\n")
    warnings = built().warnings
    assert len(warnings) == 3 and "MLU: 4 of 4 inputs of test.txt are in train.txt too" in warnings[0]
    assert "MLU: 1 inputs of dev.txt have values outside [-1000, 1000) (e.g. x=5000,y=1,x+y)" in warnings[1]
    assert "dev.txt in" in warnings[2] and "is not data_seed 9's generated data" in warnings[2]


def _files_module(directory, cache, **sizes):
    from coda_exp.data.seq2seq.datamodule import MLUDataModule

    dm = MLUDataModule(**{"num_train": 30, "num_validation": 3, "num_test": 4, **sizes}, dir=str(directory),
                       batch_size=4, cache_dir=str(cache))
    dm.setup("fit")
    return dm


def test_mlu_files_of_another_size_or_other_examples_say_so_in_the_scale(tmp_path):
    """MLU files with 30 training pairs at a scale configured for 10.9M had the generated run's scale label, so
    tables pooled the two: the label now says what was read (``data.num_train=30``: the examples a generated run
    given that override reads), and files of other examples are named by their content."""
    from coda_exp.fingerprint import amend_scale

    write_mlu_files(tmp_path, num_train=30, num_test=4, num_dev=3)  # data_seed 1234, the default
    assert _files_module(tmp_path, tmp_path / "cache").scale_notes() == []  # the sizes configured: the scale's own data
    dm = _files_module(tmp_path, tmp_path / "cache", num_train=10_909_091, num_test=2000)
    assert dm.scale_notes() == ["data.num_train=30", "data.num_test=4"]
    assert any("train.txt in" in w and "holds 30 examples, fewer than the configured 10909091" in w
               for w in dm.warnings)
    assert amend_scale("cpu", dm.scale_notes()) == "cpu (data.num_train=30, data.num_test=4)"
    assert _files_module(tmp_path, tmp_path / "cache", num_train=20).scale_notes() == []  # the first 20, as generated

    other = tmp_path / "other"
    write_mlu_files(other, num_train=30, num_test=4, seed=9, num_dev=3)
    notes = _files_module(other, tmp_path / "cache").scale_notes()
    assert len(notes) == 1 and re.fullmatch(r"data\.files=[0-9a-f]{10}", notes[0])
    assert _files_module(other, tmp_path / "cache").scale_notes() == notes  # the same files: the same name
    lines = (other / "train.txt").read_text().splitlines()
    (other / "train.txt").write_text("\n".join(lines[:-1]) + "\n")  # one pair fewer: other data, another name
    assert _files_module(other, tmp_path / "cache").scale_notes() not in ([], notes)


def test_the_fixture_files_add_nothing_to_the_scale(tmp_path):
    from coda_exp.environment import fixtures_dir

    assert _files_module(fixtures_dir() / "mlu", tmp_path, num_train=10_909_091).scale_notes() == []


def test_a_failed_write_leaves_the_old_set_whole(tmp_path, monkeypatch):
    paths = write_mlu_files(tmp_path, num_train=30, num_test=4, seed=9, num_dev=2)
    before = {p: p.read_bytes() for p in paths.values()}
    with pytest.raises(DataError, match="asked for 999999999 test examples; the whole space holds 48000000"):
        write_mlu_files(tmp_path, num_train=20, num_test=999_999_999, seed=7, num_dev=3)
    assert {p: p.read_bytes() for p in paths.values()} == before  # checked before anything was written

    real_iter = mlu.MLUStream.__iter__

    def failing(self):
        if self.split == "test":
            raise OSError(28, "No space left on device")
        yield from real_iter(self)

    monkeypatch.setattr(mlu.MLUStream, "__iter__", failing)
    with pytest.raises(OSError):
        write_mlu_files(tmp_path, num_train=20, num_test=3, seed=7, num_dev=3)
    assert {p: p.read_bytes() for p in paths.values()} == before  # train.txt and dev.txt were not replaced
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev.txt", "test.txt", "train.txt"]  # no temporary left


@pytest.mark.parametrize("line, message", [
    ("x=1,y=2,x+y", "one 'input:target'"),
    ("x=1,x=2,x+y:3", "assigned once"),
    ("x=1,y=2,x/y:0", "not an MLU input"),
    ("x=1,y=2,x+y:three", "not an integer"),
    ("x=1,y=2,x+y:4", "wrong"),
    ("x=١,y=2,x+y:3", "not an MLU input"),  # an Arabic-Indic one: a digit to \\d and int(), not to the format
    ("x=1,y=2,x+y:٣", "not an integer"),
])
def test_reader_errors_name_file_and_line(tmp_path, line, message):
    path = tmp_path / "bad.txt"
    path.write_text("x = 85, y = -523, x * y : -44455\n\n" + line + "\n")
    with pytest.raises(DataError, match=rf"bad\.txt:3: .*{re.escape(message)}"):
        list(read_mlu_file(path))
    with pytest.raises(DataError, match="make_mlu.py"):
        list(read_mlu_file(tmp_path / "missing.txt"))


def test_char_tokenizer():
    tok = CharTokenizer(MLU_CHARS)
    assert set(MLU_CHARS) == set("0123456789-+*=,xy") and len(tok) == 4 + 17
    src = "y=691,x=-999,y*x"
    ids = tok.encode(src, bos=True, eos=True)
    assert ids[0] == 1 and ids[-1] == 2 and min(ids[1:-1]) >= 4
    assert tok.decode(ids) == src and tok.decode([0, 1] + ids[1:-1] + [2, 9, 9]) == src
    assert tok.encode("x?") == [tok.stoi["x"], 3] and tok.decode(tok.encode("x?")) == "x\ufffd"
    batch = ["x=1,y=2,x+y", "-690309", ""]
    padded = tok.encode_padded(batch, bos=True, eos=True)
    for row, text in zip(padded.tolist(), batch):
        want = tok.encode(text, bos=True, eos=True)
        assert row == want + [0] * (padded.shape[1] - len(want))
