import json

import pytest
import torch

from coda_exp.data import DataError, PairDataModule, Vocab, get_reader, tokenize
from coda_exp.data.common.embeddings import load_pretrained
from tests import FIXTURES


def test_snli_drops_dash_and_maps_labels(tmp_path, dm):
    rows = [json.loads(line) for line in (FIXTURES / "snli" / "snli_1.0_train.jsonl").read_text().splitlines()]
    kept = [r for r in rows if r["gold_label"] != "-"]
    assert len(kept) < len(rows)  # the fixture has pairs without a gold label
    m = dm(tmp_path)
    train = m.splits["train"]
    assert len(train) == len(kept)
    names = get_reader("snli").label_names
    assert [names[y] for y in train["label"]] == [r["gold_label"] for r in kept]
    assert train["text_a"][0] == kept[0]["sentence1"]
    assert m.num_classes == 3


def test_wikiqa_groups_and_answered_filter(tmp_path, dm):
    m = dm(tmp_path, "wikiqa")
    val = m.splits["validation"]
    # every evaluated question has a correct answer; the unanswered one was dropped (standard protocol)
    for g in set(val["group"]):
        assert any(y == 1 for gg, y in zip(val["group"], val["label"]) if gg == g)
    assert m.stats["validation_groups_dropped_no_positive"] == 1
    assert m.stats["train_examples"] == 45  # training keeps every candidate
    batch = next(iter(m.val_dataloader()))
    assert batch["group"].tolist() == sorted(batch["group"].tolist())
    assert m.stats["validation_questions"] == m.stats["validation_questions_scored"] == len(set(val["group"]))
    m2 = dm(tmp_path / "b", "wikiqa", eval_protocol="raw")
    assert len(m2.splits["validation"]) > len(val)
    # raw keeps the unanswered question, which MAP and MRR skip: the record says how many they average over
    assert m2.stats["validation_questions"] == m.stats["validation_questions"] + 1
    assert m2.stats["validation_questions_scored"] == m.stats["validation_questions"]


@pytest.mark.parametrize("name", ["udc", "wikiqa", "trecqa"])
def test_ranking_evaluation_batches_hold_whole_groups(tmp_path, dm, name):
    """An eval batch size that cuts groups (UDC's groups of 10 in batches of 7): every evaluation batch holds whole
    groups, so the first two batches (Lightning's sanity check, limit_val_batches=2) score complete groups only."""
    from coda_exp.metrics import ranking_scores

    m = dm(tmp_path, name, eval_batch_size=7)
    for split, loader in (("validation", m.val_dataloader()), ("test", m.test_dataloader())):
        sizes = torch.bincount(torch.tensor(m.splits[split]["group_idx"]))
        batches = list(loader)
        assert sorted(i for b in batches for i in b["index"].tolist()) == list(range(len(m.splits[split])))
        for b in batches:
            groups, counts = torch.unique(b["group"], return_counts=True)
            assert counts.tolist() == sizes[groups].tolist()  # each group in the batch is complete
            assert len(b["group"]) <= 7 or len(groups) == 1
        if name == "udc":
            first = {k: torch.cat([b[k] for b in batches[:2]]) for k in ("label", "group", "index")}
            ranking_scores(torch.zeros(len(first["label"])), first["label"], first["group"], ["r10@1"],
                           first["index"])  # no "fewer than 10" error


def test_batches_are_padded_with_masks(tmp_path, dm):
    m = dm(tmp_path, batch_size=5)
    b = next(iter(m.train_dataloader()))
    assert b["a_ids"].shape[0] == 5
    assert torch.equal(b["a_mask"], b["a_ids"] != 0)
    assert (b["a_mask"].sum(1) > 0).all()
    lengths = b["b_mask"].sum(1)
    assert lengths.max() == b["b_ids"].shape[1]  # padded to the longest in the batch, no more


def test_truncation_and_max_examples(tmp_path, dm):
    m = dm(tmp_path, max_len_a=3, max_train_examples=10)
    assert len(m.splits["train"]) == 10
    assert max(len(x) for x in m.splits["train"]["a_ids"]) == 3


