"""What a trained model needs of its data to read new text, kept in its checkpoints: the tokenizers.

A family's :meth:`~coda_exp.data.common.base.DataModule.encoder_state` is a plain dict (lists, strings, numbers:
no class is pickled, so a checkpoint stays readable when the code moves) holding each tokenizer as
:func:`tokenizer_state` writes it and the shape of the pretrained vector table, if any (the vectors themselves are
the model's weights). :meth:`~coda_exp.data.common.base.DataModule.restore_encoders` gives a data module those
tokenizers back, so that ``coda-exp eval`` encodes another folder's text with the ids the model was trained on (a
vocabulary rebuilt from another training file would not be) and ``coda-exp predict`` needs no data at all.

A tokenizer's state: ``{"kind": "vocab", "tokens": [...]}`` (:class:`~coda_exp.data.common.vocab.Vocab`, the words
after the special ones), ``{"kind": "bpe", "json": "..."}`` (:class:`~coda_exp.data.common.tokenization.BPETokenizer`,
the ``tokenizers`` library's own JSON), ``{"kind": "chars", "chars": "..."}``
(:class:`~coda_exp.data.common.tokenization.CharTokenizer`).
"""

from __future__ import annotations

import hashlib
import json

import torch

from coda_exp.data.common.errors import DataError
from coda_exp.data.common.tokenization import BPETokenizer, CharTokenizer
from coda_exp.data.common.vocab import SPECIAL_TOKENS, Vocab

ENCODER_STATE_VERSION = 1


def tokenizer_state(tok) -> dict:
    """A tokenizer as a plain dict (see the module docstring)."""
    if isinstance(tok, Vocab):
        return {"kind": "vocab", "tokens": list(tok.itos[len(SPECIAL_TOKENS):])}
    if isinstance(tok, BPETokenizer):
        return {"kind": "bpe", "json": tok.hf.to_str()}
    if isinstance(tok, CharTokenizer):
        return {"kind": "chars", "chars": tok.chars}
    raise TypeError(f"no saved form for a tokenizer of type {type(tok).__name__}")


def tokenizer_from_state(state: dict, where: str = "checkpoint"):
    """The tokenizer :func:`tokenizer_state` wrote; a :class:`DataError` naming ``where`` for anything else."""
    kind = state.get("kind") if isinstance(state, dict) else None
    if kind == "vocab":
        return Vocab(state["tokens"])
    if kind == "bpe":
        from tokenizers import Tokenizer as HFTokenizer

        return BPETokenizer(HFTokenizer.from_str(state["json"]))
    if kind == "chars":
        return CharTokenizer(state["chars"])
    raise DataError(f"{where}: unknown tokenizer state {kind!r}; expected vocab, bpe or chars")


def state_key(state: dict) -> str:
    """A short hash of a state (names the caches of text encoded with restored tokenizers)."""
    return hashlib.sha1(json.dumps(state, sort_keys=True).encode()).hexdigest()[:16]


def table_shape(matrix: torch.Tensor | None) -> list[int] | None:
    """The shape of the pretrained vector table to record (None without vectors)."""
    return None if matrix is None else [int(n) for n in matrix.shape]


def placeholder_table(shape: list[int] | None) -> torch.Tensor | None:
    """Zeros of the recorded shape: the model is built as in training (the table's width wins over
    ``embedding_dim``), then the checkpoint's weights replace them; the vectors file is not read."""
    return None if shape is None else torch.zeros(*shape)


def check_state(state: dict, family: str, where: str = "checkpoint") -> dict:
    """``state`` if it is an encoder state of ``family``, else a :class:`DataError` naming ``where``."""
    if not isinstance(state, dict) or state.get("family") != family:
        got = state.get("family") if isinstance(state, dict) else type(state).__name__
        raise DataError(f"{where}: its saved tokenizers are of the {got!r} family, not {family!r}")
    if state.get("version") != ENCODER_STATE_VERSION:
        raise DataError(f"{where}: saved tokenizers of version {state.get('version')!r}; this code reads version "
                        f"{ENCODER_STATE_VERSION}")
    return state


def new_state(family: str, **parts) -> dict:
    """An encoder state of ``family`` with ``parts`` (tokenizer states, table shapes, small settings)."""
    return {"family": family, "version": ENCODER_STATE_VERSION, **parts}
