"""Greedy decoding and beam search (coda_exp.models.decoding): beam 1 = greedy, the optimum of a toy model found
by brute force, EOS/padding handling, per-example length caps."""

import functools
import itertools
import math

import pytest
import torch

from coda_exp.attention import CoDAScoring, SoftmaxScoring
from coda_exp.models import TransformerSeq2Seq, beam_search, greedy_decode, strip_special
from coda_exp.models.decoding import length_limits, length_penalty_factor

pytestmark = pytest.mark.usefixtures("one_thread")

PAD, BOS, EOS = 0, 1, 2


class ToyModel:
    """A decodable 'model' whose next-token log-probabilities are ``table(src_key, prefix)`` (prefix without BOS).

    The state carries the source rows, so the beam search's reordering of the state is exercised too.
    """

    pad_id, bos_id, eos_id = PAD, BOS, EOS

    def __init__(self, table):
        self.table = table
        self.calls = 0

    def init_decoder_state(self, src_ids, src_mask, use_cache=True):
        return {"src": src_ids.clone(), "nested": [src_ids[:, :1].clone()]}

    def decode_step(self, prefix, state):
        self.calls += 1
        assert torch.equal(state["nested"][0][:, 0], state["src"][:, 0])  # reordered together
        rows = [self.table(tuple(src.tolist()), tuple(p.tolist()[1:])) for src, p in zip(state["src"], prefix)]
        return torch.tensor(rows, dtype=torch.float64), state


def random_table(vocab: int):
    """Deterministic pseudo-random log-probabilities per (source, prefix); PAD and BOS impossible."""

    @functools.cache
    def table(src, prefix):
        gen = torch.Generator().manual_seed(hash((src, prefix)) % (2 ** 31))
        logits = 2.0 * torch.randn(vocab, generator=gen, dtype=torch.float64)
        logits[[PAD, BOS]] = -math.inf
        return torch.log_softmax(logits, 0).tolist()

    return table


def brute_force(table, src, vocab: int, cap: int, alpha: float):
    """Best (score, tokens) over every hypothesis: EOS-terminated with length <= cap, or cap tokens without EOS."""
    words = [t for t in range(vocab) if t not in (PAD, BOS, EOS)]
    best = (-math.inf, None)
    for n in range(cap + 1):
        for body in itertools.product(words, repeat=n):
            seq = list(body) + [EOS] if n < cap else list(body)
            logp = sum(table(src, tuple(seq[:i]))[tok] for i, tok in enumerate(seq))
            score = logp / length_penalty_factor(len(seq), alpha)
            if score > best[0]:
                best = (score, seq)
    return best


def as_list(row):
    return [t for t in row.tolist() if t != PAD]


def test_beam_finds_what_greedy_misses():
    # greedy takes a (p .5), then a (.36), then EOS (.5): p = .09; the best hypothesis is b EOS: p = .36
    probs = {(): {3: 0.5, 4: 0.4, EOS: 0.1}, (3,): {3: 0.36, 4: 0.34, EOS: 0.30},
             (4,): {3: 0.05, 4: 0.05, EOS: 0.9}}

    def table(src, prefix):
        p = probs.get(prefix, {3: 0.2, 4: 0.3, EOS: 0.5})
        return [math.log(p[t]) if t in p else -math.inf for t in range(5)]

    src, mask = torch.tensor([[3, 4]]), torch.ones(1, 2, dtype=torch.bool)
    model = ToyModel(table)
    greedy = greedy_decode(model, src, mask, max_len=3)
    assert greedy.tolist() == [[3, 3, EOS]]
    score, best = brute_force(table, (3, 4), 5, cap=3, alpha=0.0)
    assert best == [4, EOS] and score == pytest.approx(math.log(0.36))
    ids, scores = beam_search(model, src, mask, beam_size=2, length_penalty=0.0, max_len=3, return_scores=True)
    assert ids.tolist() == [[4, EOS]] and scores.item() == pytest.approx(math.log(0.36))
    assert beam_search(model, src, mask, beam_size=1, length_penalty=0.0, max_len=3).tolist() == greedy.tolist()


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_beam_search_equals_brute_force(alpha):
    vocab, cap = 6, 4  # tokens 3, 4, 5 and EOS; 121 hypotheses per source
    table = random_table(vocab)
    src = torch.tensor([[3, 4, 5], [5, 5, 3], [4, 3, 3], [3, 3, 3]])
    mask = torch.ones_like(src, dtype=torch.bool)
    # a beam wide enough to hold every candidate of every step is exhaustive
    ids, scores = beam_search(ToyModel(table), src, mask, beam_size=128, length_penalty=alpha, max_len=cap,
                              return_scores=True)
    for b in range(len(src)):
        score, best = brute_force(table, tuple(src[b].tolist()), vocab, cap, alpha)
        assert as_list(ids[b]) == best
        assert scores[b].item() == pytest.approx(score, abs=1e-12)
    # and narrower beams never beat the optimum
    narrow = beam_search(ToyModel(table), src, mask, beam_size=2, length_penalty=alpha, max_len=cap,
                         return_scores=True)[1]
    assert bool((narrow <= scores + 1e-12).all())


