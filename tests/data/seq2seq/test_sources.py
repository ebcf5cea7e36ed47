"""IWSLT'15 En→Vi's tokenizers: one joint BPE vocabulary for both sides by default (T2T's translate_envi_iwslt32k),
one per side, or the release's word lists; what a checkpoint keeps of them; pairs too long in subwords."""

from __future__ import annotations

import pytest

from coda_exp.data.common.errors import DataError
from coda_exp.data.common.tokenization import BPETokenizer
from coda_exp.data.common.vocab import UNK_ID, Vocab
from coda_exp.data.seq2seq import IWSLTDataModule
from tests import FIXTURES

IWSLT = FIXTURES / "iwslt15_envi"


def built(tmp_path, **kw) -> IWSLTDataModule:
    dm = IWSLTDataModule(dir=str(IWSLT), cache_dir=str(tmp_path / "cache"), batch_size=4, **kw)
    dm.setup()
    return dm


def test_the_default_is_one_bpe_vocabulary_for_both_languages(tmp_path):
    dm = built(tmp_path, bpe_vocab_size=256)
    assert isinstance(dm.src_tokenizer, BPETokenizer) and dm.src_tokenizer is dm.tgt_tokenizer
    assert dm.stats["shared_vocab"] and dm.stats["tokenizer"] == "bpe" and dm.stats["src_vocab"] <= 256
    tok = dm.tgt_tokenizer
    assert tok.encode("chúng_tôi") and UNK_ID not in tok.encode("we like chúng_tôi")  # both languages' text
    # a decoded hypothesis is text in the release's own (tokenized, escaped) form: what t2t-bleu scores
    for row in dm.examples["train"]:
        assert tok.decode(tok.encode(row["src"])) == row["src"] and tok.decode(tok.encode(row["tgt"])) == row["tgt"]
    assert "&apos;s" in dm.examples["train"][1]["src"]
    kw = dm.model_kwargs()
    assert kw["src_vocab_size"] == kw["tgt_vocab_size"] == tok.vocab_size  # model.shared_embeddings can share


def test_one_bpe_vocabulary_per_side_on_request(tmp_path):
    dm = built(tmp_path, bpe_vocab_size=256, shared_vocab=False)
    assert dm.src_tokenizer is not dm.tgt_tokenizer and not dm.stats["shared_vocab"]
    assert UNK_ID in dm.src_tokenizer.encode("chúng_tôi")  # the English side never saw ú
    assert UNK_ID not in dm.tgt_tokenizer.encode("chúng_tôi")
    assert len(list((tmp_path / "cache" / "iwslt15_envi").glob("bpe-*.json"))) == 2
    built(tmp_path, bpe_vocab_size=256)  # the joint vocabulary is cached beside them, not mistaken for one
    assert len(list((tmp_path / "cache" / "iwslt15_envi").glob("bpe-*.json"))) == 3


def test_the_releases_word_lists_are_one_per_language(tmp_path):
    dm = built(tmp_path, tokenizer="word")  # shared_vocab None: the tokenizer's own (a configuration saved before)
    assert isinstance(dm.src_tokenizer, Vocab) and dm.src_tokenizer is not dm.tgt_tokenizer
    assert not dm.stats["shared_vocab"]
    with pytest.raises(DataError, match=r"one vocabulary per language .* data\.shared_vocab=false"):
        IWSLTDataModule(dir=str(IWSLT), tokenizer="word", shared_vocab=True)


def test_max_len_drops_training_pairs_by_their_subword_length(tmp_path):
    full = built(tmp_path, bpe_vocab_size=256, max_len=None)
    lengths = [max(len(s), len(t)) for s, t in full.splits["train"].pairs]
    cap = sorted(lengths)[len(lengths) // 2]
    dm = built(tmp_path, bpe_vocab_size=256, max_len=cap)
    assert dm.stats["train_dropped_too_long"] == sum(n > cap for n in lengths) > 0
    assert len(dm.splits["test"]) == len(full.splits["test"])  # evaluation keeps everything


@pytest.mark.parametrize("kw", [{"bpe_vocab_size": 256}, {"bpe_vocab_size": 256, "shared_vocab": False},
                                {"tokenizer": "word"}])
def test_a_checkpoints_tokenizers_come_back_shared_where_they_were(tmp_path, kw):
    dm = built(tmp_path, **kw)
    again = IWSLTDataModule(dir=str(IWSLT), cache_dir=str(tmp_path / "other"), batch_size=4, **kw)
    again.restore_encoders(dm.encoder_state())
    again.setup()
    assert (again.src_tokenizer is again.tgt_tokenizer) == (dm.src_tokenizer is dm.tgt_tokenizer)
    assert again.splits["test"].pairs == dm.splits["test"].pairs
    assert not (tmp_path / "other").exists()  # nothing learnt again
