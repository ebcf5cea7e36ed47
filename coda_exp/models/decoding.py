"""Batched greedy decoding and beam search for encoder-decoder models (CoDA paper Tables 4, 6, 7).

A decodable model exposes ``bos_id``, ``eos_id``, ``pad_id`` and

- ``init_decoder_state(src_ids (B, S), src_mask (B, S), use_cache=True) -> state``: any nesting of dicts, lists
  and tuples of batch-first tensors (the decoders repeat and reorder their dim 0);
- ``decode_step(prefix (N, t), state) -> (logits (N, V), state)``: the scores of token t+1 given the prefix
  (BOS first), called once per step with the prefix grown by one token.

``TransformerSeq2Seq`` implements it. Both decoders return ids (B, L) without the BOS: each row is a hypothesis
that ends with EOS (kept) or stops at its length cap, padded with ``pad_id`` after; L is the longest returned
hypothesis. PAD and BOS are never generated. ``strip_special`` (the project's one, from
:mod:`coda_exp.tokens`, re-exported here) turns rows into token lists. Call under ``model.eval()``.

Length caps: at most ``max_len`` generated tokens (EOS included); with ``max_len_a`` set, example i stops at
min(max_len, floor(max_len_a * src_len_i + max_len_b)) tokens (at least 1). A hypothesis reaching its cap is
final without EOS.

Beam search follows T2T / GNMT (Wu et al. 2016): hypotheses are ranked by log P(y) / lp(|y|) with
lp(n) = ((5 + n) / 6) ** length_penalty, |y| counting the EOS. Each step ranks the 2K one-token extensions of
the K alive hypotheses; those among the K best that end with EOS (or all K at the example's cap) become final
(fairseq's rule, so beam_size=1 with length_penalty=0 is exactly greedy), the K best non-EOS extensions stay
alive. Finished hypotheses are kept in a K-best pool; an example stops when no alive hypothesis can still beat its
best finished one: with lp at most lp(cap), that is when best_finished >= best_alive_logprob / lp(cap) (T2T's
bound), so the returned hypothesis is exactly the one a search run to the cap would return.

Options of a decoding config (``{"strategy": ..., option: value}``, a ``Seq2SeqTask``'s ``decoding``):
:data:`STRATEGY_OPTIONS`; :func:`decoding_problem` refuses any other key, a beam option under greedy included.
"""

from __future__ import annotations

import difflib
import functools
import math
from collections.abc import Callable, Mapping

import torch

from coda_exp.tokens import strip_special  # noqa: F401  (re-exported: coda_exp.models.strip_special)

#: the keys each strategy of a decoding config takes beside ``strategy``: :func:`greedy_decode`'s and
#: :func:`beam_search`'s keyword arguments (``return_scores`` aside: generation returns ids only)
STRATEGY_OPTIONS: dict[str, tuple[str, ...]] = {
    "greedy": ("max_len", "max_len_a", "max_len_b", "use_cache"),
    "beam": ("beam_size", "length_penalty", "max_len", "max_len_a", "max_len_b", "use_cache"),
}


def decoding_problem(options: Mapping, name: str = "decoding") -> str | None:
    """Why the decoding config ``options`` (``strategy``, default greedy, and its options) cannot be used, or None:
    an unknown strategy, or keys the strategy does not take, each named with the keys it takes. A beam option
    under greedy is refused, not ignored (``beam_size=8`` without ``strategy=beam`` would decode greedily).
    ``name``: the config's name in the message (``task.module.decoding``)."""
    strategy = options.get("strategy", "greedy")
    if strategy not in STRATEGY_OPTIONS:
        return f"{name}.strategy = {strategy!r}: expected {' or '.join(STRATEGY_OPTIONS)}"
    takes = STRATEGY_OPTIONS[strategy]
    unknown = [str(k) for k in options if k != "strategy" and k not in takes]
    if not unknown:
        return None
    keys = ", ".join(f"{name}.{k}" for k in unknown)
    message = (f"{keys}: not {'an option' if len(unknown) == 1 else 'options'} of {name}.strategy={strategy}, "
               f"which takes {', '.join(takes)}")
    beam_only = [k for k in unknown if k in STRATEGY_OPTIONS["beam"]]
    if beam_only:
        removal = f" ({' '.join(f'~{name}.{k}' for k in beam_only)})" if "." in name else ""  # a config's keys
        message += (f"; {', '.join(beam_only)} {'is' if len(beam_only) == 1 else 'are'} beam search's: set "
                    f"{name}.strategy=beam, or remove {'it' if len(beam_only) == 1 else 'them'}{removal}")
    close = {k: difflib.get_close_matches(k, takes, n=1, cutoff=0.7) for k in unknown if k not in beam_only}
    hints = [f"{name}.{match[0]} for {name}.{k}" for k, match in close.items() if match]
    if hints:
        message += f"; did you mean {', '.join(hints)}?"
    return message


