#!/usr/bin/env python
"""CoDA on a GPU beyond the kernels (issue 22, items 3 and 4), in one run: every precision, torch.compile, CUDA graphs.

    python scripts/check_cuda_coda.py [--device cuda] [--kernels auto,flash,chunked,torch]
                                      [--precisions 32-true,bf16-mixed,16-mixed,bf16-true] [--time-budget-s 120]
                                      [--json OUT]

1. **Precisions**: a CoDA ``MultiHeadAttention`` (key padding, causal, dropout 0) forward and backward with each
   kernel under each of Lightning's precisions as it runs them (``32-true``: float32; ``bf16-mixed`` /
   ``16-mixed``: autocast to bfloat16 / float16; ``bf16-true``: weights and inputs in bfloat16), against the same
   weights and inputs (16-bit ones as rounded) in float64 through ``kernel=torch`` on the CPU: relative L2 error of
   the output, the input's gradient and the projections' weight gradients, each under the precision's tolerance;
   NaN never passes.
2. **torch.compile(fullgraph=True)**: the module with ``kernel=flash`` (eval, and train with dropout 0.2 under
   inductor's ``fallback_random``, so the compiled draw is eager's) and a small CoDA-Transformer (padding masks,
   causal decoder, cross-attention) against eager, forward and every gradient; a graph break fails it.
3. **CUDA graphs** (run first by default: ``--parts graphs,precisions,compile``, compiling takes longest): the module's forward and backward (``torch.cuda.make_graphed_callables``) with dropout 0
   against eager, and with dropout 0.2 (the seed a device tensor: capture needs no host sync) two replays that
   draw different masks and stay finite.

Every result goes into the JSON as soon as it is made, an error included (a failure is a result); a run cut short
by ``--time-budget-s`` lists what it skipped. On a CPU (the tests) parts 1 and 2 run at tiny sizes; part 3 needs
CUDA and is skipped.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.pop("CODA_KERNEL", None)

import torch

from coda_exp.attention import CoDAScoring, MultiHeadAttention
from coda_exp.results import benchmark_environment

# Lightning's precision -> (weights' and inputs' dtype, autocast dtype or None, tolerance on relative L2 errors)
PRECISIONS = {
    "32-true": (torch.float32, None, 1e-3),
    "bf16-mixed": (torch.float32, torch.bfloat16, 3e-2),
    # float16 autocast: the input's gradient 1.43e-2 on every kernel alike, the plain PyTorch ``torch`` one included
    # (an H200, results/bench/gpu_h200.json; ~6e-3 on this CPU): the projections' rounding, not CoDA's
    "16-mixed": (torch.float32, torch.float16, 3e-2),
    "bf16-true": (torch.bfloat16, None, 3e-2),
}


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    want = want.detach()
    err = float((got.detach().double().cpu() - want).norm() / want.norm().clamp_min(1e-30))
    return float("inf") if math.isnan(err) else err  # NaN fails every tolerance


def _mha(kernel: str, dropout: float = 0.0, d: int = 64, heads: int = 4) -> MultiHeadAttention:
    torch.manual_seed(0)
    return MultiHeadAttention(d, heads, CoDAScoring(kernel=kernel), dropout=dropout)


def _data(b: int, length: int, d: int):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(b, length, d, generator=gen, dtype=torch.float64)
    keep = torch.arange(length)[None] < torch.randint(length // 2, length + 1, (b, 1), generator=gen)
    dout = torch.randn(b, length, d, generator=gen, dtype=torch.float64)
    return x, keep, dout


def _grads(mha, x, keep, dout, autocast=None):
    x = x.detach().clone().requires_grad_()
    with torch.autocast(x.device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
        out = mha(x, x, x, key_padding_mask=keep, causal=True)
    out.backward(dout.to(out.dtype))
    return out, x.grad, mha.q_proj.weight.grad, mha.v_proj.weight.grad


def precision_case(device: str, kernel: str, precision: str, b: int, length: int) -> dict:
    dtype, autocast, tol = PRECISIONS[precision]
    x, keep, dout = _data(b, length, 64)
    mha = _mha(kernel).to(device, dtype)
    ref = copy.deepcopy(mha).double().cpu()  # the same (rounded) weights, in float64
    ref.scoring.kernel = "torch"
    x_in = x.to(dtype)  # bf16-true rounds the inputs too; the reference reads the rounded values
    want = _grads(ref, x_in.double(), keep, dout)
    got = _grads(mha, x_in.to(device), keep.to(device), dout.to(device, dtype), autocast)
    errors = {name: rel(g, w) for name, g, w in zip(("out", "dx", "dWq", "dWv"), got, want)}
    return {"kernel": kernel, "precision": precision, "ran": mha.scoring.kernel_used, "out_dtype": str(got[0].dtype),
            "errors": errors, "tolerance": tol, "ok": all(e < tol for e in errors.values())}


def _same(compiled_fn, eager_fn, leaves, tol) -> dict:
    got_leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in leaves]
    want_leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in leaves]
    torch.manual_seed(1)
    got = compiled_fn(*got_leaves)
    torch.manual_seed(1)
    want = eager_fn(*want_leaves)
    errors = {"out": rel(got, want.detach().double().cpu())}
    got.float().square().sum().backward()
    want.float().square().sum().backward()
    for i, (a, w) in enumerate(zip(got_leaves, want_leaves)):
        if w.grad is not None:
            errors[f"d{i}"] = rel(a.grad, w.grad.double().cpu())
    return {"errors": errors, "tolerance": tol, "ok": all(e < tol for e in errors.values())}


def compile_cases(device: str, b: int, length: int) -> list[dict]:
    import torch._inductor.config as inductor_config

    from coda_exp.models import TransformerSeq2Seq

    rows = []
    x, keep, _ = _data(b, length, 64)
    x, keep = x.float().to(device), keep.to(device)
    for name, dropout in (("mha_flash_eval", 0.0), ("mha_flash_dropout", 0.2)):
        mha = _mha("flash", dropout).to(device).train(dropout > 0)
        twin = copy.deepcopy(mha)
        start = time.time()
        try:
            with inductor_config.patch(fallback_random=True):
                row = _same(torch.compile(mha, fullgraph=True), twin, [x, x, x, keep], 1e-4)
            row["ran"] = mha.scoring.kernel_used
        except Exception as err:  # noqa: BLE001 - a failure is a result too
            row = {"ok": False, "error": f"{type(err).__name__}: {err}"[:600]}
        rows.append({"case": name, "seconds": round(time.time() - start, 1), **row})
    torch.manual_seed(0)
    model = TransformerSeq2Seq(50, 50, CoDAScoring, d_model=64, num_layers=2, num_heads=4, d_ff=128).to(device).eval()
    twin = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(2)
    src, tgt = (torch.randint(3, 50, (b, n), generator=gen).to(device) for n in (length, length - 3))
    src_mask = torch.ones_like(src, dtype=torch.bool)
    src_mask[0, length // 2:] = False
    tgt_mask = torch.ones_like(tgt, dtype=torch.bool)
    start = time.time()
    try:  # the token ids are no leaves: compare the output and the weights' gradients
        got, want = torch.compile(model, fullgraph=True)(src, src_mask, tgt, tgt_mask), twin(src, src_mask, tgt, tgt_mask)
        row = {"errors": {"out": rel(got, want.detach().double().cpu())}, "tolerance": 1e-4}
        got.square().sum().backward()
        want.square().sum().backward()
        row["errors"]["dparams"] = max(rel(p.grad, q.grad.double().cpu()) for p, q in
                                       zip(model.parameters(), twin.parameters()) if q.grad is not None)
        row["ok"] = all(e < row["tolerance"] for e in row["errors"].values())
        row["kernels"] = sorted({m.kernel_used for m in model.modules() if getattr(m, "kernel_used", None)})
    except Exception as err:  # noqa: BLE001
        row = {"ok": False, "error": f"{type(err).__name__}: {err}"[:600]}
    rows.append({"case": "coda_transformer", "seconds": round(time.time() - start, 1), **row})
    return rows


class _SelfAttention(torch.nn.Module):
    """x -> mha(x, x, x): one input for ``make_graphed_callables`` (the same tensor given three times would be three
    inputs, each handed the whole gradient)."""

    def __init__(self, mha: MultiHeadAttention):
        super().__init__()
        self.mha = mha

    def forward(self, x):
        return self.mha(x, x, x)


def graph_cases(b: int, length: int) -> list[dict]:
    """``make_graphed_callables`` over the module's forward and backward, on CUDA."""
    rows = []
    x, keep, dout = _data(b, length, 64)
    x, keep, dout = x.float().cuda(), keep.cuda(), dout.float().cuda()
    for dropout in (0.0, 0.2):
        mha = _mha("flash", dropout).cuda().train()
        twin = copy.deepcopy(mha)
        try:
            arg = x.detach().clone().requires_grad_()
            graphed = torch.cuda.make_graphed_callables(_SelfAttention(mha), (arg,), num_warmup_iters=3)
            outs = []
            for _ in range(2):
                leaf = x.detach().clone().requires_grad_()
                out = graphed(leaf)
                out.backward(dout)
                outs.append((out.detach().clone(), leaf.grad.clone()))
            torch.cuda.synchronize()
            finite = all(bool(t.isfinite().all()) for pair in outs for t in pair)
            row = {"dropout": dropout, "finite": finite, "ran": mha.scoring.kernel_used}
            if dropout == 0:
                leaf = x.detach().clone().requires_grad_()
                want = twin(leaf, leaf, leaf)
                want.backward(dout)
                row["errors"] = {"out": rel(outs[1][0], want.double().cpu()),
                                 "dx": rel(outs[1][1], leaf.grad.double().cpu())}
                row["ok"] = finite and all(e < 1e-5 for e in row["errors"].values())
            else:  # each replay draws its own mask
                row["replays_differ"] = not torch.equal(outs[0][0], outs[1][0])
                row["ok"] = finite and row["replays_differ"]
        except Exception as err:  # noqa: BLE001
            row = {"dropout": dropout, "ok": False, "error": f"{type(err).__name__}: {err}"[:600]}
        rows.append(row)
    return rows


