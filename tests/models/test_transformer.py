"""Transformer encoder-decoder and classifier (CoDA paper §3.4, eq. 10): shapes, masks, causality, the step-wise
decoding cache, a copy task, and the Hydra configs that build them."""

import functools

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from coda_exp import pipeline
from coda_exp.attention import CoDAScoring, SoftmaxScoring
from coda_exp.models import TransformerClassifier, TransformerSeq2Seq, greedy_decode
from coda_exp.models.transformer import timing_signal
from tests import ROOT

pytestmark = pytest.mark.usefixtures("one_thread")

SCORINGS = {
    "softmax": SoftmaxScoring,
    "coda_scale": CoDAScoring,
    "coda_center": functools.partial(CoDAScoring, center_e=True, center_n=True, center_over="row"),
}


def seq2seq(scoring="softmax", dtype=torch.float64, **kw):
    torch.manual_seed(0)
    args = {"d_model": 16, "num_layers": 2, "num_heads": 2, "d_ff": 32, "dropout": 0.0, "attention_dropout": 0.0,
            "relu_dropout": 0.0, **kw}
    scoring = SCORINGS[scoring] if isinstance(scoring, str) else scoring
    return TransformerSeq2Seq(13, 11, scoring, **args).to(dtype).eval()


def padded(lengths, width, vocab, gen):
    """(B, width) random ids, real up to each length; padding holds random non-pad garbage (must not matter)."""
    ids = torch.randint(3, vocab, (len(lengths), width), generator=gen)
    mask = torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]
    return ids, mask


def test_shapes_and_timing_signal():
    model = seq2seq()
    src, tgt = torch.randint(3, 13, (3, 7)), torch.randint(3, 11, (3, 5))
    ones = torch.ones
    assert model(src, ones(3, 7, dtype=torch.bool), tgt, ones(3, 5, dtype=torch.bool)).shape == (3, 5, 11)
    assert model.encode(src, None).shape == (3, 7, 16)
    sig = timing_signal(50, 16)
    assert sig.shape == (50, 16)
    assert torch.allclose(sig[0], torch.tensor([0.0] * 8 + [1.0] * 8))  # [sin | cos] halves, position 0
    assert torch.allclose(sig[3, 0], torch.tensor(3.0).sin())  # timescale 1 on the first channel
    for pooling in ("mean", "first", "max"):
        clf = TransformerClassifier(20, 4, SoftmaxScoring, d_model=16, num_heads=2, d_ff=32, pooling=pooling)
        assert clf(torch.randint(0, 20, (2, 9)), torch.ones(2, 9, dtype=torch.bool)).shape == (2, 4)


