"""Word-level text classification (tokenizer=word) on the Yelp fixture: vocabulary, pretrained vectors, padding,
truncation to max_len, short reviews dropped (min_words)."""

import pytest
import torch

from coda_exp.data.common.errors import DataError
from coda_exp.data.common.vocab import PAD_ID, SPECIAL_TOKENS, UNK_ID, tokenize
from coda_exp.data.text.datamodule import TextClassificationDataModule
from tests import FIXTURES

YELP = FIXTURES / "yelp"


def make_dm(cache, **kw):
    kw = {"tokenizer": "word", "max_len": 100, "append_eos": False, "batch_size": 8, **kw}
    dm = TextClassificationDataModule("yelp", dir=str(YELP), cache_dir=str(cache), **kw)
    dm.setup()
    return dm


def test_word_vocabulary_from_training_texts(tmp_path):
    dm = make_dm(tmp_path)
    vocab = dm.tokenizer
    assert vocab.itos[:4] == list(SPECIAL_TOKENS)
    train_words = {w for t in dm.splits["train"]["text"] for w in tokenize(t)}
    assert set(vocab.itos[4:]) == train_words  # lower-cased, words and punctuation, training split only
    assert "our" in vocab.stoi and "Our" not in vocab.stoi
    ids = dm.splits["train"]["ids"][0]
    assert vocab.decode(ids) == " ".join(tokenize(dm.splits["train"]["text"][0]))
    assert dm.stats["vocab_size"] == len(vocab) and dm.model_kwargs() == {
        "vocab_size": len(vocab), "num_classes": 5, "pad_id": PAD_ID, "embeddings": None}
    assert any("no pretrained embeddings" in w for w in dm.warnings)
    assert dm.tokenizer_path.is_file() and dm.tokenizer_path.parent == tmp_path / "yelp"


def with_test_file(tmp_path, text: str):
    """The fixture's train and validation files, and a test file of one review ``text`` (5 stars)."""
    d = tmp_path / "data"
    d.mkdir()
    for name in ("yelp_train_500k", "yelp_valid_2000"):
        (d / name).write_text((YELP / name).read_text(encoding="utf-8"), encoding="utf-8")
    (d / "yelp_test_2000").write_text(f"5 {text}\n", encoding="utf-8")
    return d


def test_unseen_words_are_unknown_and_case_is_an_option(tmp_path):
    d = with_test_file(tmp_path, "Zanzibar was wonderful today !")
    dm = TextClassificationDataModule("yelp", dir=str(d), cache_dir=str(tmp_path / "c"), tokenizer="word",
                                      append_eos=False)
    dm.setup()
    ids = dm.splits["test"]["ids"][0]
    assert ids[0] == UNK_ID and ids[-1] == dm.tokenizer.stoi["!"]
    cased = TextClassificationDataModule("yelp", dir=str(d), cache_dir=str(tmp_path / "c"), tokenizer="word",
                                         lowercase=False)
    cased.setup()
    assert "Our" in cased.tokenizer.stoi and cased.tokenizer_path != dm.tokenizer_path


def test_short_reviews_dropped_and_counted(tmp_path):
    dm = make_dm(tmp_path, min_words=4)
    assert [dm.stats[f"{s}_dropped_short"] for s in ("train", "validation", "test")] == [2, 2, 0]
    assert [dm.stats[f"{s}_examples"] for s in ("train", "validation", "test")] == [58, 18, 20]
    assert all(len(t.split()) >= 4 for s in dm.splits.values() for t in s["text"])
    assert any("dropped texts of fewer than 4 words" in w and "2 from train" in w for w in dm.warnings)
    kept = set(dm.splits["train"]["index"])
    assert len(kept) == 58 and kept < set(range(60))  # indices still point at the file's lines
    everything = make_dm(tmp_path, min_words=0)
    assert everything.stats["train_examples"] == 60 and "train_dropped_short" not in everything.stats
    with pytest.raises(DataError, match="no train text has 100 words or more"):
        make_dm(tmp_path, min_words=100)


