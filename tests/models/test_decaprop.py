"""DecaProp (NOTES DecaProp items 1-7): shapes, masking, padding invariance, softmax vs CoDA, gradients, options."""

from functools import partial

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from coda_exp.attention import CoDACrossAttention
from coda_exp.models import DecaProp
from coda_exp.models.decaprop_layers import FactorizationMachine, ScaledBiAttention, _run_packed, _run_padded
from coda_exp.pipeline import _strip

V, C = 30, 12
SMALL = {"embedding_dim": 8, "hidden_size": 6, "encoder_layers": 2, "fm_factors": 4}
CODA = partial(CoDACrossAttention, hidden=6)


def batch(lp=(7, 5), lq=(4, 2), width=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    b = len(lp)
    p_mask = torch.arange(max(lp))[None] < torch.tensor(lp)[:, None]  # (B, Lp)
    q_mask = torch.arange(max(lq))[None] < torch.tensor(lq)[:, None]  # (B, Lq)
    p_ids = torch.randint(1, V, p_mask.shape, generator=g) * p_mask
    q_ids = torch.randint(1, V, q_mask.shape, generator=g) * q_mask
    p_chars = torch.randint(1, C, (b, max(lp), width), generator=g) * p_mask[..., None]
    q_chars = torch.randint(1, C, (b, max(lq), width), generator=g) * q_mask[..., None]
    p_chars[..., -1] = 0  # words shorter than the char window
    p_em = (torch.rand(p_mask.shape, generator=g) > 0.5).float() * p_mask
    q_em = (torch.rand(q_mask.shape, generator=g) > 0.5).float() * q_mask
    return {"p_ids": p_ids, "p_mask": p_mask, "q_ids": q_ids, "q_mask": q_mask, "p_chars": p_chars,
            "q_chars": q_chars, "p_em": p_em, "q_em": q_em}


def pad(inputs, extra_p=3, extra_q=2):
    out = {}
    for key, x in inputs.items():
        extra = extra_p if key.startswith("p_") else extra_q
        shape = (x.shape[0], extra) + tuple(x.shape[2:])
        out[key] = torch.cat([x, torch.zeros(shape, dtype=x.dtype)], dim=1)
    return out


def model(seed=0, **kw):
    torch.manual_seed(seed)
    return DecaProp(V, char_vocab_size=C, **{**SMALL, **kw})


def test_shapes_and_logits_masked_outside_the_passage():
    inputs = batch()
    for kw in ({}, {"attention": CODA}, {"fusion": "gated", "use_char": True, "use_exact_match": True}):
        start, end = model(**kw).eval()(**inputs)
        assert start.shape == end.shape == (2, 7) and start.dtype == torch.float32
        assert (start[1, 5:] == -1e30).all() and (end[1, 5:] == -1e30).all()
        assert torch.isfinite(start).all() and (start[inputs["p_mask"]] > -1e3).all()
        assert torch.isfinite(torch.nn.functional.cross_entropy(start, torch.tensor([0, 4])))


@pytest.mark.parametrize("kw", [{}, {"attention": CODA}, {"fusion": "gated", "use_char": True,
                                                          "use_exact_match": True},
                                {"attention": CODA, "coda_in_bac": True, "coda_in_self_attention": True}],
                         ids=["softmax", "coda", "gated-char-em", "coda-everywhere"])
def test_padding_invariance(kw):
    net = model(**kw).double().eval()
    inputs = batch()
    inputs = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
    start, end = net(**inputs)
    start_pad, end_pad = net(**pad(inputs))
    mask = inputs["p_mask"]
    torch.testing.assert_close(start_pad[:, :7][mask], start[mask], atol=1e-10, rtol=0)
    torch.testing.assert_close(end_pad[:, :7][mask], end[mask], atol=1e-10, rtol=0)
    assert (start_pad[:, 7:] == -1e30).all()


def test_unmasked_bac_lets_padding_in():
    """bac_masking=False is the authors' code: padding takes BAC attention weight, so outputs move with it."""
    net = model(bac_masking=False).double().eval()
    inputs = {k: v.double() if v.is_floating_point() else v for k, v in batch().items()}
    start, _ = net(**inputs)
    start_pad, _ = net(**pad(inputs))
    mask = inputs["p_mask"]
    assert not torch.allclose(start_pad[:, :7][mask], start[mask], atol=1e-8)


def test_softmax_and_coda_both_run_and_differ():
    soft, coda = model(), model(attention=CODA)
    assert isinstance(soft.cq_attention, ScaledBiAttention) and isinstance(coda.cq_attention, CoDACrossAttention)
    assert isinstance(coda.bacs[0].aligner, ScaledBiAttention)  # default: CoDA in the context-query attention only
    state = {k: v for k, v in soft.state_dict().items() if not k.startswith("cq_attention")}
    coda.load_state_dict(state, strict=False)  # same weights everywhere else, the same projection W ...
    coda.cq_attention.proj_e[1].load_state_dict(soft.cq_attention.proj[0].state_dict())
    inputs = batch()
    s1, _ = soft.eval()(**inputs)
    s2, _ = coda.eval()(**inputs)
    assert not torch.allclose(s1[inputs["p_mask"]], s2[inputs["p_mask"]])  # ... different attention


def test_coda_options_reach_bacs_and_self_attention():
    net = model(attention=CODA, coda_in_bac=True, coda_in_self_attention=True)
    assert all(isinstance(bac.aligner, CoDACrossAttention) for bac in net.bacs) and len(net.bacs) == 4
    assert isinstance(net.self_attention.aligner, CoDACrossAttention)


@pytest.mark.parametrize("kw", [{}, {"attention": CODA, "coda_in_bac": True, "coda_in_self_attention": True,
                                     "fusion": "gated", "use_char": True, "use_exact_match": True}])
def test_gradient_reaches_every_parameter(kw):
    net = model(**kw).train()
    inputs = batch()
    start, end = net(**inputs)
    loss = (torch.nn.functional.cross_entropy(start, torch.tensor([1, 3]))
            + torch.nn.functional.cross_entropy(end, torch.tensor([2, 4]))) / 2
    loss.backward()
    assert net.embed.weight.requires_grad  # no vectors given: random vectors are trained ("auto")
    for name, param in net.named_parameters():
        if param.requires_grad:
            assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_factorization_machine_matches_the_pairwise_sum():
    fm = FactorizationMachine(5, 3).double()
    with torch.no_grad():
        fm.w0.fill_(0.3)
        fm.w.normal_()
    x = torch.randn(4, 5, dtype=torch.double)
    gram = fm.v @ fm.v.T  # <v_i, v_j>
    pairs = sum(gram[i, j] * x[:, i] * x[:, j] for i in range(5) for j in range(i + 1, 5))
    torch.testing.assert_close(fm(x), 0.3 + x @ fm.w + pairs)


def test_empty_query_is_finite():
    inputs = batch(lq=(4, 0))
    start, end = model(attention=CODA).eval()(**inputs)
    assert torch.isfinite(start).all() and torch.isfinite(end).all()


def test_option_errors():
    with pytest.raises(ValueError, match="reuse the injected attention"):
        model(coda_in_bac=True)
    with pytest.raises(ValueError, match="fusion"):
        model(fusion="concat")
    with pytest.raises(ValueError, match="char_vocab_size"):
        DecaProp(V, use_char=True)
    with pytest.raises(ValueError, match="freeze_embeddings"):
        model(freeze_embeddings="yes")
    with pytest.raises(ValueError, match="rows"):
        DecaProp(V, embeddings=torch.zeros(V + 1, 4))
    inputs = batch()
    with pytest.raises(ValueError, match="p_chars"):
        model(use_char=True)(**{**inputs, "p_chars": None})
    with pytest.raises(ValueError, match="q_em"):
        model(use_exact_match=True)(**{**inputs, "q_em": None})
    with pytest.raises(ValueError, match="left-aligned"):
        model()(**{**inputs, "p_mask": inputs["p_mask"].flip(-1)})


def test_pretrained_embeddings_frozen_and_their_width_wins():
    vectors = torch.randn(V, 10)
    net = DecaProp(V, embeddings=vectors, hidden_size=4, encoder_layers=1, fm_factors=2)
    assert net.embed.weight.shape == (V, 10) and not net.embed.weight.requires_grad
    assert torch.equal(net.embed.weight, vectors)
    assert DecaProp(V, hidden_size=4, encoder_layers=1, freeze_embeddings=False).embed.weight.requires_grad
    # random vectors used to be frozen by default: the paper-scale run trained on a fixed random table
    assert DecaProp(V, hidden_size=4, encoder_layers=1).embed.weight.requires_grad
    assert not DecaProp(V, hidden_size=4, encoder_layers=1, freeze_embeddings=True).embed.weight.requires_grad


@pytest.mark.parametrize("name", ["decaprop", "decaprop_coda"])
def test_yaml(make_cfg, name):
    cfg = make_cfg(f"model={name}", "model.attention.kernel=torch" if name == "decaprop_coda" else "model.dropout=0.2")
    node = _strip(OmegaConf.to_container(cfg.model, resolve=True))
    assert list(cfg.model.families) == ["span_extraction"] and cfg.model.name == name
    net = instantiate(node, vocab_size=V, embeddings=None, pad_id=0, char_vocab_size=None)
    assert isinstance(net, DecaProp) and len(net.bacs) == 9 and net.fusion.kind == "submult"
    assert isinstance(net.cq_attention, CoDACrossAttention if name == "decaprop_coda" else ScaledBiAttention)
    assert net.encoder[0].rnn.hidden_size == 64 and net.encoder[0].drop.p == 0.2


def test_the_padded_recurrence_is_the_packed_one():
    """What torch.compile runs (``_run_padded``: no packing) equals the packed GRU: outputs, last states, gradients,
    with an empty row and padding holding garbage."""
    torch.manual_seed(0)
    rnn = torch.nn.GRU(4, 5, batch_first=True, bidirectional=True).double()
    x = torch.randn(4, 6, 4, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([6, 3, 0, 1])
    results = []
    for run in (_run_packed, _run_padded):
        out, last = run(rnn, x, lengths)
        loss = (out * torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)).sum() \
            + last.square().sum()
        results.append((out, last, *torch.autograd.grad(loss, (x, *rnn.parameters()))))
    for packed, padded in zip(*results):
        torch.testing.assert_close(padded, packed, rtol=1e-12, atol=1e-12)
    assert (results[1][0][2] == 0).all() and (results[1][1][2] == 0).all() and (results[1][0][1, 3:] == 0).all()


@pytest.mark.slow
def test_decaprop_with_coda_compiles_with_fullgraph():
    """DecaProp + CoDA (with its char encoder) traces with fullgraph once dynamo may trace GRUs, and matches eager
    in float64 (forward and every parameter's gradient)."""
    kw = {"attention": CODA, "use_char": True}
    eager, compiled = (model(**kw).double().eval() for _ in range(2))
    inputs = {k: v.double() if v.is_floating_point() else v for k, v in batch().items()}
    with torch._dynamo.config.patch(allow_rnn=True):
        got = torch.compile(compiled, fullgraph=True)(**inputs)
    want = eager(**inputs)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
    sum(g.clamp(min=-1e3).sum() for g in got).backward()
    sum(w.clamp(min=-1e3).sum() for w in want).backward()
    for (name, a), b in zip(compiled.named_parameters(), eager.parameters()):
        if b.grad is not None:
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-8, atol=1e-10, msg=name)
