"""AttentionMaps: every attention (softmax and CoDA, pairwise and multi-head) returns the same typed fields."""

from __future__ import annotations

import pytest
import torch

from coda_exp.attention import (
    AttentionMaps,
    CoDACrossAttention,
    CoDAScoring,
    MultiHeadAttention,
    SoftmaxCrossAttention,
    SoftmaxScoring,
)

CODA_FIELDS = ["weights", "E", "N", "f_E", "f_N", "gate"]


def _pair():
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(2, 4, 6, dtype=torch.float64, generator=gen), torch.randn(2, 5, 6, dtype=torch.float64,
                                                                                 generator=gen)
    mask_a, mask_b = torch.ones(2, 4, dtype=torch.bool), torch.ones(2, 5, dtype=torch.bool)
    mask_a[0, 3:], mask_b[1, 2:] = False, False
    return a, b, mask_a, mask_b


@pytest.mark.parametrize("attention", [SoftmaxCrossAttention, CoDACrossAttention])
def test_cross_attention_maps_reproduce_the_outputs(attention):
    a, b, mask_a, mask_b = _pair()
    torch.manual_seed(0)
    module = attention(6, hidden=8, dropout=0.0).double().eval()
    a2, b2, maps = module(a, b, mask_a, mask_b, return_maps=True)
    assert isinstance(maps, AttentionMaps) and maps.weights.shape == (2, 4, 5)
    assert torch.equal(maps.mask, mask_a[:, :, None] & mask_b[:, None, :])
    torch.testing.assert_close(a2, maps.weights @ b)  # weights: the matrix applied to the values
    reverse = maps.weights if maps.reverse_weights is None else maps.reverse_weights
    torch.testing.assert_close(b2, reverse.transpose(1, 2) @ a)
    invalid = ~maps.valid()
    for name in maps.names():
        assert torch.equal(getattr(maps, name)[invalid], torch.zeros(int(invalid.sum()), dtype=torch.float64)) \
            or name == "scores", name
        assert maps.values(name).shape == (int(maps.valid().sum()),)
    if attention is SoftmaxCrossAttention:
        assert maps.names() == ["weights", "reverse_weights", "scores"]
        rows = maps.weights.sum(-1)[maps.valid().any(-1)]
        torch.testing.assert_close(rows, torch.ones_like(rows))
    else:
        assert maps.names() == CODA_FIELDS
        torch.testing.assert_close(maps.weights, maps.f_E * maps.gate)


@pytest.mark.parametrize("scoring", [SoftmaxScoring, CoDAScoring])
def test_multihead_maps_have_the_same_fields_and_mask_padded_queries(scoring):
    gen = torch.Generator().manual_seed(1)
    q, kv = torch.randn(2, 5, 8, dtype=torch.float64, generator=gen), torch.randn(2, 6, 8, dtype=torch.float64,
                                                                                  generator=gen)
    kpm, qpm = torch.ones(2, 6, dtype=torch.bool), torch.ones(2, 5, dtype=torch.bool)
    kpm[0, 4:], qpm[1, 3:] = False, False
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, scoring()).double().eval()
    out, maps = mha(q, kv, kv, key_padding_mask=kpm, causal=True, return_maps=True, query_padding_mask=qpm)
    torch.testing.assert_close(out, mha(q, kv, kv, key_padding_mask=kpm, causal=True, query_padding_mask=qpm))
    assert maps.weights.shape == (2, 2, 5, 6)
    valid = maps.valid()
    assert not valid[1, :, 3:].any() and not valid[0, :, :, 4:].any()  # padded queries and keys
    assert not valid[:, :, 0, 2:].any()  # causal: the first query (aligned with key 1) sees keys 0..1
    assert maps.names() == (["weights", "scores"] if scoring is SoftmaxScoring else CODA_FIELDS)
    with pytest.raises(KeyError, match=r"AttentionMaps has no 'E'; present: \['weights', 'scores'\]") \
            if scoring is SoftmaxScoring else pytest.raises(KeyError, match="no 'scores'"):
        maps.values("E" if scoring is SoftmaxScoring else "scores")


def test_maps_without_a_mask_count_every_pair():
    maps = AttentionMaps(weights=torch.arange(6.0).reshape(2, 3))
    assert maps.valid().all() and torch.equal(maps.values("weights"), torch.arange(6.0))
    with pytest.raises(KeyError):
        maps.values("mask")
