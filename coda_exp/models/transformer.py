"""Transformer encoder-decoder and encoder classifier with pluggable scoring (CoDA paper §3.4, eq. 10).

The layout is Tensor2Tensor's ``transformer`` (Vaswani et al. 2017 as T2T implements it): token embeddings
scaled by sqrt(d_model), sinusoidal timing signal ([sin | cos] halves), dropout; pre-norm residual blocks
("layer_preprocess_sequence n, layer_postprocess_sequence da": x + dropout(f(LayerNorm(x)))); a final LayerNorm
on the encoder and decoder outputs; attention projections without bias; ReLU feed-forward with relu_dropout;
attention-weight dropout; target embedding tied to the softmax weights. ``prenorm=False`` gives the original
post-norm block LayerNorm(x + dropout(f(x))) and no final LayerNorm.

Every attention (encoder self, decoder causal self, encoder-decoder cross) is a ``MultiHeadAttention`` whose
per-head scoring comes from the factory ``scoring`` (called once per attention layer): ``SoftmaxScoring`` gives
the Transformer, ``CoDAScoring`` the CoDA-Transformer (eq. 10: (tanh(QK^T/sqrt(dk)) * 2 sigmoid(G/sqrt(dk))) V).
Masks are bool, True = real token.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from coda_exp.attention.masking import masked_max, masked_mean
from coda_exp.attention.multihead import MultiHeadAttention

POOLINGS = ("mean", "first", "max")


def timing_signal(length: int, channels: int, min_timescale: float = 1.0, max_timescale: float = 1.0e4,
                  dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """T2T's ``get_timing_signal_1d``: (length, channels), sines in the first half, cosines in the second."""
    num_timescales = channels // 2
    increment = math.log(max_timescale / min_timescale) / max(num_timescales - 1, 1)
    inv = min_timescale * torch.exp(torch.arange(num_timescales, dtype=torch.float64) * -increment)  # (C/2,)
    scaled = torch.arange(length, dtype=torch.float64)[:, None] * inv[None, :]  # (L, C/2)
    signal = torch.cat([scaled.sin(), scaled.cos()], dim=1)  # (L, 2 * (C/2))
    return F.pad(signal, (0, channels % 2)).to(dtype)  # (L, C)


class PositionwiseFeedForward(nn.Module):
    """T2T ``dense_relu_dense``: Linear(d, d_ff) -> ReLU -> dropout(relu_dropout) -> Linear(d_ff, d)."""

    def __init__(self, d_model: int, d_ff: int, relu_dropout: float):
        super().__init__()
        self.inner, self.outer = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(relu_dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, d) -> (B, L, d)
        return self.outer(self.dropout(F.relu(self.inner(x))))


class _Block(nn.Module):
    """A residual sub-layer: pre-norm x + drop(f(LN(x))) or post-norm LN(x + drop(f(x)))."""

    def __init__(self, d_model: int, dropout: float, prenorm: bool):
        super().__init__()
        self.norm, self.dropout, self.prenorm = nn.LayerNorm(d_model), nn.Dropout(dropout), prenorm

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        """What the sub-layer function sees (also what a decoder cache stores as keys/values)."""
        return self.norm(x) if self.prenorm else x

    def residual(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        out = x + self.dropout(fx)
        return out if self.prenorm else self.norm(out)


class EncoderLayer(nn.Module):
    def __init__(self, d_model: int, num_heads: int, d_ff: int, scoring: Callable[[], nn.Module], dropout: float,
                 attention_dropout: float, relu_dropout: float, prenorm: bool):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, scoring(), attention_dropout, bias=False)
        self.ffn = PositionwiseFeedForward(d_model, d_ff, relu_dropout)
        self.attn_block, self.ffn_block = _Block(d_model, dropout, prenorm), _Block(d_model, dropout, prenorm)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:  # x (B, S, d), mask (B, S)
        h = self.attn_block.inputs(x)
        x = self.attn_block.residual(x, self.self_attn(h, h, h, key_padding_mask=mask))
        return self.ffn_block.residual(x, self.ffn(self.ffn_block.inputs(x)))