def test_vocab_is_built_on_train_and_cached(tmp_path, dm):
    m = dm(tmp_path)
    cached = list((tmp_path / "cache" / "snli").glob("vocab-*.json"))
    assert len(cached) == 1
    assert Vocab.load(cached[0]).itos == m.vocab.itos
    train_tokens = {t for c in ("text_a", "text_b") for s in m.splits["train"][c] for t in tokenize(s)}
    assert set(m.vocab.itos[4:]) == train_tokens


def test_a_damaged_data_cache_is_rebuilt_with_a_warning_naming_it(tmp_path, dm):
    """Cut-short arrow files in the datasets cache (a run stopped while writing them) were pyarrow's traceback, then
    a message saying which folder to delete; the cache is derived data, so each damaged split cache is deleted and
    built again from the data files, with a warning naming it, and the run goes on with the same examples."""
    first = dm(tmp_path)
    stats, texts = dict(first.stats), list(first.splits["test"]["text_b"])  # (its files are the ones cut short)
    arrows = sorted((tmp_path / "cache").rglob("*.arrow"))
    assert arrows
    for path in arrows:
        path.write_bytes(path.read_bytes()[:100])
    again = dm(tmp_path)
    rebuilt = [w for w in again.warnings if "could not be read" in w]
    folders = sorted({p.relative_to(tmp_path / "cache" / "datasets" / "generator").parts[0] for p in arrows})
    assert len(rebuilt) == len(folders) == 3  # one per split
    for folder, warning in zip(folders, sorted(rebuilt)):
        assert warning.startswith(f"the data cache {tmp_path / 'cache' / 'datasets' / 'generator' / folder} could "
                                  "not be read (") and "deleted and built again from the data files" in warning
    assert again.stats == stats and list(again.splits["test"]["text_b"]) == texts
    assert [w for w in dm(tmp_path).warnings if "could not be read" in w] == []  # rebuilt: read as it is


@pytest.mark.parametrize("damage", ["generator-train.arrow", "cache-*.arrow"])
def test_the_probes_half_cut_arrow_file_is_rebuilt(tmp_path, dm, damage):
    """The probe's case: a split's generator-train.arrow (or a tokenised cache-*.arrow beside it) cut to half, where
    pyarrow raises a plain OSError ("Expected to be able to read 2128 bytes for message body, got 628"), not an
    ArrowException: it was not recognised as the cache's, and the run ended in that traceback."""
    stats = dict(dm(tmp_path).stats)
    path = min((tmp_path / "cache").rglob(damage))
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])
    again = dm(tmp_path)
    rebuilt = [w for w in again.warnings if "could not be read" in w]
    assert len(rebuilt) == 1 and rebuilt[0].startswith(
        f"the data cache {path.parent.parent} could not be read (OSError: Expected to be able to read ")
    assert again.stats == stats


def test_a_damaged_data_cache_that_cannot_be_deleted_is_one_message_naming_it(tmp_path, dm, monkeypatch):
    """Where the damaged folder cannot be deleted (another user's cache), the message names it, to delete."""
    from coda_exp.data.common import base

    dm(tmp_path)
    for path in sorted((tmp_path / "cache").rglob("*.arrow")):
        path.write_bytes(path.read_bytes()[:100])

    def refuse(path, *a, **k):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(base.shutil, "rmtree", refuse)
    generator = tmp_path / "cache" / "datasets" / "generator"
    with pytest.raises(DataError, match=rf"the data cache under {generator}/default-fingerprint=\w+ cannot be read "
                                        r"\((Arrow|OS).*delete that folder and run again"):
        dm(tmp_path)


def test_a_corrupt_dataset_info_in_the_data_cache_is_rebuilt(tmp_path, dm):
    """A cut-short dataset_info.json in the datasets cache was a JSONDecodeError's traceback."""
    first = dm(tmp_path)
    infos = sorted((tmp_path / "cache").rglob("dataset_info.json"))
    assert infos
    for path in infos:
        path.write_text("{bad")
    again = dm(tmp_path)
    assert len([w for w in again.warnings if "could not be read (JSONDecodeError" in w]) == len(infos)
    assert again.stats == first.stats