def test_embedding_sharing_and_tying():
    with pytest.raises(ValueError, match="equal source and target vocabularies"):
        TransformerSeq2Seq(10, 12, SoftmaxScoring, shared_embeddings=True)
    shared = TransformerSeq2Seq(10, 10, SoftmaxScoring, d_model=16, num_heads=2, shared_embeddings=True)
    assert shared.src_embed.embedding.weight is shared.tgt_embed.embedding.weight
    tied = TransformerSeq2Seq(10, 12, SoftmaxScoring, d_model=16, num_heads=2)
    untied = TransformerSeq2Seq(10, 12, SoftmaxScoring, d_model=16, num_heads=2, tie_output=False)
    assert tied.output is None and untied.output.weight.shape == (12, 16)
    assert sum(p.numel() for p in untied.parameters()) - sum(p.numel() for p in tied.parameters()) == 12 * 16
    with pytest.raises(ValueError, match="max_len"):
        TransformerSeq2Seq(10, 12, SoftmaxScoring, d_model=16, num_heads=2, max_len=4)(
            torch.ones(1, 5, dtype=torch.long), None, torch.ones(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="pooling"):
        TransformerClassifier(10, 2, SoftmaxScoring, pooling="sum")


# slice centring (not causal-safe, so not in SCORINGS) must still be blind to padding: padded target positions
# enter no mean in decoder self- and cross-attention (query_padding_mask)
SLICE = functools.partial(CoDAScoring, center_e=True, center_n=True, center_over="slice")


@pytest.mark.parametrize("scoring", [*SCORINGS, "coda_center_slice"])
def test_seq2seq_padding_never_leaks(scoring):
    model = seq2seq(SLICE if scoring == "coda_center_slice" else scoring)
    gen = torch.Generator().manual_seed(1)
    src_len, tgt_len = [5, 3, 6], [4, 2, 6]
    src, src_mask = padded(src_len, 6, 13, gen)
    tgt, tgt_mask = padded(tgt_len, 6, 11, gen)
    base = model(src, src_mask, tgt, tgt_mask)  # (B, T, V)
    extra_src, extra_mask = padded([0, 0, 0], 4, 13, gen)
    extra_tgt, _ = padded([0, 0, 0], 3, 11, gen)
    more = model(torch.cat([src, extra_src], 1), torch.cat([src_mask, extra_mask], 1),
                 torch.cat([tgt, extra_tgt], 1), torch.cat([tgt_mask, torch.zeros(3, 3, dtype=torch.bool)], 1))
    for b, length in enumerate(tgt_len):
        assert torch.allclose(base[b, :length], more[b, :length], atol=1e-12, rtol=0)
        # each example alone, without any padding, gives the same outputs
        alone = model(src[b:b + 1, :src_len[b]], None, tgt[b:b + 1, :length], None)[0]
        assert torch.allclose(alone, base[b, :length], atol=1e-12, rtol=0)


@pytest.mark.parametrize("scoring", SCORINGS)
@pytest.mark.parametrize("pooling", ["mean", "max", "first"])
def test_classifier_padding_never_leaks(scoring, pooling):
    torch.manual_seed(0)
    clf = TransformerClassifier(20, 3, SCORINGS[scoring], d_model=16, num_heads=2, d_ff=32, dropout=0.0,
                                pooling=pooling).double().eval()
    gen = torch.Generator().manual_seed(2)
    ids, mask = padded([4, 7, 2], 7, 20, gen)
    base = clf(ids, mask)
    extra, _ = padded([0, 0, 0], 5, 20, gen)
    more = clf(torch.cat([ids, extra], 1), torch.cat([mask, torch.zeros(3, 5, dtype=torch.bool)], 1))
    assert torch.allclose(base, more, atol=1e-12, rtol=0)
    assert torch.allclose(clf(ids[2:, :2], None), base[2:], atol=1e-12, rtol=0)


@pytest.mark.parametrize("scoring", SCORINGS)
def test_decoder_is_causal(scoring):
    model = seq2seq(scoring)
    src, tgt = torch.randint(3, 13, (2, 6)), torch.randint(3, 11, (2, 7))
    base = model(src, None, tgt, None)
    for t in range(6):
        changed = tgt.clone()
        changed[:, t + 1:] = torch.randint(3, 11, changed[:, t + 1:].shape)
        out = model(src, None, changed, None)
        assert torch.allclose(out[:, :t + 1], base[:, :t + 1], atol=1e-12, rtol=0)
    # and the future does matter (the check above can fail)
    assert not torch.allclose(model(src, None, changed, None)[:, -1], base[:, -1])


@pytest.mark.parametrize("scoring", SCORINGS)
@pytest.mark.parametrize("prenorm", [True, False])
def test_cached_steps_equal_full_decoding(scoring, prenorm):
    model = seq2seq(scoring, prenorm=prenorm)
    gen = torch.Generator().manual_seed(3)
    src, src_mask = padded([6, 3], 6, 13, gen)
    tgt = torch.randint(3, 11, (2, 6), generator=gen)
    tgt[:, 0] = model.bos_id
    full = model(src, src_mask, tgt, None)  # (B, T, V)
    for use_cache in (True, False):
        state = model.init_decoder_state(src, src_mask, use_cache=use_cache)
        for t in range(1, 7):
            logits, state = model.decode_step(tgt[:, :t], state)
            assert torch.allclose(logits, full[:, t - 1], atol=1e-10, rtol=0)


def test_dropout_is_active_in_training_only():
    model = seq2seq(dropout=0.3)
    src, tgt = torch.randint(3, 13, (2, 6)), torch.randint(3, 11, (2, 5))
    assert torch.equal(model(src, None, tgt, None), model(src, None, tgt, None))
    model.train()
    assert not torch.equal(model(src, None, tgt, None), model(src, None, tgt, None))


@pytest.mark.parametrize("scoring", ["softmax", "coda"])
def test_overfits_a_copy_task(scoring):
    """Memorise 24 copy examples (BOS x -> x EOS) in 120 full-batch steps; greedy decoding then copies them."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 7, (24,), generator=gen).tolist()
    src, src_mask = padded(lengths, 6, 11, gen)
    src = src.masked_fill(~src_mask, 0)
    rows = torch.arange(24)
    tgt_out = torch.cat([src, torch.zeros(24, 1, dtype=torch.long)], 1)
    tgt_out[rows, torch.tensor(lengths)] = 2  # x EOS pad...
    tgt_in = torch.cat([torch.ones(24, 1, dtype=torch.long), src], 1)  # BOS x pad...
    tgt_mask = torch.cat([torch.ones(24, 1, dtype=torch.bool), src_mask], 1)
    # CoDA: the torch L1 kernel, faster than numba's parallel one at these tiny sizes
    factory = SoftmaxScoring if scoring == "softmax" else functools.partial(CoDAScoring, kernel="torch")
    model = TransformerSeq2Seq(11, 11, factory, d_model=32, num_layers=2, num_heads=4, d_ff=64, dropout=0.0,
                               attention_dropout=0.0, relu_dropout=0.0, shared_embeddings=True)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(120):
        logits = model(src, src_mask, tgt_in, tgt_mask)
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tgt_out, ignore_index=0)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    out = greedy_decode(model, src, src_mask, max_len=10)
    for b, length in enumerate(lengths):
        assert out[b, :length + 1].tolist() == tgt_out[b, :length + 1].tolist()


# --- configs -------------------------------------------------------------------------------------------------
SEQ2SEQ_KW = {"src_vocab_size": 30, "tgt_vocab_size": 30, "pad_id": 0, "bos_id": 1, "eos_id": 2}
CLF_KW = {"vocab_size": 30, "num_classes": 2, "pad_id": 0}


def build(cfg, **kw):
    return instantiate(pipeline._strip(OmegaConf.to_container(cfg.model, resolve=True)), **kw)


@pytest.mark.parametrize("model_name,kwargs,cls,scoring", [
    ("transformer", SEQ2SEQ_KW, TransformerSeq2Seq, SoftmaxScoring),
    ("coda_transformer", SEQ2SEQ_KW, TransformerSeq2Seq, CoDAScoring),
    ("transformer_classifier", CLF_KW, TransformerClassifier, SoftmaxScoring),
    ("coda_transformer_classifier", CLF_KW, TransformerClassifier, CoDAScoring),
])
def test_model_configs_build(tmp_path, compose, model_name, kwargs, cls, scoring):
    cfg = compose([f"model={model_name}", "preset=transformer_tiny"], tmp_path)
    assert cfg.model.name == model_name and cfg.model.scoring.name == scoring.__name__[:-7].lower()
    net = build(cfg, **kwargs)
    assert isinstance(net, cls)
    attns = [m for m in net.modules() if type(m).__name__ == "MultiHeadAttention"]
    assert len(attns) == 2 * (3 if cls is TransformerSeq2Seq else 1)
    assert all(isinstance(a.scoring, scoring) for a in attns)
    assert len({id(a.scoring) for a in attns}) == len(attns)  # one fresh scoring module per attention
    assert attns[0].d_model == 128 and attns[0].num_heads == 4


@pytest.mark.parametrize("preset", ["transformer_tiny", "transformer_base_single_gpu"])
def test_presets(tmp_path, compose, preset):
    cfg = compose(["model=coda_transformer", f"preset={preset}"], tmp_path)
    sizes = (128, 2, 4, 512) if preset == "transformer_tiny" else (512, 6, 8, 2048)
    assert (cfg.model.d_model, cfg.model.num_layers, cfg.model.num_heads, cfg.model.d_ff) == sizes
    assert cfg.model.dropout == cfg.model.attention_dropout == cfg.model.relu_dropout == 0.1
    # the task (composed after the preset) may replace optimizer/scheduler: check the preset's own nodes
    cfg = OmegaConf.merge(cfg, OmegaConf.load(ROOT / "configs" / "preset" / f"{preset}.yaml"))
    assert cfg.task.module.label_smoothing == 0.1
    param = torch.nn.Parameter(torch.zeros(1))
    opt = instantiate(cfg.optimizer)([param])
    assert opt.defaults["betas"] == (0.9, 0.997) and opt.defaults["eps"] == 1e-9
    sched = instantiate(cfg.scheduler)(opt)
    if preset == "transformer_tiny":  # noam: 2.0 * min(1, s/8000) * rsqrt(max(s, 8000)) * rsqrt(128)
        expected = [2.0 * min(1, s / 8000) / max(s, 8000) ** 0.5 / 128 ** 0.5 for s in (1, 2, 3)]
    else:  # T2T transformer_base_single_gpu: 0.1 * min(1, s/16000) * rsqrt(max(s, 16000))
        expected = [0.1 * min(1, s / 16000) / max(s, 16000) ** 0.5 for s in (1, 2, 3)]
    for value in expected:
        assert opt.param_groups[0]["lr"] == pytest.approx(value, rel=1e-12)
        opt.step()
        sched.step()


def test_coda_scoring_options_from_the_command_line(tmp_path, compose):
    cfg = compose(["model=coda_transformer", "model.scoring.center_n=true", "model.scoring.n_fn=tanh",
                       "model.scoring.scale=false"], tmp_path)
    net = build(cfg, **SEQ2SEQ_KW)
    scoring = net.encoder.layers[0].self_attn.scoring
    assert scoring.options.center_n and scoring.options.gate == 1.0
    assert scoring.options.scale is False and scoring.options.n_fn == "tanh"
    cfg = compose(["model=transformer", "model/scoring=coda"], tmp_path)
    assert isinstance(build(cfg, **SEQ2SEQ_KW).decoder_layers[0].cross_attn.scoring, CoDAScoring)
