"""Attentive Convolution (Yin & Schütze, TACL 2018): embedding -> attentive convolution -> max-pool -> classifier.

One model family for three task families, by the shape of ``b_ids``:

* ``forward(ids, mask)``: intra-context (§4.1, Yelp), t^y = t^x.
* ``forward(a_ids, a_mask, b_ids, b_mask)``, b 2-D: a pair; t^x is side ``pair_target`` (default ``b``, the
  hypothesis of the pair data's (premise, hypothesis): §4.2 models the hypothesis t^x with the premise as t^y).
* ``forward(claim_ids, claim_mask, evidence_ids, evidence_mask)``, evidence (B, K, Le): several contexts (§4.3);
  t^x is the claim; ``contexts="wise"``: each sentence its own t^y, element-wise max over the features of the
  valid sentences; ``"conc"``: the valid tokens of all sentences concatenated into one t^y. A row without a real
  token is an absent sentence; a claim with none is modelled with an empty context (c^x = 0), without NaNs.

The layer is ``AttConvLight`` (eqs. 1-6), ``AttConvAdvanced`` (eqs. 7-13) or ``AttConvNoConv`` (the "w/o
convolution" baseline); the head is the paper's (the pooled t^x vector -> logistic regression, §4.1) or the
authors' code's symmetric one. ``attention``: None for the paper's softmax (eq. 4), or a cross-attention factory
(``model/attention=coda``: CoDA replaces the softmax; see ``attconv_layers.AttentiveContext``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from coda_exp.attention.masking import masked_max
from coda_exp.models.attconv_layers import AdvancedAttConv, LightAttConv, NoConvAttConv, keep

Encode = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class PaperHead(nn.Module):
    """§4.1: the max-pooled representation of t^x (B, hidden) -> logistic regression (B, C)."""

    def __init__(self, hidden: int, num_classes: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden, num_classes)

    def features(self, encode: Encode, hx, mx, hy, my) -> torch.Tensor:  # -> (B, hidden)
        return encode(hx, mx, hy, my)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.out(self.dropout(features))


class SymmetricHead(nn.Module):
    """The authors' entailment head (their code, SNLI/SciTail light scripts): the same layer in both directions,
    l = pool(t^x | t^y), r = pool(t^y | t^x); features [l, r, l + r, l ⊙ r] (B, 4 hidden) -> tanh hidden layer ->
    softmax regression. Their second channel (filter width 1), BatchNorms and batch-wise column normalisation
    are left out (docs/attconv.md)."""

    def __init__(self, hidden: int, num_classes: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.hidden = nn.Linear(4 * hidden, hidden)
        self.out = nn.Linear(hidden, num_classes)

    def features(self, encode: Encode, hx, mx, hy, my) -> torch.Tensor:  # -> (B, 4 hidden)
        left, right = encode(hx, mx, hy, my), encode(hy, my, hx, mx)
        return torch.cat([left, right, left + right, left * right], dim=-1)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.out(self.dropout(torch.tanh(self.hidden(self.dropout(features)))))


HEADS = {"paper": PaperHead, "symmetric": SymmetricHead}
CONTEXTS = ("wise", "conc")
PAIR_TARGETS = ("a", "b")


def concatenate_contexts(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Context-conc: ids/mask (B, K, Le) -> (B, L) with the real tokens of all K sentences in order, then padding;
    L = the most real tokens of any claim (at least 1; a claim with none gets an all-False row)."""
    flat_ids, flat_mask = ids.flatten(1), mask.flatten(1)  # (B, K Le)
    order = torch.sort((~flat_mask).to(torch.int8), dim=1, stable=True).indices  # real tokens first, in order
    length = int(flat_mask.sum(1).max().clamp(min=1))
    return flat_ids.gather(1, order)[:, :length], flat_mask.gather(1, order)[:, :length]


def word_embeddings(vocab_size: int, dim: int, embeddings: torch.Tensor | None, freeze: bool,
                    pad_id: int) -> nn.Embedding:
    """The lookup table (vocab, dim), initialised from the pretrained ``embeddings`` (vocab, any width: theirs wins)
    when given, no projection (eq. 5's W¹ reads the word vectors); trained unless ``freeze``."""
    if embeddings is None:
        table = nn.Embedding(vocab_size, dim, padding_idx=pad_id)
    elif embeddings.shape[0] != vocab_size:
        raise ValueError(f"pretrained embeddings have {embeddings.shape[0]} rows but the vocabulary has "
                         f"{vocab_size} words")
    else:
        table = nn.Embedding.from_pretrained(embeddings.detach().clone().float(), padding_idx=pad_id)
    table.weight.requires_grad_(not freeze)
    return table