def test_a_full_disk_while_the_cache_is_written_is_one_message_naming_the_cache(tmp_path, dm, monkeypatch):
    """The datasets library's write to a full disk: an OSError with no file name (a full disk elsewhere says
    which file; here the cache folder and the key that moves it)."""
    import errno

    import datasets

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(datasets.Dataset, "from_generator", full)
    with pytest.raises(DataError) as err:
        dm(tmp_path)
    assert str(err.value) == (f"No space left on device writing the data cache under {tmp_path / 'cache'}: "
                              "free space on that disk or put the cache elsewhere (paths.cache_dir=...), then run "
                              "again")


def test_cached_vocabulary_of_the_old_special_ids_is_refused(tmp_path):
    # a v1 cache (pad 0, unk 1) must not be read as today's vocabulary (pad 0, bos 1, eos 2, unk 3)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(["<pad>", "<unk>", "the"]), encoding="utf-8")
    with pytest.raises(DataError, match="cannot be verified; delete it and run again, it is rebuilt"):
        Vocab.load(path)
    path.write_text(json.dumps({"tokens": ["<pad>", "<unk>", "the"], "size": 3}), encoding="utf-8")
    with pytest.raises(DataError, match="not a coda-exp vocabulary .*; delete it and run again, it is rebuilt"):
        Vocab.load(path)


def test_vocab_order_and_tokenizer():
    v = Vocab.build([["b", "a"], ["a", "c"], ["c", "a"]], min_freq=2)
    assert v.itos == ["<pad>", "<s>", "</s>", "<unk>", "a", "c"]
    assert v.lookup(["c", "zzz"]) == [5, 3] and v.encode("c zzz") == [5, 3]
    assert Vocab.build([["b", "a"], ["a", "c"]], max_size=5).itos[4:] == ["a"]  # the specials count
    assert tokenize("Don't stop-now, OK?") == ["don't", "stop-now", ",", "ok", "?"]


def test_missing_directory_names_expected_files(tmp_path, dm):
    with pytest.raises(DataError) as e:
        dm(tmp_path, src=tmp_path / "nowhere")
    msg = str(e.value)
    assert "snli_1.0_train.jsonl" in msg and "snli_1.0_test.jsonl" in msg and "nlp.stanford.edu" in msg


def test_missing_one_file_is_named(tmp_path, dm, copy_fixture):
    d = copy_fixture(tmp_path, "wikiqa")
    (d / "WikiQA-dev.tsv").unlink()
    with pytest.raises(DataError, match="lacks WikiQA-dev.tsv"):
        dm(tmp_path, "wikiqa", src=d)


def test_malformed_json_line_names_file_and_line(tmp_path, dm, copy_fixture):
    d = copy_fixture(tmp_path, "snli")
    p = d / "snli_1.0_dev.jsonl"
    lines = p.read_text().splitlines()
    lines[4] = lines[4][:30]
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"snli_1.0_dev.jsonl:5: malformed JSON"):
        dm(tmp_path, src=d)


def test_malformed_tsv_row_names_file_and_line(tmp_path, dm, copy_fixture):
    d = copy_fixture(tmp_path, "wikiqa")
    p = d / "WikiQA-train.tsv"
    lines = p.read_text().splitlines()
    lines[3] = "\t".join(lines[3].split("\t")[:4])
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"WikiQA-train.tsv:4: malformed row with 4"):
        dm(tmp_path, "wikiqa", src=d)


def test_unknown_label_is_named(tmp_path, dm, copy_fixture):
    d = copy_fixture(tmp_path, "snli")
    p = d / "snli_1.0_test.jsonl"
    rows = [json.loads(line) for line in p.read_text().splitlines()]
    rows[2]["gold_label"] = "maybe"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match=r"snli_1.0_test.jsonl:3: unknown label 'maybe'.*entailment"):
        dm(tmp_path, src=d)


def test_unknown_dataset_and_offline_hub(tmp_path):
    with pytest.raises(DataError, match="unknown dataset 'nope'.*snli.*imported in its family's"):
        PairDataModule("nope")  # a new reader's module not imported: the message says where it must be
    with pytest.raises(DataError, match=r"did you mean data.dataset=scitail\?"):
        PairDataModule("scitale")
    m = PairDataModule("snli", dir=None, cache_dir=str(tmp_path))
    with pytest.raises(DataError, match="no data directory was given.*data.dir=DIR") as err:
        m.setup()
    # the folder read without data.dir (named as the task, not the reader: task=sst reads data/sst/ with sst2's
    # reader), which scripts/check_sweep_data.py names too
    assert "holds no folder named as the task, e.g. data/<task>/" in str(err.value)
    assert "into that folder, <paths.data_dir>/<task>/ (read without data.dir)" in str(err.value)
    assert "data/snli/" not in str(err.value)