def run_precisions(args, out: dict, start: float, save) -> None:
    """Each precision x kernel case into ``out["precisions"]`` (saved after each) while the time budget lasts."""
    for precision in args.precisions.split(","):
        for kernel in args.kernels.split(","):
            if time.time() - start > args.time_budget_s:
                out["skipped"].append(f"{kernel} {precision}: time budget")
                continue
            began = time.time()
            try:
                row = precision_case(args.device, kernel, precision, args.batch, args.length)
            except Exception as err:  # noqa: BLE001
                row = {"kernel": kernel, "precision": precision, "ok": False,
                       "error": f"{type(err).__name__}: {err}"[:600]}
            row["seconds"] = round(time.time() - began, 1)  # the first call of a dtype compiles its kernels
            out["precisions"].append(row)
            save()
            print("precision", json.dumps(row), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--kernels", default="auto,flash,chunked,torch")
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=96)
    parser.add_argument("--parts", default="graphs,precisions,compile", help="run in this order (the budget runs out last)")
    parser.add_argument("--configs", choices=("first", "autotune"), default="first",
                        help="Triton configs on CUDA: each kernel's first (compiles once per flag set: this checks "
                             "results, check_flash_triton checks every config) or autotune's choice")
    parser.add_argument("--time-budget-s", type=float, default=1e9)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    parts = args.parts.split(",")
    if set(parts) - {"precisions", "graphs", "compile"}:
        parser.error(f"--parts: {args.parts!r}: each part must be one of precisions, graphs, compile")
    start = time.time()
    out = {"environment": {**benchmark_environment(), "device": args.device}, "args": vars(args) | {"json": str(args.json)},
           "precisions": [], "compile": [], "graphs": [], "skipped": []}

    def save():
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(out, indent=1, default=str))

    if args.device == "cuda" and args.configs == "first":
        from coda_exp.attention.kernels import flash_triton
        flash_triton.FIXED_CONFIGS.update({name: configs[0] for name, configs in flash_triton.CONFIGS.items()})
    for part in parts:  # in the order given: the first gets the budget first
        if part == "precisions":
            run_precisions(args, out, start, save)
        elif part == "graphs":
            if args.device != "cuda":
                out["skipped"].append("graphs: CUDA only")
            elif time.time() - start > args.time_budget_s:
                out["skipped"].append("graphs: time budget")
            else:
                out["graphs"] = graph_cases(args.batch, args.length)
                for row in out["graphs"]:
                    print("graphs", json.dumps(row), flush=True)
        else:
            if time.time() - start > args.time_budget_s:
                out["skipped"].append("compile: time budget")
            else:
                out["compile"] = compile_cases(args.device, args.batch, args.length)
                for row in out["compile"]:
                    print("compile", json.dumps(row), flush=True)
        save()
    rows = out["precisions"] + out["compile"] + out["graphs"]
    failed = [r for r in rows if not r.get("ok")]
    print(f"check_cuda_coda: {len(rows) - len(failed)} of {len(rows)} ok in {time.time() - start:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