class DecoderLayer(nn.Module):
    def __init__(self, d_model: int, num_heads: int, d_ff: int, scoring: Callable[[], nn.Module], dropout: float,
                 attention_dropout: float, relu_dropout: float, prenorm: bool):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, scoring(), attention_dropout, bias=False)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, scoring(), attention_dropout, bias=False)
        self.ffn = PositionwiseFeedForward(d_model, d_ff, relu_dropout)
        self.self_block, self.cross_block, self.ffn_block = (_Block(d_model, dropout, prenorm) for _ in range(3))

    def forward(self, x: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor | None,
                tgt_mask: torch.Tensor | None = None, cache: torch.Tensor | None = None):
        """x (B, T, d); memory (B, S, d); src_mask (B, S); tgt_mask (B, T) True = real.

        Without ``cache``: causal self-attention over x. With ``cache`` (B, t, d), the self-attention inputs of the
        t previous positions, x holds the next positions only and attends to cache + itself (causally).
        Returns (out (B, T, d), new cache (B, t + T, d)).
        """
        h = self.self_block.inputs(x)  # (B, T, d)
        keys = h if cache is None else torch.cat([cache, h], dim=1)  # (B, t + T, d)
        key_mask = tgt_mask if cache is None or tgt_mask is None else torch.cat(
            [torch.ones(cache.shape[:2], dtype=torch.bool, device=x.device), tgt_mask], dim=1)
        # query_padding_mask: padded target positions never enter a CoDA centring mean (center_over="slice")
        x = self.self_block.residual(x, self.self_attn(h, keys, keys, key_padding_mask=key_mask, causal=True,
                                                       query_padding_mask=tgt_mask))
        h = self.cross_block.inputs(x)
        x = self.cross_block.residual(x, self.cross_attn(h, memory, memory, key_padding_mask=src_mask,
                                                         query_padding_mask=tgt_mask))
        return self.ffn_block.residual(x, self.ffn(self.ffn_block.inputs(x))), keys


class Embedder(nn.Module):
    """Token embedding * sqrt(d_model) + timing signal, then dropout (T2T symbol modality + body input)."""

    def __init__(self, embedding: nn.Embedding, d_model: int, dropout: float, max_len: int):
        super().__init__()
        self.embedding, self.scale, self.max_len = embedding, math.sqrt(d_model), max_len
        self.register_buffer("positions", timing_signal(max_len, d_model), persistent=False)  # (max_len, d)
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:  # (B, L) -> (B, L, d)
        length = ids.shape[1]
        if offset + length > self.max_len:
            raise ValueError(f"sequence of length {offset + length} exceeds max_len={self.max_len}; "
                             f"raise the model's max_len")
        x = self.embedding(ids) * self.scale + self.positions[offset:offset + length].to(self.embedding.weight.dtype)
        return self.dropout(x)


def _embedding(vocab_size: int, d_model: int) -> nn.Embedding:
    emb = nn.Embedding(vocab_size, d_model)
    nn.init.normal_(emb.weight, mean=0.0, std=d_model ** -0.5)  # T2T: random_normal(0, hidden^-0.5)
    return emb