def test_padding_mask_and_truncation(tmp_path):
    dm = make_dm(tmp_path, max_len=6, append_eos=False)
    full = [len(tokenize(t)) for t in dm.splits["train"]["text"]]
    assert dm.stats["train_truncated"] == sum(n > 6 for n in full) > 0
    assert [len(x) for x in dm.splits["train"]["ids"]] == [min(n, 6) for n in full]
    first = dm.splits["train"][0]
    assert dm.tokenizer.decode(first["ids"]) == " ".join(tokenize(first["text"])[:6])  # the first words kept
    with_eos = make_dm(tmp_path, max_len=6, append_eos=True)
    assert all(len(x) <= 6 and x[-1] == 2 for x in with_eos.splits["train"]["ids"])
    padded = 0
    for b in make_dm(tmp_path, max_len=100).train_dataloader():
        assert b["ids"].shape[0] <= 8 and torch.equal(b["mask"], b["ids"] != PAD_ID)
        lengths = b["mask"].sum(1)
        assert lengths.max() == b["ids"].shape[1]  # padded to the longest in the batch, no further
        for row, n in zip(b["ids"], lengths.tolist()):
            assert (row[:n] != PAD_ID).all() and (row[n:] == PAD_ID).all()  # words first, then padding
            padded += n < len(row)
    assert padded > 0


def write_vectors(path, rows, header=False):
    dim = len(rows[0][1])
    lines = ([f"{len(rows)} {dim}"] if header else []) + [w + " " + " ".join(map(str, v)) for w, v in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("header", [False, True], ids=["glove", "word2vec"])
def test_pretrained_vectors_for_the_vocabulary(tmp_path, header):
    d = with_test_file(tmp_path, "Zanzibar pizza and Timbuktu coffee !")  # two words training never saw
    rows = [("pizza", [1.0, 2.0, 3.0]), ("Coffee", [0.5, 0.5, 0.5]), ("unused", [9.0] * 3), ("zanzibar", [7.0] * 3)]
    path = write_vectors(tmp_path / "vectors.txt", rows, header)
    dm = TextClassificationDataModule("yelp", dir=str(d), cache_dir=str(tmp_path / "c"), tokenizer="word",
                                      append_eos=False, embeddings={"path": path, "extend_vocab": True})
    dm.setup()
    m, v = dm.model_kwargs()["embeddings"], dm.tokenizer
    assert m.shape == (len(v), 3) and dm.model_kwargs()["vocab_size"] == len(v)
    assert m[v.stoi["pizza"]].tolist() == [1.0, 2.0, 3.0] and m[v.stoi["coffee"]].tolist() == [0.5, 0.5, 0.5]
    assert m[PAD_ID].abs().sum() == 0 and "unused" not in v.stoi and "timbuktu" not in v.stoi
    assert dm.stats["embeddings_found"] == 3 and dm.stats["vocab_added_from_embeddings"] == 1
    assert m[v.stoi["zanzibar"]].tolist() == [7.0] * 3
    assert dm.splits["test"]["ids"][0][:4] == [v.stoi["zanzibar"], v.stoi["pizza"], v.stoi["and"], UNK_ID]
    assert not any("no pretrained embeddings" in w for w in dm.warnings)
    closed = TextClassificationDataModule("yelp", dir=str(d), cache_dir=str(tmp_path / "c"), tokenizer="word",
                                          append_eos=False, embeddings={"path": path, "extend_vocab": False})
    closed.setup()
    assert "zanzibar" not in closed.tokenizer.stoi and closed.splits["test"]["ids"][0][0] == UNK_ID


def test_bpe_runs_on_yelp_and_reports_no_embeddings(tmp_path):
    dm = TextClassificationDataModule("yelp", dir=str(YELP), cache_dir=str(tmp_path), bpe_vocab_size=200)
    dm.setup()
    assert "embeddings" not in dm.model_kwargs() and dm.num_classes == 5


def test_a_training_file_of_one_class_is_a_warning_naming_it_and_the_counts(tmp_path, caplog):
    import shutil

    d = tmp_path / "sst"
    shutil.copytree(FIXTURES / "sst", d)
    train = d / "stsa.binary.train"
    lines = train.read_text(encoding="utf-8").splitlines()
    train.write_text("".join("0 " + line.split(" ", 1)[1] + "\n" for line in lines if line.strip()),
                     encoding="utf-8")
    dm = TextClassificationDataModule("sst2", dir=str(d), cache_dir=str(tmp_path / "c"), tokenizer="word")
    dm.setup()
    n = len(dm.splits["train"])
    (warning,) = [w for w in dm.warnings if "one class" in w]
    assert warning == (f"sst2: every training example is of one class (negative: {n}, positive: 0), read from "
                       f"{train}; the model can only learn to predict that class: is it the right file?")
    assert warning in caplog.text
    assert not [w for w in make_dm(tmp_path / "y").warnings if "one class" in w]  # the fixture has every class
