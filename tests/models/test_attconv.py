"""AttConv (Yin & Schütze 2018): parameter counts, equations against loops, padding, contexts, heads, CoDA."""

import functools

import pytest
import torch

from coda_exp.attention import CoDACrossAttention, SoftmaxCrossAttention
from coda_exp.models import (
    AttConvAdvanced,
    AttConvLight,
    AttConvNoConv,
    attconv_parameter_count,
    parameter_counts,
)
from coda_exp.models.attconv import concatenate_contexts
from coda_exp.models.attconv_layers import AttentiveContext, GatedConv, LightAttConv

MODELS = {"light": AttConvLight, "advanced": AttConvAdvanced, "noconv": AttConvNoConv}
ATTENTIONS = {"paper": None,
              "coda": functools.partial(CoDACrossAttention, hidden=4, dropout=0.0),
              "coda_centred": functools.partial(CoDACrossAttention, hidden=4, dropout=0.0, center_e=True,
                                                center_n=True),
              "softmax": functools.partial(SoftmaxCrossAttention, hidden=4, dropout=0.0)}


def make(kind="light", attention="paper", seed=0, **kwargs):
    torch.manual_seed(seed)
    return MODELS[kind](30, 3, attention=ATTENTIONS[attention], embedding_dim=6, hidden_size=5,
                        **kwargs).double().eval()


def pad(ids, extra):
    return torch.cat([ids, torch.zeros(*ids.shape[:-1], extra, dtype=ids.dtype)], -1)


# -- parameter counts (Table 7) ------------------------------------------------------------------------------------

def test_light_has_the_papers_360k_at_300():
    model = AttConvLight(50, 3)
    conv, ctx = model.layer.attconv.conv, model.layer.attconv.context
    assert conv.weight.numel() == 270_000 and ctx.weight.numel() == 90_000 and conv.bias.numel() == 300
    assert attconv_parameter_count(model) == 360_300 and round(attconv_parameter_count(model), -4) == 360_000
    counts = parameter_counts(model)
    assert counts == {"attconv": 360_300, "embeddings": 15_000, "head": 903, "total": 360_300 + 15_000 + 903}


def test_other_counts_at_300():
    assert attconv_parameter_count(AttConvNoConv(50, 3)) == 4 * 90_300  # "the same size of parameters" as light
    assert attconv_parameter_count(AttConvAdvanced(50, 3)) == 1_352_100
    assert attconv_parameter_count(AttConvAdvanced(50, 3, share_beneficiary=True)) == 1_171_500
    assert attconv_parameter_count(AttConvLight(50, 3, matching="bilinear")) == 360_300 + 90_000
    assert attconv_parameter_count(AttConvLight(50, 3, matching="additive")) == 360_300 + 180_300
    coda = functools.partial(CoDACrossAttention, hidden=300)
    assert attconv_parameter_count(AttConvLight(50, 3, attention=coda)) == 360_300 + 90_300  # F_E (= F_N)
    assert parameter_counts(AttConvLight(50, 3, head="symmetric"))["head"] == 1200 * 300 + 300 + 903


# -- equations against loops ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("matching", ["dot", "bilinear", "additive"])
def test_context_and_light_convolution_follow_eqs_1_to_6(matching):
    torch.manual_seed(1)
    layer = LightAttConv(4, 3, matching).double()
    hx, hy = torch.randn(1, 3, 4, dtype=torch.double), torch.randn(1, 5, 4, dtype=torch.double)
    mx, my = torch.ones(1, 3, dtype=torch.bool), torch.tensor([[True, True, True, False, False]])
    hy = hy * my[..., None]
    match, w1, b, w2 = layer.context.matching, layer.attconv.conv.weight, layer.attconv.conv.bias, \
        layer.attconv.context.weight
    for i in range(3):
        if matching == "dot":
            e = torch.stack([hx[0, i] @ hy[0, j] for j in range(3)])
        elif matching == "bilinear":
            e = torch.stack([hx[0, i] @ match.weight @ hy[0, j] for j in range(3)])
        else:
            e = torch.stack([match.v.weight[0] @ torch.tanh(match.w.weight @ hx[0, i] + match.u.weight @ hy[0, j])
                             for j in range(3)])
        c = (torch.softmax(e, 0)[:, None] * hy[0, :3]).sum(0)  # eq. 4 over the real j only
        window = [hx[0, i + k] if 0 <= i + k < 3 else torch.zeros(4, dtype=torch.double) for k in (-1, 0, 1)]
        conv = sum(w1[:, :, k] @ window[k] for k in range(3))  # W¹ [h_{i-1}, h_i, h_{i+1}]
        expected = torch.tanh(conv + w2 @ c + b)  # eqs. 5-6
        torch.testing.assert_close(layer(hx, mx, hy, my)[0, i], expected)


