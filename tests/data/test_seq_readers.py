import shutil
from dataclasses import replace

import pytest

from coda_exp.data.common.errors import DataError
from coda_exp.data.common.files import read_lines
from coda_exp.data.seq2seq.iwslt import IWSLT15_ENVI
from coda_exp.data.text.readers import clean_imdb, get_text_reader, held_out
from tests import FIXTURES

IWSLT = FIXTURES / "iwslt15_envi"


def copy(tmp_path, name):
    return shutil.copytree(FIXTURES / name, tmp_path / name)


# -- IWSLT'15 ---------------------------------------------------------------------------------------------
def test_iwslt_reads_aligned_pairs_with_line_index():
    rows = list(IWSLT15_ENVI.read("train", IWSLT))
    en = (IWSLT / "train.en").read_text(encoding="utf-8-sig").splitlines()
    vi = (IWSLT / "train.vi").read_text(encoding="utf-8").splitlines()
    assert len(rows) == len(en) == 40
    assert [r["index"] for r in rows] == list(range(40))
    assert [r["src"] for r in rows] == en and [r["tgt"] for r in rows] == vi
    assert set(rows[0]) == {"src", "tgt", "index"}


def test_iwslt_tolerates_bom_and_missing_final_newline():
    assert (IWSLT / "train.en").read_bytes().startswith(b"\xef\xbb\xbf")
    assert not (IWSLT / "tst2013.vi").read_bytes().endswith(b"\n")
    first = next(IWSLT15_ENVI.read("train", IWSLT))
    assert not first["src"].startswith("\ufeff")
    test = list(IWSLT15_ENVI.read("test", IWSLT))
    assert len(test) == 12 and test[-1]["tgt"].endswith(" .")
    assert len(list(IWSLT15_ENVI.read("validation", IWSLT))) == 12


def test_read_lines_keeps_empty_lines_and_strips_cr(tmp_path):
    p = tmp_path / "x.en"
    p.write_bytes(b"a b\r\n\r\nc")
    assert read_lines(p) == ["a b", "", "c"]
    p.write_bytes(b"a\xffb\n")
    with pytest.raises(DataError, match=r"x.en:1: byte .* is not UTF-8"):
        read_lines(p)


def test_iwslt_drop_empty_keeps_line_numbers(tmp_path):
    d = copy(tmp_path, "iwslt15_envi")
    lines = (d / "tst2012.vi").read_text(encoding="utf-8").splitlines()
    lines[3] = ""
    (d / "tst2012.vi").write_text("\n".join(lines) + "\n", encoding="utf-8")
    kept = list(replace(IWSLT15_ENVI, drop_empty=("validation",)).read("validation", d))
    assert len(kept) == 11 and 3 not in [r["index"] for r in kept]
    assert len(list(IWSLT15_ENVI.read("validation", d))) == 12  # evaluation keeps every line by default