def test_pretrained_embeddings_glove_and_word2vec(tmp_path):
    vocab = Vocab(["the", "cat", "sat", "mat"])
    glove = tmp_path / "glove.txt"
    glove.write_text("the 0.1 0.2 0.3\nCat 1 2 3\n. . . 9 9 9\nsat 4 5 6\n")
    matrix, found = load_pretrained(glove, vocab)
    assert matrix.shape == (8, 3) and found == 3
    assert torch.equal(matrix[vocab.stoi["cat"]], torch.tensor([1.0, 2.0, 3.0]))
    assert torch.equal(matrix[0], torch.zeros(3))  # padding
    assert not torch.equal(matrix[vocab.stoi["mat"]], torch.zeros(3))  # OOV: random, not zero
    w2v = tmp_path / "w2v.txt"
    w2v.write_text("2 3\nthe 0.1 0.2 0.3\nmat 7 8 9\n")
    matrix, found = load_pretrained(w2v, vocab)
    assert found == 2 and torch.equal(matrix[vocab.stoi["mat"]], torch.tensor([7.0, 8.0, 9.0]))
    bad = tmp_path / "bad.txt"
    bad.write_text("the 0.1 0.2 0.3\ncat 1 x 3\n")
    with pytest.raises(DataError, match=r"bad.txt:2: component 2 of the vector of 'cat' is 'x', not a number "
                                        r"\(expected 3 numbers after the word; data.embeddings.path\)"):
        load_pretrained(bad, vocab)
    with pytest.raises(DataError, match="does not exist"):
        load_pretrained(tmp_path / "none.txt", vocab)