def test_gated_convolution_follows_eqs_7_to_9():
    torch.manual_seed(2)
    gconv = GatedConv(4, 3).double()
    h = torch.randn(1, 3, 4, dtype=torch.double)
    out = gconv(h, torch.ones(1, 3, dtype=torch.bool))
    w, b = gconv.conv.weight, gconv.conv.bias  # (2d, d, 3): rows [W_h; W_g]
    i = 1
    win = torch.cat([h[0, 0], h[0, 1], h[0, 2]])
    flat = w.permute(0, 2, 1).reshape(8, 12)  # [h_{i-1}, h_i, h_{i+1}] -> 2d
    o, g = torch.tanh(flat[:4] @ win + b[:4]), torch.sigmoid(flat[4:] @ win + b[4:])
    torch.testing.assert_close(out[0, i], g * h[0, i] + (1 - g) * o)


def test_coda_replaces_the_softmax_over_the_matchings_factor():
    torch.manual_seed(3)
    ctx = AttentiveContext(4, "bilinear", ATTENTIONS["coda"]).double()
    hx, hy = torch.randn(2, 3, 4, dtype=torch.double), torch.randn(2, 5, 4, dtype=torch.double)
    mx, my = torch.tensor([[1, 1, 0], [1, 1, 1]]).bool(), torch.tensor([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0]]).bool()
    c = ctx(hx, hy, mx, my)
    expected, _, maps = ctx.attention(hx @ ctx.matching.weight, hy, mx, my, return_maps=True)
    torch.testing.assert_close(c, expected)
    torch.testing.assert_close(c, maps.weights @ hy)
    assert torch.equal(c[0, 2], torch.zeros(4, dtype=torch.double))  # a padded source position gathers nothing
    with pytest.raises(ValueError, match="model.matching=additive"):
        AttentiveContext(4, "additive", ATTENTIONS["coda"])


# -- padding, max-pool, modes --------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(MODELS))
@pytest.mark.parametrize("attention", sorted(ATTENTIONS))
@pytest.mark.parametrize("head", ["paper", "symmetric"])
def test_padding_changes_no_output(kind, attention, head):
    model = make(kind, attention, head=head)
    a, b = torch.tensor([[3, 4, 5, 0], [6, 7, 0, 0]]), torch.tensor([[8, 9, 10], [11, 0, 0]])
    out = model(a, a != 0, b, b != 0)
    a2, b2 = pad(a, 4), pad(b, 3)
    torch.testing.assert_close(model(a2, a2 != 0, b2, b2 != 0), out, rtol=0, atol=1e-12)
    filled_a, filled_b = a2.masked_fill(a2 == 0, 7), b2.masked_fill(b2 == 0, 12)  # real ids under the mask
    torch.testing.assert_close(model(filled_a, a2 != 0, filled_b, b2 != 0), out, rtol=0, atol=1e-12)
    torch.testing.assert_close(model(a[1:, :2], a[1:, :2] != 0, b[1:, :1], b[1:, :1] != 0), out[1:],
                               rtol=0, atol=1e-12)
    single = model(filled_a, a2 != 0)  # intra-context
    torch.testing.assert_close(single, model(a, a != 0), rtol=0, atol=1e-12)
    b3 = torch.tensor([[3, 4, 6]])
    assert not torch.allclose(model(a[:1], a[:1] != 0, b3, b3 != 0), out[:1])  # real tokens do matter


def test_padding_never_wins_the_max_pool():
    model = make("light")
    with torch.no_grad():
        model.layer.attconv.conv.bias.fill_(-30.0)  # every real position's features are ~ -1, padding's would be 0
    a = torch.tensor([[3, 4, 0, 0]])
    pooled = model.encode(model.embed_tokens(a, a != 0), a != 0, model.embed_tokens(a, a != 0), a != 0)
    assert torch.all(pooled < -0.99)


def test_pair_target_b_makes_the_hypothesis_t_x():
    by_b, by_a = make(pair_target="b"), make(pair_target="a")
    a, b = torch.tensor([[3, 4, 5]]), torch.tensor([[8, 9]])
    torch.testing.assert_close(by_b(a, a != 0, b, b != 0), by_a(b, b != 0, a, a != 0))
    assert not torch.allclose(by_b(a, a != 0, b, b != 0), by_a(a, a != 0, b, b != 0))


