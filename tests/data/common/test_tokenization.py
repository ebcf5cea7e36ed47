import pytest
import torch

from coda_exp.data.common.errors import DataError
from coda_exp.data.common.tokenization import BPETokenizer, Tokenizer, cached_bpe, train_bpe
from coda_exp.data.common.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Vocab, strip_special
from tests import FIXTURES

CORPUS = [
    "The film was great, and the music was wonderful!",
    "The plot was boring; the acting was awful.",
    "I didn't like the ending... but the cast was fine.",
    "tôi thấy một cái nhà mới hôm nay .",
    "chúng tôi thích bài hát mới , đúng vậy .",
] * 4


@pytest.fixture(scope="module")
def bpe():
    return train_bpe(CORPUS, vocab_size=120)


def test_special_ids_are_shared():
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)


def test_bpe_specials_and_protocol(bpe):
    assert isinstance(bpe, Tokenizer)
    assert [bpe.id_to_token(i) for i in range(4)] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert (bpe.pad_id, bpe.bos_id, bpe.eos_id, bpe.unk_id) == (0, 1, 2, 3)
    assert 4 < bpe.vocab_size <= 120
    ids = bpe.encode("The film was great.")
    assert ids and min(ids) >= 4  # encode adds no special token


def test_bpe_round_trip_restores_text(bpe):
    for text in CORPUS[:5] + ["the music was great , and the film was boring !"]:
        assert bpe.decode(bpe.encode(text)) == text
    # whitespace runs are normalised to one space
    assert bpe.decode(bpe.encode("  The   film\twas\ngreat.  ")) == "The film was great."


def test_bpe_merges_frequent_words(bpe):
    # BPE learnt whole words for frequent ones: fewer ids than characters
    assert len(bpe.encode("the film was great")) < len("thefilmwasgreat")


def test_decode_stops_at_eos_and_skips_pad_bos(bpe):
    ids = bpe.encode("the film was great")
    seq = [BOS_ID, *ids, EOS_ID, *bpe.encode("boring"), PAD_ID, PAD_ID]
    assert bpe.decode(seq) == "the film was great"
    assert bpe.decode(torch.tensor(seq)) == "the film was great"
    assert bpe.decode([PAD_ID, BOS_ID, *ids]) == "the film was great"
    assert strip_special([5, 0, 1, 6, 2, 7]) == [5, 6]


def test_special_strings_in_text_are_not_special(bpe):
    ids = bpe.encode("a <s> b </s> <pad>")
    assert not {PAD_ID, BOS_ID, EOS_ID} & set(ids)


def test_unseen_characters_are_unk(bpe):
    ids = bpe.encode("zebra ¿ Ω")
    assert UNK_ID in ids


def test_bpe_training_is_deterministic_and_saves(bpe, tmp_path):
    again = train_bpe(CORPUS, vocab_size=120)
    assert again.hf.get_vocab() == bpe.hf.get_vocab()
    bpe.save(tmp_path / "bpe.json")
    loaded = BPETokenizer.load(tmp_path / "bpe.json")
    text = "the acting was awful , tôi thích"
    assert loaded.encode(text) == bpe.encode(text)
    assert loaded.decode(loaded.encode(text)) == text
    assert loaded.encode_batch([text, "the film"]) == [bpe.encode(text), bpe.encode("the film")]


def test_bpe_load_bad_file(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(DataError, match="bad.json"):
        BPETokenizer.load(tmp_path / "bad.json")


def test_cached_bpe_trains_once_per_fingerprint_and_size(tmp_path):
    calls = []

    def texts():
        calls.append(1)
        return iter(CORPUS)

    a, path_a = cached_bpe(texts, "data-1", 100, tmp_path)
    b, path_b = cached_bpe(texts, "data-1", 100, tmp_path)
    assert len(calls) == 1 and path_a == path_b and path_a.is_file()
    assert a.hf.get_vocab() == b.hf.get_vocab()
    _, path_c = cached_bpe(texts, "data-1", 90, tmp_path)
    _, path_d = cached_bpe(texts, "data-2", 100, tmp_path)
    assert len(calls) == 3 and len({path_a, path_c, path_d}) == 3


def test_word_vocab_from_stanford_file():
    tok = Vocab.from_file(FIXTURES / "iwslt15_envi" / "vocab.en")
    lines = (FIXTURES / "iwslt15_envi" / "vocab.en").read_text(encoding="utf-8").split()
    assert lines[:3] == ["<unk>", "<s>", "</s>"]
    assert tok.itos[:4] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert tok.vocab_size == len(lines) + 1  # the three specials mapped, <pad> added
    assert tok.itos[4:] == lines[3:]
    assert isinstance(tok, Tokenizer)
    ids = tok.encode("i see a zebra .")
    assert ids[3] == UNK_ID and UNK_ID not in ids[:3] + ids[4:]
    assert tok.decode([BOS_ID, *ids, EOS_ID, 5, PAD_ID]) == "i see a <unk> ."
    assert tok.encode("it &apos;s") == [tok.stoi["it"], tok.stoi["&apos;s"]]  # split on spaces only


def test_word_vocab_bom_duplicates_and_errors(tmp_path):
    p = tmp_path / "vocab.vi"
    p.write_bytes("\ufeff<unk>\n<s>\n</s>\ntôi\nbạn\ntôi".encode())
    tok = Vocab.from_file(p)
    assert tok.itos == ["<pad>", "<s>", "</s>", "<unk>", "tôi", "bạn"]
    p.write_text("<unk>\nhai từ\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"vocab.vi:2: .*whitespace"):
        Vocab.from_file(p)
    with pytest.raises(DataError, match="does not exist"):
        Vocab.from_file(tmp_path / "missing.txt")


@pytest.mark.parametrize("content", ['["<pad>", "<b', "\xff\xfe", '{"a": 1}'])
def test_a_cached_vocabulary_that_cannot_be_read_names_its_file(tmp_path, content):
    """A vocabulary cache cut short (a full disk) or not a list was a JSONDecodeError's traceback."""
    path = tmp_path / "vocab-x.json"
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(DataError, match=rf"{path}: not a"):
        Vocab.load(path)



def test_a_cached_vocabulary_cut_short_is_refused_and_an_older_one_rebuilt(tmp_path):
    """A vocabulary cache cut at a token boundary (valid JSON) was read as is: 8 words instead of 63, and the run
    trained on <unk>. The count and checksum written with it are checked; a plain list (the older format, which
    carries none) is rebuilt."""
    import json

    path = tmp_path / "vocab-x.json"
    built = Vocab.build([["a", "b", "c", "d", "e"]])
    assert Vocab.cached(path, lambda: built).itos == built.itos and Vocab.load(path).itos == built.itos
    saved = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**saved, "tokens": saved["tokens"][:6]}), encoding="utf-8")
    with pytest.raises(DataError, match=rf"{path}: the vocabulary cache holds 6 tokens, not the 9 .*; delete it and "
                                        "run again, it is rebuilt"):
        Vocab.cached(path, lambda: pytest.fail("a corrupt cache is named, not silently rebuilt"))
    path.write_text(json.dumps(built.itos[:6]), encoding="utf-8")  # the older format, cut short: cannot be checked
    assert Vocab.cached(path, lambda: built).itos == built.itos and Vocab.load(path).itos == built.itos
