#!/usr/bin/env python
"""Flash-CoDA's Triton kernels against the float64 reference, every autotune config, in parallel processes (GPU).

    python scripts/check_flash_triton.py [--device cuda] [--jobs 8] [--json OUT] [--quick] [--cases A,B]
                                         [--backwards split,fused] [--time-budget-s S]

Each case (a dtype and a set of features: masks, causal, dropout, unshared N inputs, odd sizes, each activation)
runs forward and backward with every config of ``flash_triton.CONFIGS`` in turn (``flash_triton.FIXED_CONFIGS``, so
every tile shape autotune may pick is checked, not only the one it picks here), the backward once per
``--backwards`` (``flash_triton.BACKWARD``: the split kernels, the fused one), and compares out and the five
gradients with ``flash_spec.reference_forward`` in float64 on the same device: the relative L2 error must stay under
the dtype's tolerance (TF32 float32 3e-3, bfloat16 3e-2, float16 5e-3, float64 1e-10); NaN never passes. Cases run
in ``--jobs`` processes because each compiles its own kernels (the compiler runs on the host's cores); the JSON is
rewritten after every case (``complete`` false until the last; ``--time-budget-s`` ends the workers when it is
spent). A config that needs more shared memory than the GPU
has (float64 at 128 x 64 on an H100) is listed as skipped, as autotune skips it; a case passes when every config
that ran passes, and at least one ran. Exit 1 if any case fails. Under
``TRITON_INTERPRET=1`` on a CPU it runs the same cases at the interpreter's one block shape.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOL = {"float32": 3e-3, "bfloat16": 3e-2, "float16": 5e-3, "float64": 1e-10}
# (name, B, H, Lq, Lk, de, dn or None (shared), dv, e_fn, n_fn, causal, dropout_p, key mask, query mask, full mask
#  [, more FlashParams: centring])
CASES = [
    ("masks_causal_dropout_unshared", 2, 3, 70, 90, 40, 24, 24, "tanh", "sigmoid", True, 0.2, True, False, False),
    ("shared_qmask_fullmask_odd", 2, 2, 129, 129, 64, None, 64, "sigmoid", "arctan", False, 0.0, False, True, True),
    ("shared_algebraic_long", 1, 2, 300, 260, 64, None, 32, "tanh", "algebraic", False, 0.0, False, False, False),
    ("shared_tanh_causal_square", 2, 2, 256, 256, 64, None, 64, "tanh", "tanh", True, 0.1, False, False, False),
    ("centred_rows_causal_masks", 2, 2, 70, 90, 32, 16, 24, "tanh", "sigmoid", True, 0.2, True, True, False,
     {"center_e": True, "center_n": True, "center_over": "row"}),
    ("centred_slice_shared", 2, 2, 129, 129, 64, None, 64, "sigmoid", "tanh", False, 0.0, False, False, False,
     {"center_n": True, "center_over": "slice"}),
]


def run_case(case: tuple, dtype_name: str, device: str, backwards: tuple[str, ...] = ("split", "fused")) -> dict:
    import torch

    from coda_exp.attention.flash_spec import FlashParams, reference_forward
    from coda_exp.attention.kernels import flash_triton as ft

    name, b, h, lq, lk, de, dn, dv, e_fn, n_fn, causal, p, key, qmask, full, *extra = case
    dtype = getattr(torch, dtype_name)
    gen = torch.Generator().manual_seed(hash(name) % 1000)
    ref = {n: torch.randn(shape, generator=gen, dtype=torch.float64) * 0.5 for n, shape in
           (("q", (b, h, lq, de)), ("k", (b, h, lk, de)), ("v", (b, h, lk, dv)))}
    if dn is not None:
        ref["nq"] = torch.randn(b, h, lq, dn, generator=gen, dtype=torch.float64) * 0.3
        ref["nk"] = torch.randn(b, h, lk, dn, generator=gen, dtype=torch.float64) * 0.3
    mask = (torch.rand(b, 1, 1, lk, generator=gen) > 0.2).expand(b, h, lq, lk) if key else None
    if full:
        mask = torch.rand(b, h, lq, lk, generator=gen) > 0.3
    query_mask = (torch.rand(b, 1, lq, generator=gen) > 0.2).expand(b, h, lq) if qmask else None
    dout = torch.randn(b, h, lq, dv, generator=gen, dtype=torch.float64)
    params = FlashParams(0.6, 0.3 if dn is None else 0.5, 1.5, e_fn, n_fn, causal=causal, dropout_p=p, seed=1234,
                         shared_n=dn is None, **(extra[0] if extra else {}))
    # the reference sees the inputs the kernel sees (rounded to dtype): near-ties of nq - nk flip sign otherwise
    ref = {n: t.to(dtype).double() for n, t in ref.items()}
    dout = dout.to(dtype).double()
    to = {n: t.to(device) for n, t in ref.items()}
    mask_d = None if mask is None else mask.to(device)
    qmask_d = None if query_mask is None else query_mask.to(device)
    leaves = {n: t.clone().requires_grad_() for n, t in to.items()}
    want = reference_forward(leaves["q"], leaves["k"], leaves["v"], leaves.get("nq", leaves["q"]),
                             leaves.get("nk", leaves["k"]), mask_d, qmask_d, params)
    names = ["q", "k", "v"] + (["nq", "nk"] if dn is not None else [])
    grads = dict(zip(names, torch.autograd.grad(want, [leaves[n] for n in names], dout.to(device))))
    inputs = {n: t.to(dtype).contiguous() for n, t in to.items()}
    names = ("fwd", "dkdv", "dq", "stats", "bwd")
    # the i-th config of every kernel together (a kernel with fewer configs takes its first ones again)
    most = max(len(ft.CONFIGS[k]) for k in names)
    configs = [tuple(ft.CONFIGS[k][i % len(ft.CONFIGS[k])] for k in names) for i in range(most)] \
        if device == "cuda" else [None]
    result = {"case": name, "dtype": dtype_name, "configs": []}
    for cfg in configs:
        ft.FIXED_CONFIGS.clear()
        if cfg is not None:
            ft.FIXED_CONFIGS.update(zip(names, cfg))
        args = (inputs["q"], inputs["k"], inputs["v"], inputs.get("nq"), inputs.get("nk"), mask_d, qmask_d, params)
        try:
            out = ft.forward(*args)
        except Exception as err:  # a config the GPU cannot hold, which autotune skips, is no failure
            if (why := _too_big(err)) is None:
                raise
            result["configs"].append({"config": cfg, "skipped": why})
            continue
        for kind in backwards:
            ft.BACKWARD = kind
            try:
                dq, dk, dv_, dnq, dnk = ft.backward(*args, dout.to(device, dtype))
            except Exception as err:
                if (why := _too_big(err)) is None:
                    raise
                result["configs"].append({"config": cfg, "backward": kind, "skipped": why})
                continue
            got = {"out": out, "q": dq, "k": dk, "v": dv_, "nq": dnq, "nk": dnk}
            errors = {}
            for n, w in (("out", want), *grads.items()):
                g = got[n].double()
                errors[n] = float(torch.linalg.vector_norm(g - w.detach())
                                  / torch.linalg.vector_norm(w.detach()).clamp_min(1e-30))
            worst = max(errors.values())
            result["configs"].append({"config": cfg, "backward": kind, "errors": errors,
                                      "ok": bool(not math.isnan(worst) and worst < TOL[dtype_name])})
    ran = [c for c in result["configs"] if "skipped" not in c]
    result["ok"] = bool(ran) and all(c["ok"] for c in ran)
    return result


def _too_big(err: Exception) -> str | None:
    """Why a config cannot run on this GPU (Triton's OutOfResources: a float64 tile of 128 x 64 needs 304 KiB of
    shared memory, an H100 has 227), or None for any other error. Autotune times such a config as infinitely slow
    and takes another, so a check skips it and says so."""
    if type(err).__name__ != "OutOfResources":
        return None
    return f"does not fit this GPU (autotune skips it): {err}"[:300]


def _end_processes(children: set) -> None:
    """End every process this one started besides ``children``: SIGTERM, then SIGKILL where it is not acted on in
    10 s (a busy compiler); again where new ones appear (a pool's thread may start one after a first look)."""
    import multiprocessing

    for _ in range(3):  # (not forever: a process that no SIGKILL ends in 10 s is left)
        extra = set(multiprocessing.active_children()) - children
        if not extra:
            break
        for process in extra:
            process.terminate()
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join(timeout=10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtypes", default="float32,bfloat16,float16,float64")
    parser.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1))
    parser.add_argument("--quick", action="store_true", help="the first case only")
    parser.add_argument("--cases", default="", help=f"these cases only (comma-separated: {', '.join(c[0] for c in CASES)})")
    parser.add_argument("--backwards", default="split,fused", help="flash_triton.BACKWARD values to check")
    parser.add_argument("--time-budget-s", type=float, default=1e9,
                        help="stop waiting for cases after this long and end the worker processes (a timeout that "
                             "kills this process alone leaves them compiling)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    dtypes = args.dtypes.split(",")
    if args.device == "cpu":
        dtypes = [d for d in dtypes if d != "bfloat16"]  # the interpreter's tl.dot is wrong in bfloat16
    cases = CASES[:1] if args.quick else CASES
    if args.cases:
        unknown = set(args.cases.split(",")) - {c[0] for c in CASES}
        if unknown:
            parser.error(f"--cases: no case {', '.join(sorted(unknown))} (there are {', '.join(c[0] for c in CASES)})")
        cases = [c for c in cases if c[0] in args.cases.split(",")]
    # float64 reads its masks as int32 (triton_args._mask_arg: Triton 3.6 could not build it with 8-bit masks for
    # sm_90); its masked cases (each compiles every config in float64 again) go last, the first of them only
    masked = [c for c in cases if c[12] or c[13] or c[14]]
    work = [(c, d) for c in cases for d in dtypes if not (d == "float64" and c in masked)]
    work += [(c, "float64") for c in masked[:1] if "float64" in dtypes]
    start = time.time()
    results = []

    def summarise(complete: bool) -> dict:  # written after every case: a run cut short keeps what it checked
        summary = {"device": args.device, "seconds": round(time.time() - start, 1), "complete": complete,
                   "passed": sum(r["ok"] for r in results), "cases": len(results), "results": results}
        if args.json:
            args.json.write_text(json.dumps(summary, indent=1))
        return summary

    # spawned, not forked: a fork of a process that imported torch and triton can deadlock in the compiler
    children = set(multiprocessing.active_children())  # the pool's workers are those started after this
    pool = ProcessPoolExecutor(max_workers=args.jobs, mp_context=multiprocessing.get_context("spawn")) \
        if args.jobs > 1 else None
    with pool or contextlib.nullcontext():
        backwards = tuple(args.backwards.split(","))
        futures = [pool.submit(run_case, c, d, args.device, backwards) if pool else (c, d) for c, d in work]
        for (case, dtype), fut in zip(work, futures):
            left = args.time_budget_s - (time.time() - start)
            try:
                if left <= 0:
                    raise TimeoutError
                res = fut.result(timeout=left) if pool else run_case(*fut, args.device, backwards)
            except TimeoutError:
                print(f"time budget ({args.time_budget_s:.0f} s) spent: {len(work) - len(results)} cases not checked",
                      flush=True)
                if pool:  # no public way to end busy workers: every process started since the pool was made
                    pool.shutdown(wait=False, cancel_futures=True)
                    _end_processes(children)
                break
            except Exception as exc:  # noqa: BLE001 (a compile error is a failed case, reported, not a crash)
                res = {"case": case[0], "dtype": dtype, "ok": False, "error": f"{type(exc).__name__}: {str(exc)[-400:]}"}
            results.append(res)
            worst = {kind: max((max(c["errors"].values()) for c in res.get("configs", [])
                                if c.get("backward") == kind and "errors" in c), default=float("nan"))
                     for kind in backwards}
            skipped = sum("skipped" in c for c in res.get("configs", []))
            print(f"{'ok  ' if res['ok'] else 'FAIL'} {res.get('case')} {res.get('dtype', '')} worst rel. error "
                  + ", ".join(f"{kind} {err:.2e}" for kind, err in worst.items())
                  + (f" ({skipped} configs too big for this GPU)" if skipped else "") + f" {res.get('error', '')}",
                  flush=True)
            summarise(complete=False)
    if pool and len(results) < len(work):  # the pool has shut down: nothing can start a worker now
        _end_processes(children)
    summary = summarise(complete=len(results) == len(work))
    print(f"{summary['passed']}/{summary['cases']} cases pass every config ({summary['seconds']} s)")
    return 0 if summary["complete"] and summary["passed"] == summary["cases"] else 1


if __name__ == "__main__":
    sys.exit(main())