# -- several contexts (FEVER) ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(MODELS))
@pytest.mark.parametrize("attention", ["paper", "coda"])
@pytest.mark.parametrize("head", ["paper", "symmetric"])
def test_context_wise_equals_conc_with_one_evidence_sentence(kind, attention, head):
    wise, conc = make(kind, attention, contexts="wise", head=head), make(kind, attention, contexts="conc", head=head)
    claim = torch.tensor([[3, 4, 5], [6, 7, 0]])
    evidence = torch.zeros(2, 3, 4, dtype=torch.long)
    evidence[0, 1, :3] = torch.tensor([8, 9, 10])  # claim 0: its one sentence in the middle row
    evidence[1, 0, :2] = torch.tensor([11, 12])
    args = claim, claim != 0, evidence, evidence != 0
    torch.testing.assert_close(wise(*args), conc(*args), rtol=0, atol=1e-12)
    pair = torch.tensor([[8, 9, 10], [11, 12, 0]])  # the same as a plain pair
    as_pair = make(kind, attention, head=head, pair_target="a")  # the same weights, the claim as t^x
    torch.testing.assert_close(conc(*args), as_pair(claim, claim != 0, pair, pair != 0), rtol=0, atol=1e-12)
    evidence[0, 2, :2] = torch.tensor([13, 14])  # a second sentence: now the two readings differ
    assert not torch.allclose(wise(claim, claim != 0, evidence, evidence != 0),
                              conc(claim, claim != 0, evidence, evidence != 0))


def test_context_wise_is_the_max_over_sentences():
    model = make("light", contexts="wise")
    claim = torch.tensor([[3, 4, 5]])
    evidence = torch.tensor([[[8, 9, 0], [10, 11, 12], [0, 0, 0]]])
    feats = [model.pair_features(claim, claim != 0, s[None], s[None] != 0) for s in evidence[0, :2]]
    expected = model.head(torch.maximum(*feats))
    torch.testing.assert_close(model(claim, claim != 0, evidence, evidence != 0), expected)


@pytest.mark.parametrize("contexts", ["wise", "conc"])
@pytest.mark.parametrize("attention", ["paper", "coda_centred"])
def test_a_claim_without_evidence_has_an_empty_context(contexts, attention):
    model = make("advanced", attention, contexts=contexts).train()
    claim = torch.tensor([[3, 4, 5], [6, 7, 0]])
    evidence = torch.zeros(2, 2, 3, dtype=torch.long)
    evidence[1, 1, :2] = torch.tensor([8, 9])
    out = model(claim, claim != 0, evidence, evidence != 0)
    out.sum().backward()
    assert torch.isfinite(out).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    empty = torch.zeros(1, 1, 1, dtype=torch.long)  # one absent sentence
    torch.testing.assert_close(out[:1], model(claim[:1], claim[:1] != 0, empty, empty != 0))


def test_concatenate_contexts_keeps_real_tokens_in_order():
    ids = torch.tensor([[[1, 2, 0], [0, 0, 0], [3, 0, 0]], [[0, 0, 0], [0, 0, 0], [0, 0, 0]]])
    out, mask = concatenate_contexts(ids, ids != 0)
    assert out.tolist() == [[1, 2, 3], [0, 0, 0]] and mask.tolist() == [[True] * 3, [False] * 3]


# -- construction ---------------------------------------------------------------------------------------------------

def test_pretrained_embeddings_are_fine_tuned_unless_frozen():
    emb = torch.randn(30, 7)
    model = AttConvLight(30, 2, embeddings=emb, hidden_size=5)
    assert torch.equal(model.embed.weight, emb) and model.embed.weight.requires_grad
    assert model.layer.attconv.conv.weight.shape == (5, 7, 3)  # the matrix's width wins over embedding_dim
    assert not AttConvLight(30, 2, embeddings=emb, freeze_embeddings=True).embed.weight.requires_grad
    with pytest.raises(ValueError, match="rows but the vocabulary has 31"):
        AttConvLight(31, 2, embeddings=emb)


@pytest.mark.parametrize("key,value", [("contexts", "all"), ("head", "mlp"), ("pair_target", "c"),
                                       ("matching", "cosine"), ("freeze_embeddings", "auto")])
def test_bad_options_name_their_key(key, value):
    with pytest.raises(ValueError, match=f"model.{key}"):
        AttConvLight(30, 2, **{key: value})