def test_beam_one_is_greedy_on_toy_models():
    table = random_table(7)
    src = torch.randint(3, 7, (6, 4), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(src, dtype=torch.bool)
    for cap in (1, 3, 6):
        greedy = greedy_decode(ToyModel(table), src, mask, max_len=cap)
        beam = beam_search(ToyModel(table), src, mask, beam_size=1, length_penalty=0.0, max_len=cap)
        assert torch.equal(greedy, beam)


@pytest.mark.parametrize("scoring", ["softmax", "coda"])
def test_beam_one_is_greedy_on_transformers(scoring):
    factory = SoftmaxScoring if scoring == "softmax" else functools.partial(CoDAScoring, center_n=True,
                                                                             kernel="torch")
    gen = torch.Generator().manual_seed(4)
    for seed in range(2):
        torch.manual_seed(seed)
        model = TransformerSeq2Seq(12, 9, factory, d_model=16, num_layers=2, num_heads=2, d_ff=32).double().eval()
        with torch.no_grad():  # make EOS likely so that rows finish at different steps
            model.tgt_embed.embedding.weight[EOS] *= 3.0
        src = torch.randint(3, 12, (5, 7), generator=gen)
        mask = torch.arange(7)[None, :] < torch.tensor([7, 2, 5, 1, 6])[:, None]
        greedy = greedy_decode(model, src, mask, max_len=12)
        assert torch.equal(greedy, beam_search(model, src, mask, beam_size=1, length_penalty=0.0, max_len=12))
        assert torch.equal(greedy, greedy_decode(model, src, mask, max_len=12, use_cache=False))
        wide = beam_search(model, src, mask, beam_size=4, max_len=12)
        assert torch.equal(wide, beam_search(model, src, mask, beam_size=4, max_len=12, use_cache=False))
        # each row of a batch decodes as it would alone
        for b in range(5):
            alone = beam_search(model, src[b:b + 1, :int(mask[b].sum())], None, beam_size=4, max_len=12)
            assert as_list(alone[0]) == as_list(wide[b])


def test_eos_padding_and_stopping():
    # source row r: EOS is the best token once the prefix holds r tokens; tokens are 3, 4, 5, ...
    def table(src, prefix):
        target = src[0]
        logp = [-math.inf, -math.inf] + [-5.0] * 4
        logp[EOS if len(prefix) >= target else 3 + len(prefix) % 3] = -0.1
        return logp

    src = torch.tensor([[2, 9], [0, 9], [4, 9]])
    mask = torch.ones_like(src, dtype=torch.bool)
    expected = [[3, 4, EOS, PAD, PAD], [EOS, PAD, PAD, PAD, PAD], [3, 4, 5, 3, EOS]]
    model = ToyModel(table)
    assert greedy_decode(model, src, mask, max_len=10).tolist() == expected
    assert model.calls == 5  # stops once every row has ended
    assert beam_search(ToyModel(table), src, mask, beam_size=3, max_len=10).tolist() == expected
    assert strip_special(torch.tensor(expected), EOS, PAD) == [[3, 4], [], [3, 4, 5, 3]]
    assert strip_special(torch.tensor([[BOS, 3, EOS, 4]]), EOS, PAD, bos_id=BOS) == [[3]]


def test_length_caps_per_example():
    def never_ends(src, prefix):  # token 3 always, EOS never likely
        return [-math.inf, -math.inf, -9.0, -0.01, -9.0]

    src = torch.tensor([[3, 3, 3, 3], [3, 3, 0, 0], [3, 0, 0, 0]])
    mask = src != 0
    limits = length_limits(src, mask, max_len=4, max_len_a=1.0, max_len_b=1)
    assert limits.tolist() == [4, 3, 2]  # min(max_len, src_len + 1)
    for decode in (greedy_decode, functools.partial(beam_search, beam_size=2)):
        out = decode(ToyModel(never_ends), src, mask, max_len=4, max_len_a=1.0, max_len_b=1)
        assert out.tolist() == [[3, 3, 3, 3], [3, 3, 3, PAD], [3, 3, PAD, PAD]]
        assert decode(ToyModel(never_ends), src, mask, max_len=2).tolist() == [[3, 3]] * 3
    with pytest.raises(ValueError, match="max_len"):
        greedy_decode(ToyModel(never_ends), src, mask, max_len=0)
