"""Training-step time of DecaProp vs DecaProp + CoDA (context-query attention) at the paper's shapes.

One step = forward, loss (mean of start/end cross-entropy, as the authors' code), backward, Adam update. Both models are
built at the defaults of ``configs/model/decaprop.yaml`` (hidden 64, 3 encoder layers, 9 BACs, FM k = 32; CoDA as
``configs/model/attention/coda.yaml``), on random ids with random lengths in [Lp/2, Lp] and [Lq/2, Lq]. Timed runs
are interleaved (rep 1 of each, rep 2 of each, ...) after warm-up, so machine drift hits both alike; the median
is reported, with the ratio CoDA / softmax.

    python scripts/bench_decaprop.py [--quick] [--device cpu|cuda] [--batch 16] [--passage 300 ...] [--query 25]
                                     [--reps N] [--coda-in-bac] [--coda-in-self-attention]

``--quick``: batch 16, passage 300, query 25, 3 reps (the CI-sized check). Without it: passages 200 and 400.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's coda_exp

import torch

from coda_exp.attention import CoDACrossAttention
from coda_exp.models import DecaProp

VOCAB = 5000


def make_batch(batch: int, lp: int, lq: int, device: torch.device, gen: torch.Generator):
    def side(length):
        lengths = torch.randint(length // 2, length + 1, (batch,), generator=gen)
        lengths[0] = length  # the padded width is the full length
        mask = torch.arange(length)[None] < lengths[:, None]  # (B, L)
        ids = torch.randint(1, VOCAB, (batch, length), generator=gen) * mask
        return ids.to(device), mask.to(device), lengths

    p_ids, p_mask, p_len = side(lp)
    q_ids, q_mask, _ = side(lq)
    start = (torch.rand(batch, generator=gen) * p_len).long()
    end = torch.minimum(start + 3, p_len - 1)
    return (p_ids, p_mask, q_ids, q_mask), start.to(device), end.to(device)


def build(coda: bool, args, device: torch.device) -> tuple[DecaProp, torch.optim.Optimizer]:
    torch.manual_seed(0)
    attention = partial(CoDACrossAttention, hidden=64, dropout=0.2) if coda else None
    net = DecaProp(VOCAB, attention=attention, coda_in_bac=coda and args.coda_in_bac,
                   coda_in_self_attention=coda and args.coda_in_self_attention).to(device).train()
    return net, torch.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=1e-3)


def step(net, opt, inputs, start, end, device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    s, e = net(*inputs)
    loss = (torch.nn.functional.cross_entropy(s, start) + torch.nn.functional.cross_entropy(e, end)) / 2
    loss.backward()
    opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1000.0


def bench(args, device: torch.device, lp: int) -> dict[str, float]:
    gen = torch.Generator().manual_seed(0)
    inputs, start, end = make_batch(args.batch, lp, args.query, device, gen)
    models = {"decaprop": build(False, args, device), "decaprop_coda": build(True, args, device)}
    times: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(args.warmup):
        for net, opt in models.values():
            step(net, opt, inputs, start, end, device)
    for _ in range(args.reps):
        for name, (net, opt) in models.items():
            times[name].append(step(net, opt, inputs, start, end, device))
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="batch 16, passage 300, query 25, 3 reps")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--passage", type=int, nargs="+", default=[200, 400])
    parser.add_argument("--query", type=int, default=25)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--coda-in-bac", action="store_true", help="CoDA also in the 9 BACs")
    parser.add_argument("--coda-in-self-attention", action="store_true", help="CoDA also in the self-attention")
    args = parser.parse_args()
    if args.quick:
        args.batch, args.passage, args.query, args.reps, args.warmup = 16, [300], 25, 3, 1
    device = torch.device(args.device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    print(f"DecaProp training step (fwd + bwd + Adam), {where}; batch {args.batch}, query {args.query}; "
          f"median of {args.reps} interleaved reps")
    print(f"{'passage':>8} {'decaprop ms':>12} {'+coda ms':>10} {'ratio':>7}")
    for lp in args.passage:
        ms = bench(args, device, lp)
        ratio = ms["decaprop_coda"] / ms["decaprop"]
        print(f"{lp:>8} {ms['decaprop']:>12.1f} {ms['decaprop_coda']:>10.1f} {ratio:>7.2f}", flush=True)


if __name__ == "__main__":
    main()