def test_a_vectors_file_that_covers_little_of_the_vocabulary_is_a_warning(tmp_path, caplog):
    """A wrong file (another language, another casing) would train on random vectors with one INFO line, which a
    quiet run does not show."""
    vocab = Vocab(["the", "cat", "sat", "mat"])  # and the special tokens, which no file has
    vectors = tmp_path / "vectors.txt"
    vectors.write_text("the 0.1 0.2\ncat 1 2\n")
    load_pretrained(vectors, vocab)  # 2 of 4: half
    assert "have a vector for only" not in caplog.text
    vectors.write_text("the 0.1 0.2\nCat 1 2\n")
    load_pretrained(vectors, vocab, lowercase=False)
    (warning,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert warning.getMessage() == (f"embeddings {vectors} have a vector for only 1 of the 4 vocabulary words "
                                    "(25.0%); the others are random. Is it the right file (its language, its casing: "
                                    "data.lowercase=False)?")


def test_datamodule_loads_embeddings_and_records_missing_ones(tmp_path, dm):
    m = dm(tmp_path)
    assert m.embedding_matrix is None and any("random" in w for w in m.warnings)
    vec = tmp_path / "vec.txt"
    vec.write_text("man 1 2\nwoman 3 4\n")
    m2 = dm(tmp_path / "e", embeddings={"path": str(vec)})
    assert m2.embedding_matrix.shape == (len(m2.vocab), 2) and m2.stats["embeddings_found"] == 2


def test_hub_path_maps_the_hub_schema(tmp_path, monkeypatch):
    import datasets

    hub = {
        ("snli", "train"): {"premise": ["A b .", "C d ."], "hypothesis": ["A .", "C ."], "label": [0, -1]},
        ("snli", "validation"): {"premise": ["E f ."], "hypothesis": ["E ."], "label": [2]},
        ("snli", "test"): {"premise": ["G h ."], "hypothesis": ["G ."], "label": [1]},
    }
    calls = []

    def fake_load_dataset(name, split):
        calls.append((name, split))
        return datasets.Dataset.from_dict(hub[(name, split)])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    m = PairDataModule("snli", dir=None, cache_dir=str(tmp_path))
    m.setup()
    assert ("snli", "train") in calls and len(m.splits["train"]) == 1  # the hub's -1 ("no gold label") dropped
    assert m.splits["validation"]["label"][0] == 2


def test_pretrained_vectors_extend_the_vocabulary_with_evaluation_words(tmp_path, dm):
    base = dm(tmp_path / "base")
    train_words = set(base.vocab.stoi)
    test_texts = list(base.splits["test"]["text_a"]) + list(base.splits["test"]["text_b"])
    test_only = sorted({w for t in test_texts for w in tokenize(t, True)} - train_words)
    assert test_only, "the SNLI fixture's test split should have words the training split lacks"
    word = test_only[0]
    vec = tmp_path / "vec.txt"
    vec.write_text(f"man 1 2\n{word} 5 6\nzzz-in-no-split 7 8\n")
    m = dm(tmp_path / "ext", embeddings={"path": str(vec)})
    wid = m.vocab.stoi[word]
    assert wid >= len(base.vocab) and "zzz-in-no-split" not in m.vocab.stoi  # appended; only evaluation words
    assert torch.equal(m.embedding_matrix[wid], torch.tensor([5.0, 6.0]))
    assert m.stats["vocab_added_from_embeddings"] == 1
    assert any(wid in ids for ids in list(m.splits["test"]["a_ids"]) + list(m.splits["test"]["b_ids"]))
    assert all(m.vocab.stoi[w] == i for i, w in enumerate(base.vocab.itos))  # training ids unchanged
    off = dm(tmp_path / "off", embeddings={"path": str(vec), "extend_vocab": False})
    assert word not in off.vocab.stoi and len(off.vocab) == len(base.vocab)


def test_vocab_extend_and_load_pretrained_extra_words(tmp_path):
    vocab = Vocab(["the", "cat"])
    vocab.extend(["dog", "the", "dog"])
    assert vocab.itos == ["<pad>", "<s>", "</s>", "<unk>", "the", "cat", "dog"] and vocab.stoi["dog"] == 6
    vec = tmp_path / "v.txt"
    vec.write_text("Emu 1 1\nthe 2 2\nyak 3 3\nemu 9 9\n")
    matrix, found = load_pretrained(vec, vocab, extra_words={"emu", "gnu"})
    assert vocab.itos[-1] == "emu" and "gnu" not in vocab.stoi  # the first casing of a lowercased word wins
    assert found == 2 and torch.equal(matrix[vocab.stoi["emu"]], torch.tensor([1.0, 1.0]))


def test_capped_splits_are_the_same_subset_for_every_run_seed(tmp_path, dm):
    a = dm(tmp_path / "a", seed=1, max_train_examples=5, max_eval_examples=3)
    b = dm(tmp_path / "b", seed=2, max_train_examples=5, max_eval_examples=3)
    c = dm(tmp_path / "c", seed=1, max_train_examples=5, max_eval_examples=3, subset_seed=7)
    texts = [list(m.splits[s]["text_a"]) for m in (a, b, c) for s in ("train", "test")]
    assert texts[0] == texts[2] and texts[1] == texts[3]  # seeds 1 and 2: the same subsets
    assert len(texts[0]) == 5 and texts[0] != texts[4]  # another subset_seed: another subset


def test_no_random_vectors_warning_where_the_weights_come_from_a_checkpoint(tmp_path, dm):
    """Training without data.embeddings.path warns its vectors are randomly initialised; an evaluation or prediction
    (the checkpoint's tokenizers restored, or ``trained_weights``: an older checkpoint's rebuilt from the training
    files) takes the trained vectors with the weights, and said the same, which misled."""
    said = "no pretrained embeddings (data.embeddings.path is null)"
    trained = dm(tmp_path)
    assert any(said in w for w in trained.warnings)
    restored = PairDataModule("snli", dir=str(FIXTURES / "snli"), cache_dir=str(tmp_path / "cache"))
    restored.restore_encoders(trained.encoder_state())
    restored.setup()
    rebuilt = PairDataModule("snli", dir=str(FIXTURES / "snli"), cache_dir=str(tmp_path / "cache"))
    rebuilt.trained_weights = True
    rebuilt.setup()
    assert rebuilt.vocab.itos == trained.vocab.itos
    assert not [w for m in (restored, rebuilt) for w in m.warnings if said in w]