class AttConvLight(nn.Module):
    """Light AttConv (§3.1, eqs. 1-6). ``forward(a_ids, a_mask, b_ids=None, b_mask=None) -> logits (B, C)``.

    vocab_size, num_classes, embeddings (vocab, dim) pretrained or None, pad_id: from the data. embedding_dim:
    300 (word2vec; the pretrained matrix's width wins); freeze_embeddings: false (§4.1, fine-tuned); hidden_size:
    300; matching: dot | bilinear | additive (eqs. 1-3); attention: None (softmax, eq. 4) or a cross-attention
    factory; contexts: wise | conc; head: paper | symmetric; pair_target: a | b; dropout: on the embeddings and the
    head's input, 0.0 (neither the paper nor the authors' code uses any).
    """

    def __init__(self, vocab_size: int, num_classes: int, attention: Callable[..., nn.Module] | None = None,
                 embeddings: torch.Tensor | None = None, embedding_dim: int = 300, hidden_size: int = 300,
                 matching: str = "dot", contexts: str = "conc", head: str = "paper", pair_target: str = "b",
                 dropout: float = 0.0, freeze_embeddings: bool = False, pad_id: int = 0):
        super().__init__()
        for key, value, allowed in (("contexts", contexts, CONTEXTS), ("head", head, tuple(HEADS)),
                                    ("pair_target", pair_target, PAIR_TARGETS)):
            if value not in allowed:
                raise ValueError(f"model.{key} must be one of {list(allowed)}, got {value!r}")
        if not isinstance(freeze_embeddings, bool):
            raise ValueError(f"model.freeze_embeddings must be true or false, got {freeze_embeddings!r}")  # noqa: TRY004
        self.embed = word_embeddings(vocab_size, embedding_dim, embeddings, freeze_embeddings, pad_id)
        self.dropout = nn.Dropout(dropout)
        self.contexts, self.swap_pair = contexts, pair_target == "b"
        self.layer = self.build_layer(self.embed.embedding_dim, hidden_size, matching, attention)
        self.head = HEADS[head](hidden_size, num_classes, dropout)

    def build_layer(self, dim: int, hidden: int, matching: str, attention) -> nn.Module:
        return LightAttConv(dim, hidden, matching, attention)

    def parameter_breakdown(self) -> dict[str, int]:
        """The run record's ``parameters`` breakdown (``coda_exp.run_record.parameter_counts``)."""
        return parameter_counts(self)

    # -- pieces ----------------------------------------------------------------------------------------------------
    def embed_tokens(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # (B, L) -> (B, L, d), 0 at pads
        return keep(self.dropout(self.embed(ids)), mask)

    def encode(self, hx: torch.Tensor, mx: torch.Tensor, hy: torch.Tensor, my: torch.Tensor) -> torch.Tensor:
        """The max-pooled representation of t^x in the context t^y (B, hidden); padding never wins the max."""
        return masked_max(self.layer(hx, mx, hy, my), mx)

    def pair_features(self, x_ids, x_mask, y_ids, y_mask) -> torch.Tensor:
        hx = self.embed_tokens(x_ids, x_mask)
        hy = hx if y_ids is x_ids else self.embed_tokens(y_ids, y_mask)
        return self.head.features(self.encode, hx, x_mask, hy, y_mask)

    def context_wise(self, x_ids, x_mask, ids, mask) -> torch.Tensor:
        """Each of the K sentences (B, K, Le) its own t^y; element-wise max over the valid ones' features."""
        batch, k, length = ids.shape
        feats = self.pair_features(x_ids.repeat_interleave(k, 0), x_mask.repeat_interleave(k, 0),
                                   ids.reshape(batch * k, length), mask.reshape(batch * k, length))
        valid = mask.any(-1)  # (B, K)
        first = torch.arange(k, device=ids.device) == 0
        use = valid | (~valid.any(1, keepdim=True) & first)  # no valid sentence: the first (empty) row
        return masked_max(feats.view(batch, k, -1), use)  # (B, F)

    def forward(self, a_ids: torch.Tensor, a_mask: torch.Tensor, b_ids: torch.Tensor | None = None,
                b_mask: torch.Tensor | None = None) -> torch.Tensor:
        if b_ids is None:  # intra-context: t^y = t^x
            return self.head(self.pair_features(a_ids, a_mask, a_ids, a_mask))
        if b_mask is None:
            raise ValueError("b_ids given without b_mask")
        if b_ids.dim() == 3:  # several contexts (B, K, Le)
            if self.contexts == "wise":
                return self.head(self.context_wise(a_ids, a_mask, b_ids, b_mask))
            return self.head(self.pair_features(a_ids, a_mask, *concatenate_contexts(b_ids, b_mask)))
        if self.swap_pair:
            return self.head(self.pair_features(b_ids, b_mask, a_ids, a_mask))
        return self.head(self.pair_features(a_ids, a_mask, b_ids, b_mask))


class AttConvAdvanced(AttConvLight):
    """Advanced AttConv (§3.2, eqs. 7-13); the arguments of ``AttConvLight`` plus ``share_beneficiary`` (false:
    f_bene its own gated convolution; true: f_mgran's uni-gram one). See ``attconv_layers.AdvancedAttConv``."""

    def __init__(self, *args, share_beneficiary: bool = False, **kwargs):
        self.share_beneficiary = share_beneficiary  # read by build_layer during super().__init__
        super().__init__(*args, **kwargs)

    def build_layer(self, dim: int, hidden: int, matching: str, attention) -> nn.Module:
        return AdvancedAttConv(dim, hidden, matching, attention, self.share_beneficiary)


class AttConvNoConv(AttConvLight):
    """"w/o convolution" (§4): c^x_i + h^x_i through ``num_fc_layers`` (4) tanh layers, light's size."""

    def __init__(self, *args, num_fc_layers: int = 4, **kwargs):
        self.num_fc_layers = num_fc_layers  # read by build_layer during super().__init__
        super().__init__(*args, **kwargs)

    def build_layer(self, dim: int, hidden: int, matching: str, attention) -> nn.Module:
        return NoConvAttConv(dim, hidden, matching, attention, self.num_fc_layers)


def attconv_parameter_count(model: AttConvLight) -> int:
    """Parameters of the attentive convolution layer alone (matching, injected attention, gated convolutions,
    W¹, W², b): not the embeddings, not the head. Light at 300: 360,300 = Table 7's "360K"."""
    return sum(p.numel() for p in model.layer.parameters())


def parameter_counts(model: AttConvLight) -> dict[str, int]:
    """{"attconv": the layer (``attconv_parameter_count``), "embeddings", "head", "total"} (shared counted once)."""
    return {"attconv": attconv_parameter_count(model), "embeddings": model.embed.weight.numel(),
            "head": sum(p.numel() for p in model.head.parameters()),
            "total": sum(p.numel() for p in model.parameters())}