def _init_linears(module: nn.Module) -> None:
    """T2T's ``uniform_unit_scaling`` (gain 1): U(-sqrt(3 / fan_in), +sqrt(3 / fan_in)); zero biases."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            bound = math.sqrt(3.0 / m.in_features)
            nn.init.uniform_(m.weight, -bound, bound)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


class TransformerEncoder(nn.Module):
    """Stack of encoder layers (+ final LayerNorm when pre-norm): (B, S, d), (B, S) -> (B, S, d)."""

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int, scoring: Callable[[], nn.Module],
                 dropout: float, attention_dropout: float, relu_dropout: float, prenorm: bool):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(d_model, num_heads, d_ff, scoring, dropout, attention_dropout,
                                                 relu_dropout, prenorm) for _ in range(num_layers))
        self.final_norm = nn.LayerNorm(d_model) if prenorm else nn.Identity()

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, mask)
        return self.final_norm(x)


class TransformerSeq2Seq(nn.Module):
    """Encoder-decoder Transformer (Tables 4, 6, 7); CoDA-Transformer when ``scoring`` builds ``CoDAScoring``.

    ``forward(src_ids (B, S), src_mask (B, S), tgt_in (B, T), tgt_mask (B, T)) -> logits (B, T, tgt_vocab)``
    with teacher forcing (``tgt_in`` starts with BOS). Decoding (``coda_exp.models.decoding``) uses
    ``init_decoder_state`` and ``decode_step``; ``bos_id``/``eos_id``/``pad_id`` are attributes.
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, scoring: Callable[[], nn.Module],
                 d_model: int = 128, num_layers: int = 2, num_heads: int = 4, d_ff: int = 512, dropout: float = 0.1,
                 attention_dropout: float = 0.1, relu_dropout: float = 0.1, shared_embeddings: bool = False,
                 tie_output: bool = True, max_len: int = 1024, pad_id: int = 0, bos_id: int = 1, eos_id: int = 2,
                 prenorm: bool = True):
        super().__init__()
        if shared_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError(f"shared_embeddings=True needs equal source and target vocabularies, got "
                             f"src_vocab_size={src_vocab_size} and tgt_vocab_size={tgt_vocab_size}")
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.d_model, self.tgt_vocab_size = d_model, tgt_vocab_size
        layer_args = (d_model, num_heads, d_ff, scoring, dropout, attention_dropout, relu_dropout, prenorm)
        self.encoder = TransformerEncoder(num_layers, *layer_args)
        self.decoder_layers = nn.ModuleList(DecoderLayer(*layer_args) for _ in range(num_layers))
        self.decoder_norm = nn.LayerNorm(d_model) if prenorm else nn.Identity()
        _init_linears(self)
        tgt_emb = _embedding(tgt_vocab_size, d_model)
        src_emb = tgt_emb if shared_embeddings else _embedding(src_vocab_size, d_model)
        self.src_embed = Embedder(src_emb, d_model, dropout, max_len)
        self.tgt_embed = Embedder(tgt_emb, d_model, dropout, max_len)
        self.output = None if tie_output else nn.Linear(d_model, tgt_vocab_size, bias=False)
        if self.output is not None:
            _init_linears(self.output)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Decoder states (..., d) -> logits (..., V); tied: h @ E_tgt^T (T2T: no bias)."""
        if self.output is None:
            return h @ self.tgt_embed.embedding.weight.t()
        return self.output(h)

    def encode(self, src_ids: torch.Tensor, src_mask: torch.Tensor | None) -> torch.Tensor:
        """(B, S) ids, (B, S) mask -> memory (B, S, d)."""
        return self.encoder(self.src_embed(src_ids), src_mask)

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor | None,
               tgt_mask: torch.Tensor | None = None) -> torch.Tensor:
        """All target positions at once (causal): tgt_in (B, T), memory (B, S, d) -> logits (B, T, V)."""
        x = self.tgt_embed(tgt_in)  # (B, T, d)
        for layer in self.decoder_layers:
            x, _ = layer(x, memory, src_mask, tgt_mask)
        return self.logits(self.decoder_norm(x))

    def forward(self, src_ids: torch.Tensor, src_mask: torch.Tensor | None, tgt_in: torch.Tensor,
                tgt_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.decode(tgt_in, self.encode(src_ids, src_mask), src_mask, tgt_mask)

    # --- step-wise decoding ---------------------------------------------------------------------------------
    def init_decoder_state(self, src_ids: torch.Tensor, src_mask: torch.Tensor | None,
                           use_cache: bool = True) -> dict:
        """Encode once; the state is a dict of batch-first tensors (the decoders index/repeat its dim 0).

        ``cache``: per decoder layer, the self-attention inputs of the positions decoded so far (B, t, d); the
        key/value projections are recomputed from it, which is exact for any row-local scoring (softmax, CoDA
        without centring or with center_over="row"). ``use_cache=False`` recomputes the whole prefix every step.
        """
        if src_mask is None:
            src_mask = torch.ones(src_ids.shape, dtype=torch.bool, device=src_ids.device)
        state = {"memory": self.encode(src_ids, src_mask), "src_mask": src_mask}
        if use_cache:
            empty = state["memory"].new_zeros(src_ids.shape[0], 0, self.d_model)  # (B, 0, d)
            state["cache"] = [empty for _ in self.decoder_layers]
        return state

    def decode_step(self, prefix: torch.Tensor, state: dict) -> tuple[torch.Tensor, dict]:
        """prefix (N, t) decoded so far (BOS first) -> (logits of token t+1 (N, V), updated state)."""
        if "cache" not in state:
            return self.decode(prefix, state["memory"], state["src_mask"])[:, -1], state
        t = prefix.shape[1]
        if state["cache"][0].shape[1] != t - 1:
            raise ValueError(f"cache holds {state['cache'][0].shape[1]} positions, prefix has {t}: call "
                             f"decode_step once per new token")
        x = self.tgt_embed(prefix[:, -1:], offset=t - 1)  # (N, 1, d)
        cache = []
        for layer, past in zip(self.decoder_layers, state["cache"]):
            x, keys = layer(x, state["memory"], state["src_mask"], cache=past)
            cache.append(keys)  # (N, t, d)
        logits = self.logits(self.decoder_norm(x))[:, 0]  # (N, V)
        return logits, {**state, "cache": cache}


class TransformerClassifier(nn.Module):
    """Transformer encoder + masked pooling + linear (Table 5, the ``tiny`` setting; T2T ``transformer_encoder``
    with a class-label head). ``forward(ids (B, L), mask (B, L)) -> logits (B, num_classes)``.

    pooling: "mean" over real tokens (T2T's class-label modality), "max" over real tokens, or "first" (position 0,
    e.g. a [CLS] token the data module prepends). ``embeddings``: what a word-level data module passes (pretrained
    vectors or None); this model learns its own embedding table (T2T), so None is accepted and a matrix refused.
    """

    def __init__(self, vocab_size: int, num_classes: int, scoring: Callable[[], nn.Module], d_model: int = 128,
                 num_layers: int = 2, num_heads: int = 4, d_ff: int = 512, dropout: float = 0.1,
                 pooling: str = "mean", pad_id: int = 0, max_len: int = 2048, attention_dropout: float = 0.1,
                 relu_dropout: float = 0.1, prenorm: bool = True, embeddings: torch.Tensor | None = None):
        super().__init__()
        if embeddings is not None:
            raise ValueError("TransformerClassifier learns its own embeddings and takes no pretrained vectors; "
                             "set data.embeddings.path=null (or use a model that takes them, e.g. attconv_light)")
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        self.pooling, self.pad_id = pooling, pad_id
        self.encoder = TransformerEncoder(num_layers, d_model, num_heads, d_ff, scoring, dropout, attention_dropout,
                                          relu_dropout, prenorm)
        self.classifier = nn.Linear(d_model, num_classes)
        _init_linears(self)
        self.embed = Embedder(_embedding(vocab_size, d_model), d_model, dropout, max_len)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        h = self.encoder(self.embed(ids), mask)  # (B, L, d)
        if self.pooling == "first":
            pooled = h[:, 0]
        elif self.pooling == "mean":
            pooled = masked_mean(h, mask, dim=1)  # (B, d)
        else:
            pooled = masked_max(h, mask, dim=1)
        return self.classifier(pooled)  # (B, C); T2T's class-label top: pool then dense, no dropout
