import functools

import pytest
import torch

from coda_exp.attention import (
    CoDACrossAttention,
    SoftmaxCrossAttention,
    masked_max,
    masked_mean,
    masked_softmax,
)
from coda_exp.models import DecompAtt

ATTENTIONS = {"softmax": functools.partial(SoftmaxCrossAttention, hidden=16, dropout=0.0),
              "coda": functools.partial(CoDACrossAttention, hidden=16, dropout=0.0),
              "coda_centred": functools.partial(CoDACrossAttention, hidden=16, dropout=0.0, center_e=True,
                                                center_n=True)}


def make_model(attention, intra=False, seed=0):
    torch.manual_seed(seed)
    return DecompAtt(vocab_size=30, num_classes=3, attention=ATTENTIONS[attention], hidden_size=16,
                     embedding_dim=8, dropout=0.0, intra_attention=intra).double().eval()


def pad(ids, extra):
    return torch.cat([ids, torch.zeros(ids.shape[0], extra, dtype=ids.dtype)], 1)


@pytest.mark.parametrize("attention", sorted(ATTENTIONS))
@pytest.mark.parametrize("intra", [False, True])
def test_padding_changes_no_output(attention, intra):
    model = make_model(attention, intra)
    a = torch.tensor([[3, 4, 5, 0], [6, 7, 0, 0]])
    b = torch.tensor([[8, 9, 10], [11, 0, 0]])
    out = model(a, a != 0, b, b != 0)
    a2, b2 = pad(a, 5), pad(b, 3)
    out2 = model(a2, a2 != 0, b2, b2 != 0)
    torch.testing.assert_close(out, out2, rtol=0, atol=1e-12)
    # one example alone equals that example in a padded batch
    single = model(a[1:, :2], a[1:, :2] != 0, b[1:, :1], b[1:, :1] != 0)
    torch.testing.assert_close(single, out[1:], rtol=0, atol=1e-12)
    # and the padded token ids themselves are irrelevant: fill padding with real ids, keep the mask
    a3 = a2.masked_fill(a2 == 0, 7)
    out3 = model(a3, a2 != 0, b2, b2 != 0)
    torch.testing.assert_close(out, out3, rtol=0, atol=1e-12)


def test_real_tokens_do_change_the_output():
    model = make_model("softmax")
    a, b = torch.tensor([[3, 4, 5]]), torch.tensor([[8, 9, 10]])
    a2 = torch.tensor([[3, 4, 6]])
    assert not torch.allclose(model(a, a != 0, b, b != 0), model(a2, a2 != 0, b, b != 0))


def test_pretrained_embeddings_are_frozen_and_projected():
    emb = torch.randn(30, 5)
    model = DecompAtt(30, 2, ATTENTIONS["softmax"], hidden_size=16, embeddings=emb)
    assert not model.embed.embed.weight.requires_grad
    assert model.embed.proj.weight.shape == (16, 5) and model.embed.proj.weight.requires_grad
    assert torch.equal(model.embed.embed.weight, emb)
    trained = DecompAtt(30, 2, ATTENTIONS["softmax"], hidden_size=16)
    assert trained.embed.embed.weight.requires_grad


def test_masked_reductions_ignore_padding():
    x = torch.tensor([[[1.0], [3.0], [100.0]]])
    mask = torch.tensor([[True, True, False]])
    assert masked_mean(x, mask).item() == 2.0
    assert masked_max(x, mask).item() == 3.0
    probs = masked_softmax(torch.tensor([[1.0, 2.0, 50.0]]), mask)
    assert probs[0, 2].item() == 0.0 and probs.sum().item() == pytest.approx(1.0)
    empty = masked_softmax(torch.zeros(1, 3), torch.zeros(1, 3, dtype=torch.bool))
    assert torch.equal(empty, torch.zeros(1, 3))