def test_iwslt_mismatched_line_counts_name_both_files(tmp_path):
    d = copy(tmp_path, "iwslt15_envi")
    lines = (d / "tst2012.vi").read_text(encoding="utf-8").splitlines()
    (d / "tst2012.vi").write_text("\n".join(lines[:-2]) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as e:
        list(IWSLT15_ENVI.read("validation", d))
    msg = str(e.value)
    assert "tst2012.en has 12 lines" in msg and "tst2012.vi has 10" in msg


def test_iwslt_missing_files_say_where_to_get_them(tmp_path):
    d = copy(tmp_path, "iwslt15_envi")
    (d / "tst2013.vi").unlink()
    with pytest.raises(DataError, match=r"lacks tst2013.vi.*nlp.stanford.edu/projects/nmt"):
        list(IWSLT15_ENVI.read("test", d))
    with pytest.raises(DataError, match="does not exist"):
        list(IWSLT15_ENVI.read("train", tmp_path / "nowhere"))
    with pytest.raises(DataError, match="unknown split"):
        list(IWSLT15_ENVI.read("dev", d))


def test_iwslt_vocabularies():
    src, tgt = IWSLT15_ENVI.vocabularies(IWSLT)
    assert src.itos[:4] == tgt.itos[:4] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert "tôi" in tgt.stoi and "i" in src.stoi
    with pytest.raises(DataError, match="local files only"):
        IWSLT15_ENVI.vocabularies(None)


def test_iwslt_swapped_vocabularies_are_a_warning_with_the_unknown_share(tmp_path):
    """vocab.en and vocab.vi exchanged made 83 % of the source tokens <unk>, and the run went on without a word."""
    from coda_exp.data.seq2seq.sources import IWSLTDataModule

    def built(folder):
        dm = IWSLTDataModule(dir=str(folder), cache_dir=str(tmp_path / "cache"), batch_size=4, tokenizer="word")
        dm.setup("fit")
        return dm

    own = built(IWSLT)
    assert own.stats["train_unk_src"] < 0.05 and not own.warnings
    swapped = copy(tmp_path, "iwslt15_envi")
    (swapped / "vocab.en").write_bytes((IWSLT / "vocab.vi").read_bytes())
    (swapped / "vocab.vi").write_bytes((IWSLT / "vocab.en").read_bytes())
    dm = built(swapped)
    assert dm.stats["train_unk_src"] > 0.5 and len(dm.warnings) == 2
    assert f"of the training src tokens (en) are unknown to {swapped / 'vocab.en'}" in dm.warnings[0]


def test_iwslt_hub_documented_and_offline_error():
    assert (IWSLT15_ENVI.hub_id, IWSLT15_ENVI.hub_config) == ("mt_eng_vietnamese", "iwslt2015-en-vi")
    with pytest.raises(DataError, match=r"mt_eng_vietnamese.*data.dir=DIR"):
        next(IWSLT15_ENVI.read("test"))


# -- IMDb -------------------------------------------------------------------------------------------------
def test_imdb_splits_labels_and_cleanup():
    r = get_text_reader("imdb")
    train, val, test = (list(r.read(s, FIXTURES / "imdb")) for s in ("train", "validation", "test"))
    assert (len(train), len(val), len(test)) == (14, 2, 16)  # 10% (at least one) of each class held out
    assert sorted(x["label"] for x in val) == [0, 1]
    assert [x["label"] for x in test] == [0] * 8 + [1] * 8  # neg first, then pos
    assert [x["index"] for x in test] == list(range(16))
    assert all("<br" not in x["text"] for x in train + val + test)
    raw = (FIXTURES / "imdb/aclImdb/test/neg/0_3.txt").read_text(encoding="utf-8")
    assert "<br /><br />" in raw and test[0]["text"] == clean_imdb(raw)
    # held-out reviews are not trained on; together they are the whole training folder
    assert not {x["text"] for x in val} & {x["text"] for x in train}
    assert len({x["text"] for x in train + val}) == 16


def test_imdb_accepts_the_aclimdb_folder_itself():
    r = get_text_reader("imdb")
    a = list(r.read("test", FIXTURES / "imdb"))
    b = list(r.read("test", FIXTURES / "imdb" / "aclImdb"))
    assert a == b


def test_imdb_order_is_numeric_and_deterministic(tmp_path):
    d = tmp_path / "aclImdb"
    for part in ("train", "test"):
        for cls, rating in (("neg", 1), ("pos", 9)):
            for i in (10, 2, 1):
                (d / part / cls).mkdir(parents=True, exist_ok=True)
                (d / part / cls / f"{i}_{rating}.txt").write_text(f"{cls} review {i}", encoding="utf-8")
    texts = [x["text"] for x in get_text_reader("imdb").read("test", tmp_path)]
    assert texts == ["neg review 1", "neg review 2", "neg review 10", "pos review 1", "pos review 2", "pos review 10"]
    assert held_out([0, 0, 1, 1] * 10, 0.1, 0) == held_out([0, 0, 1, 1] * 10, 0.1, 0)
    assert len(held_out([0, 0, 1, 1] * 10, 0.1, 0)) == 4


def test_imdb_val_fraction_zero_validates_on_test():
    r = get_text_reader("imdb", val_fraction=0.0)
    assert list(r.read("validation", FIXTURES / "imdb")) == list(r.read("test", FIXTURES / "imdb"))
    assert len(list(r.read("train", FIXTURES / "imdb"))) == 16
    assert r.notes(FIXTURES / "imdb") and not get_text_reader("imdb").notes(FIXTURES / "imdb")


def test_imdb_errors(tmp_path):
    with pytest.raises(DataError, match=r"lacks the folder\(s\) train/neg, train/pos;.*ai.stanford.edu/~amaas/data"):
        list(get_text_reader("imdb").read("train", tmp_path))
    with pytest.raises(DataError, match=r"lacks the folder\(s\) test/neg, test/pos;"):  # the test split: test/ alone
        list(get_text_reader("imdb").read("test", tmp_path))
    d = copy(tmp_path, "imdb")
    (d / "aclImdb/train/pos/8_10.txt").write_text("  <br /> ", encoding="utf-8")
    with pytest.raises(DataError, match=r"8_10.txt: empty review"):
        list(get_text_reader("imdb").read("train", d))


# -- SST --------------------------------------------------------------------------------------------------
def test_sst_binary_and_fine():
    b = {s: list(get_text_reader("sst2").read(s, FIXTURES / "sst")) for s in ("train", "validation", "test")}
    f = {s: list(get_text_reader("sst5").read(s, FIXTURES / "sst")) for s in ("train", "validation", "test")}
    assert [len(b[s]) for s in b] == [30, 10, 10] and [len(f[s]) for s in f] == [30, 10, 10]
    assert {x["label"] for x in b["train"]} == {0, 1}
    assert {x["label"] for x in f["train"]} == {0, 1, 2, 3, 4}
    first = (FIXTURES / "sst" / "stsa.fine.dev").read_text(encoding="utf-8").splitlines()[0]
    assert f"{f['validation'][0]['label']} {f['validation'][0]['text']}" == first
    assert len(get_text_reader("sst5").label_names) == 5


def test_sst_malformed_line_and_unknown_label(tmp_path):
    d = copy(tmp_path, "sst")
    lines = (d / "stsa.binary.dev").read_text(encoding="utf-8").splitlines()
    (d / "stsa.binary.dev").write_text("\n".join(lines[:2] + ["1"] + lines[2:]) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"stsa.binary.dev:3: no text after the label '1'; expected '<label> <sent"):
        list(get_text_reader("sst2").read("validation", d))
    (d / "stsa.binary.dev").write_text("\n".join(lines[:4] + ["", "3 a fine film ."]) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"stsa.binary.dev:6: unknown label '3'.*0-1"):
        list(get_text_reader("sst2").read("validation", d))
    for label in ("¹", "١"):  # a superscript one (int() fails) and an Arabic-Indic one (int() reads 1)
        (d / "stsa.binary.dev").write_text("\n".join(lines[:2] + [f"{label} the film ."]) + "\n", encoding="utf-8")
        with pytest.raises(DataError, match=rf"stsa.binary.dev:3: unknown label '{label}'"):
            list(get_text_reader("sst2").read("validation", d))
    (d / "stsa.fine.test").write_text("pos a fine film .\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"stsa.fine.test:1: unknown label 'pos'"):
        list(get_text_reader("sst5").read("test", d))


def test_sst_missing_files_and_hub(tmp_path):
    with pytest.raises(DataError, match=r"lacks stsa.fine.train \(and stsa.fine.dev, stsa.fine.test, which other splits read\). Expected .*stsa.fine.train, stsa.fine.dev, stsa.fine.test.*Kim \(2014\)"):
        list(get_text_reader("sst5").read("train", tmp_path))
    with pytest.raises(DataError, match="no Hugging Face hub copy"):
        list(get_text_reader("sst5").read("train"))
    assert get_text_reader("sst2").hub_id == "sst2"
    assert "no test labels" in get_text_reader("sst2").notes(None)[0]
    assert get_text_reader("sst2").notes(FIXTURES / "sst") == []
    with pytest.raises(DataError, match="unknown dataset .yelp5.*sst5"):
        get_text_reader("yelp5")
