"""The KeOps peer's side of ``bench_gpu_coda.py`` (not a command): its versions, a child-process probe, and timing
within a budget. KeOps' code generation once ended a process on a GPU machine without a word, so it is first run in
a child process; and it compiles each formula on first use, so its rows get their own budget."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent

PEERS = ("keops",)
PEER_DTYPES = {"keops": (torch.float32, torch.float64)}  # KeOps has no bfloat16
# a child process runs this first (fwd+bwd of the KeOps peer at the bench's feature size, so the shared-N formulas
# compile there): a KeOps failure that ends the process ends the child, not the bench
KEOPS_PROBE = """
import sys, time, torch
sys.path.insert(0, {root!r})
from coda_exp.peers.keops_coda import keops_coda_attention
t0 = time.time()
q, k, v = (torch.randn(2, 2, 40, {dim}, device={device!r}, dtype=torch.{dtype}, requires_grad=True) for _ in range(3))
out = keops_coda_attention(q, k, v)
out.backward(torch.ones_like(out))
if {device!r} == "cuda":
    torch.cuda.synchronize()
print("KEOPS_PROBE_OK", round(time.time() - t0, 1), flush=True)
"""


def keops_environment() -> dict:
    """pykeops / keopscore / pybind11 versions (package metadata: importing pykeops on a GPU machine compiles its
    binder), the cache folder and whether a child Python finds pybind11 (KeOps' compiler asks it for its includes)."""
    env = {}
    for name in ("pykeops", "keopscore", "pybind11"):
        try:
            env[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            env[name] = None
    env["KEOPS_CACHE_FOLDER"] = os.environ.get("KEOPS_CACHE_FOLDER")
    found = subprocess.run([sys.executable, "-m", "pybind11", "--includes"], check=False, capture_output=True,
                           text=True)
    env["pybind11_includes"] = (found.stdout.strip() if found.returncode == 0
                                else f"failed: {found.stderr.strip()[-300:]}")
    return env


def keops_probe(device: str, dim: int, dtype: torch.dtype, timeout_s: float) -> dict:
    """One KeOps fwd+bwd in a child process (see ``KEOPS_PROBE``): ok, exit status, seconds, output tail."""
    code = KEOPS_PROBE.format(root=str(ROOT), dim=dim, device=device, dtype=str(dtype).removeprefix("torch."))
    t0 = time.time()
    try:
        done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired as err:
        tail = err.stdout.decode(errors="replace") if isinstance(err.stdout, bytes) else err.stdout or ""
        return {"ok": False, "rc": None, "seconds": round(time.time() - t0, 1), "tail": f"timed out: {tail[-2000:]}"}
    text = done.stdout + done.stderr
    return {"ok": done.returncode == 0 and "KEOPS_PROBE_OK" in done.stdout, "rc": done.returncode,
            "seconds": round(time.time() - t0, 1), "tail": text[-3000:]}


def time_peer(device: str, fwd, fwd_bwd, reps: int, budget_s: float, measure) -> dict:
    """A slow peer's fwd and fwd+bwd within ``budget_s``: the first fwd+bwd (compiling) and a second one timed,
    then as many reps (up to ``reps``, one warm-up) as the budget allows, by ``measure`` (the bench's timer)."""
    def once(fn):
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0
    start = time.perf_counter()
    row = {"first_call_s": round(once(fwd_bwd), 2)}
    one = once(fwd_bwd)
    left = budget_s - (time.perf_counter() - start)
    n = max(1, min(reps, int(left / (2.5 * one))))
    if left < 2 * one:  # no time for more: the one timed fwd+bwd is the row
        row.update(fwd_bwd_ms=round(1e3 * one, 3), reps=1, note="budget: fwd not timed")
        return row
    row.update(fwd_ms=round(measure(fwd, n, warmup=1), 3), fwd_bwd_ms=round(measure(fwd_bwd, n, warmup=0), 3), reps=n)
    return row
