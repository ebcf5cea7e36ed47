"""A trained model's tokenizers as plain dicts (saved in its checkpoints) and back, and data modules that read
their splits (and new inputs) with them instead of rebuilding them from the training files."""

from __future__ import annotations

import pytest
import torch
from hydra.utils import instantiate

from coda_exp.data.common.encoders import check_state, new_state, tokenizer_from_state, tokenizer_state
from coda_exp.data.common.errors import DataError
from coda_exp.data.common.tokenization import CharTokenizer, train_bpe
from coda_exp.data.common.vocab import Vocab


def test_every_tokenizer_comes_back_the_same():
    texts = ["the cat sat on the mat .", "a dog , the cat !"]
    for tok in (Vocab(["the", "cat", "sat"]), train_bpe(texts * 20, vocab_size=60, min_frequency=1),
                CharTokenizer("0123456789+-")):
        back = tokenizer_from_state(tokenizer_state(tok))
        assert type(back) is type(tok) and back.vocab_size == tok.vocab_size
        sample = "12+3" if isinstance(tok, CharTokenizer) else "the cat sat on a mat"
        assert back.encode(sample) == tok.encode(sample)


def test_a_foreign_state_is_named():
    with pytest.raises(DataError, match="unknown tokenizer state 'nope'"):
        tokenizer_from_state({"kind": "nope"})
    with pytest.raises(DataError, match="of the 'text' family, not 'pair'"):
        check_state(new_state("text"), "pair")
    with pytest.raises(DataError, match="version 99"):
        check_state({**new_state("pair"), "version": 99}, "pair")


@pytest.mark.parametrize("overrides", [["task=snli"], ["task=sst", "model=transformer_classifier"],
                                       ["task=algolisp", "model=transformer"]])
def test_a_restored_data_module_encodes_as_the_trained_one(make_cfg, overrides):
    cfg = make_cfg(*overrides, "scale=fixture")
    trained = instantiate(cfg.data)
    trained.setup("fit")
    state = trained.encoder_state()
    restored = instantiate(cfg.data)
    restored.restore_encoders(state)
    assert restored.model_kwargs().keys() == trained.model_kwargs().keys()
    assert restored.encoder_state() == state
    restored.setup("fit")
    for split in ("validation", "test"):
        a, b = next(iter(trained.split_loader(split))), next(iter(restored.split_loader(split)))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_pretrained_vectors_are_not_read_again(make_cfg, tmp_path):
    """The vectors are the model's weights: a restored module builds a placeholder table of their shape."""
    vectors = tmp_path / "vecs.txt"
    vectors.write_text("a 0.1 0.2 0.3\nman 0.4 0.5 0.6\n", encoding="utf-8")
    cfg = make_cfg("task=snli", "scale=fixture", f"data.embeddings.path={vectors}")
    trained = instantiate(cfg.data)
    trained.setup("fit")
    state = trained.encoder_state()
    vectors.unlink()  # gone: not needed any more
    restored = instantiate(cfg.data)
    restored.restore_encoders(state)
    restored.setup("fit")
    assert restored.model_kwargs()["embeddings"].shape == trained.model_kwargs()["embeddings"].shape == (
        len(trained.vocab), 3)
    assert restored.vocab.itos == trained.vocab.itos