def map_state(state, fn: Callable[[torch.Tensor], torch.Tensor]):
    """Apply ``fn`` to every tensor of a nested dict/list/tuple state (other leaves are kept)."""
    if isinstance(state, torch.Tensor):
        return fn(state)
    if isinstance(state, dict):
        return {k: map_state(v, fn) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(map_state(v, fn) for v in state)
    return state


def length_limits(src_ids: torch.Tensor, src_mask: torch.Tensor | None, max_len: int,
                  max_len_a: float | None = None, max_len_b: float = 0) -> torch.Tensor:
    """(B,) number of tokens each example may generate (EOS included), >= 1."""
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    limits = torch.full((src_ids.shape[0],), max_len, dtype=torch.long, device=src_ids.device)
    if max_len_a is not None:
        src_len = (src_mask.sum(1) if src_mask is not None else
                   torch.full_like(limits, src_ids.shape[1])).to(torch.float64)
        cap = torch.floor(max_len_a * src_len + max_len_b).to(torch.long)
        limits = torch.minimum(limits, cap).clamp(min=1)
    return limits


def _log_probs(logits: torch.Tensor, model) -> torch.Tensor:
    """(N, V) logits -> log-probabilities with PAD and BOS forbidden (-inf): neither is ever generated."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    logp = torch.log_softmax(logits, dim=-1)
    banned = [i for i in {model.pad_id, model.bos_id} if i is not None and i != model.eos_id]
    if banned:
        logp = logp.index_fill(-1, torch.tensor(banned, device=logp.device), -math.inf)
    return logp


@torch.no_grad()
def greedy_decode(model, src_ids: torch.Tensor, src_mask: torch.Tensor | None, max_len: int = 256,
                  max_len_a: float | None = None, max_len_b: float = 0, use_cache: bool = True) -> torch.Tensor:
    """Arg-max decoding, batched; each row stops at its EOS (kept) or its cap. Returns ids (B, L)."""
    limits = length_limits(src_ids, src_mask, max_len, max_len_a, max_len_b)  # (B,)
    batch = src_ids.shape[0]
    state = model.init_decoder_state(src_ids, src_mask, use_cache=use_cache)
    prefix = torch.full((batch, 1), model.bos_id, dtype=torch.long, device=src_ids.device)  # (B, 1)
    finished = torch.zeros(batch, dtype=torch.bool, device=src_ids.device)
    out = []
    for step in range(int(limits.max())):
        logits, state = model.decode_step(prefix, state)  # (B, V)
        token = _log_probs(logits, model).argmax(-1).masked_fill(finished, model.pad_id)  # (B,)
        out.append(token)
        finished = finished | (token == model.eos_id) | (limits <= step + 1)
        if bool(finished.all()):
            break
        prefix = torch.cat([prefix, token[:, None]], dim=1)  # (B, t + 1)
    return torch.stack(out, dim=1)  # (B, L)


def length_penalty_factor(length: int | torch.Tensor, alpha: float):
    """GNMT / T2T length penalty lp(n) = ((5 + n) / 6) ** alpha; alpha = 0 ranks by total log-probability."""
    return ((5.0 + length) / 6.0) ** alpha


@torch.no_grad()
def beam_search(model, src_ids: torch.Tensor, src_mask: torch.Tensor | None, beam_size: int = 4,
                length_penalty: float = 0.6, max_len: int = 256, max_len_a: float | None = None,
                max_len_b: float = 0, use_cache: bool = True, return_scores: bool = False):
    """Best hypothesis per example by log P(y) / lp(|y|); batched over examples and beams.

    Returns ids (B, L), and with ``return_scores`` also the (B,) length-normalised log-probabilities.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    k = beam_size
    device = src_ids.device
    limits = length_limits(src_ids, src_mask, max_len, max_len_a, max_len_b)  # (B,)
    batch, width = src_ids.shape[0], int(limits.max())
    rows = torch.arange(batch, device=device)[:, None]  # (B, 1)
    state = model.init_decoder_state(src_ids, src_mask, use_cache=use_cache)
    state = map_state(state, lambda x: x.repeat_interleave(k, dim=0))  # (B * K, ...)

    alive_seq = torch.full((batch, k, 1), model.bos_id, dtype=torch.long, device=device)  # (B, K, t + 1)
    alive_lp = torch.full((batch, k), -math.inf, device=device)  # (B, K); one live beam at the start
    alive_lp[:, 0] = 0.0
    fin_seq = torch.full((batch, k, width), model.pad_id, dtype=torch.long, device=device)  # (B, K, L)
    fin_score = torch.full((batch, k), -math.inf, device=device)  # (B, K)
    fin_len = torch.zeros((batch, k), dtype=torch.long, device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    max_lp = length_penalty_factor(limits.to(torch.float64), length_penalty)  # (B,) lp at the cap

    for step in range(width):
        length = step + 1  # tokens generated after this step, EOS included
        logits, state = model.decode_step(alive_seq.view(batch * k, length), state)  # (B * K, V)
        logp = _log_probs(logits, model)  # (B * K, V)
        vocab = logp.shape[-1]
        if step == 0:
            alive_lp = alive_lp.to(logp.dtype)
            fin_score, max_lp = fin_score.to(logp.dtype), max_lp.to(logp.dtype)
        cand = (alive_lp[:, :, None] + logp.view(batch, k, vocab)).view(batch, k * vocab)  # (B, K * V)
        top_lp, top_idx = cand.topk(min(2 * k, k * vocab), dim=1)  # (B, 2K)
        beam, token = top_idx // vocab, top_idx % vocab  # (B, 2K)
        seqs = torch.cat([alive_seq[rows, beam], token[:, :, None]], dim=2)  # (B, 2K, t + 2)
        is_eos = token == model.eos_id

        # the beam of this step is the K best candidates: those ending with EOS, or all K at the example's cap,
        # are final; done examples add nothing
        in_beam = torch.arange(top_lp.shape[1], device=device)[None, :] < k  # (1, 2K)
        at_cap = (limits == length)[:, None]  # (B, 1)
        final = (is_eos | at_cap) & in_beam & ~done[:, None]
        score = torch.where(final, top_lp / length_penalty_factor(length, length_penalty),
                            torch.full_like(top_lp, -math.inf))  # (B, 2K)
        new_seq = torch.nn.functional.pad(seqs[:, :, 1:], (0, width - length), value=model.pad_id)  # (B, 2K, L)
        pool_score = torch.cat([fin_score, score], dim=1)  # (B, 3K)
        pool_seq = torch.cat([fin_seq, new_seq], dim=1)  # (B, 3K, L)
        pool_len = torch.cat([fin_len, torch.full_like(token, length)], dim=1)
        fin_score, pick = pool_score.topk(k, dim=1)  # (B, K), sorted
        fin_seq, fin_len = pool_seq[rows, pick], pool_len.gather(1, pick)

        # alive: the K best non-EOS candidates
        alive_lp, pick = torch.where(is_eos, torch.full_like(top_lp, -math.inf), top_lp).topk(k, dim=1)  # (B, K)
        alive_seq = seqs[rows, pick]  # (B, K, t + 2)
        parent = (rows * k + beam.gather(1, pick)).view(-1)  # (B * K,) flat index of each survivor's parent
        state = map_state(state, functools.partial(torch.index_select, dim=0, index=parent))

        # stop an example when its best finished score beats anything alive can still reach
        best_lp_left = max_lp if length_penalty >= 0 else length_penalty_factor(length + 1, length_penalty)
        done = done | (limits <= length) | (fin_score[:, 0] >= alive_lp[:, 0] / best_lp_left)
        if bool(done.all()):
            break

    out_len = int(fin_len[:, 0].max())
    ids = fin_seq[:, 0, :out_len]  # (B, L)
    return (ids, fin_score[:, 0]) if return_scores else ids
