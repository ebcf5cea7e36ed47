#!/usr/bin/env python
"""Flash-CoDA's Triton kernels compiled for sm_90 without a GPU: registers, spills and SASS per pair and feature.

    python scripts/sass_flash_kernels.py [--kernels fwd,dkdv,dq,bwd] [--dtypes bf16,fp32] [--unshared]
        [--l1 half|input|both] [--unaligned] [--json OUT]

Each kernel is built at each of its ``flash_triton.CONFIGS`` (tanh x tanh, d 64, no mask, causal or dropout, shared
N unless ``--unshared``: the benchmark's setting) with ``triton.compile``, specialised as Triton's JIT specialises the
benchmark's call (B·L 16384, H 16, L 4096: every pointer and integer argument divisible by 16, which lets loads be
vectors and address arithmetic fold; ``--unaligned``: no such facts, as for lengths not divisible by 16, and as
every record before ``sass_sm90_triton36_aligned.json`` was built); ptxas -v gives registers and spill bytes,
nvdisasm the SASS. A program's loops are its backward branches: the outermost is the loop over tiles, the ones
inside it the loops over feature chunks (the L1 distance, then for a backward kernel the sign sums). Per pair and
feature: a chunk loop's instructions / (pairs per thread x DC), the tile loop's own / (pairs per thread x 64); their
sum is the kernel's count (``docs/attention.md`` quotes them). Instructions, not time: nothing here runs a kernel.

The code depends on Triton's version. To see what the GPU machine's Triton (3.6) builds, put that version first on
the path: ``pip install --target /tmp/triton36 triton==3.6.0`` and ``PYTHONPATH=/tmp/triton36 python scripts/...``
(the record names the version: ``results/bench/sass_sm90_triton36.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

D = 64  # head dim (de = dn = dv)
POINTERS = {"MASK": "*u8", "QMASK": "*u8", "SEED": "*i64"}
INTS = ("H", "LQ", "LK", "LQ_BUCKET", "LK_BUCKET")


def loops(sass: str) -> list[tuple[int, int, dict[str, int]]]:
    """(first, last instruction index, opcode counts) of each loop of nvdisasm's output: a branch to a label above."""
    instructions, labels = [], {}
    for line in sass.splitlines():
        label = re.match(r"\s*(\.L_x_\d+):", line)
        if label:
            labels[label.group(1)] = len(instructions)
            continue
        code = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if code:
            instructions.append(code.group(1).strip())
    found = []
    for index, text in enumerate(instructions):
        target = re.search(r"BRA\s+`?\(?(\.L_x_\d+)", text)
        if target and labels.get(target.group(1), index + 1) <= index:
            ops: dict[str, int] = {}
            for op in instructions[labels[target.group(1)]:index + 1]:
                name = re.sub(r"^@!?U?P\w+\s+", "", op).split()[0].split(".")[0]
                ops[name] = ops.get(name, 0) + 1
            found.append((labels[target.group(1)], index, ops))
    return sorted(found)


def per_pair_feature(found, pairs: float, dc: int, sign_warps: int = 1, sign_dc: int | None = None) -> dict:
    """The tile loop (the longest) and the chunk loops inside it, per pair and feature. The fused backward's sign
    loop (its last chunk loop) runs ``sign_warps`` groups of warps on their own ``sign_dc`` features (``triton_bwd.
    SIGN_DC``, not the config's DC) over every pair: a thread sees ``sign_warps`` times more pairs there."""
    big = [lp for lp in found if lp[1] - lp[0] > 50]
    outer = max(big, key=lambda lp: lp[1] - lp[0])
    inner = [lp for lp in big if lp is not outer and outer[0] <= lp[0] and lp[1] <= outer[1]]
    def size(lp):
        return lp[1] - lp[0] + 1

    tile = (size(outer) - sum(size(lp) for lp in inner)) / (pairs * D)
    last = len(inner) - 1
    chunks = [size(lp) / (pairs * (sign_warps * (sign_dc or dc) if n == last else dc)) for n, lp in enumerate(inner)]
    return {"tile": round(tile, 2), "chunk_loops": [round(c, 2) for c in chunks], "total": round(tile + sum(chunks), 2),
            "chunk_loop_ops": [dict(sorted(lp[2].items(), key=lambda kv: -kv[1])[:8]) for lp in inner]}


def build(kernel: str, dtype: str, shared: bool, config: tuple, l1: str = "half", aligned: bool = True) -> dict:
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas
    from triton.compiler import ASTSource

    from coda_exp.attention.kernels import flash_triton as ft
    from coda_exp.attention.kernels import triton_bwd

    bm, bn, dc, pf, warps, stages, *reg = config  # a 7th entry: maxnreg
    fn = ft._kernel(ft.triton_jit, kernel)
    acc = "fp32"
    constants = {"DE": D, "DN": D, "DV": D, "DE_P": D, "DN_P": D, "DV_P": D, "E_FN": 0, "N_FN": 0,
                 "HAS_MASK": False, "HAS_QMASK": False, "CAUSAL": False, "DROPOUT": False, "SHARED": shared,
                 "CDT": tl.float32, "FAST": dtype != "fp32", "DOT_PREC": "tf32", "CENTER_E": False,
                 "CENTER_N": False, "GRAD": False, "BLOCK_M": bm, "BLOCK_N": bn, "DC": dc, "PF": pf,
                 **(lanes := ft._lanes(kernel, bm, bn, warps))}
    constants = {n: v for n, v in constants.items() if n in fn.arg_names}
    floats = {"SCAL", "CENT", "SCR", "DNQ"} | ({"DQ"} if kernel == "bwd" else set())
    # 16-bit inputs' L1 operands: float16 copies (triton_args._l1_args), unless --l1 input (CODA_FLASH_HALF_L1=0)
    half = {"NQ": "*fp16", "NK": "*fp16"} if l1 == "half" and dtype in ("bf16", "fp16") else {}
    signature = {n: "constexpr" if n in constants else "i32" if n in INTS or not n.isupper()
                 else half.get(n) or POINTERS.get(n, f"*{acc}" if n in floats else f"*{dtype}") for n in fn.arg_names}
    # as the runtime specialises the benchmark's call (Triton's JIT: a pointer or an int divisible by 16 is marked so;
    # drop_thr is never specialised): every pointer, H 16, L 4096 and its buckets, the absent masks' strides 0
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n, kind in signature.items()
             if kind != "constexpr" and n != "drop_thr"} if aligned else None
    compiled = triton.compile(ASTSource(fn, signature, constants, attrs), target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": warps, "num_stages": stages, "enable_fp_fusion": True,
                                       **({"maxnreg": reg[0]} if reg else {})})
    bin_dir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    with tempfile.TemporaryDirectory() as tmp:
        ptx, cubin = Path(tmp, "k.ptx"), Path(tmp, "k.cubin")
        ptx.write_text(compiled.asm["ptx"])
        cubin.write_bytes(compiled.asm["cubin"])
        log = subprocess.run([get_ptxas(90).path, "-lineinfo", "-v", "--regAllocOptLevel=2", "--gpu-name=sm_90a",
                              str(ptx), "-o", str(Path(tmp, "k.o"))], capture_output=True, text=True,
                             check=True).stderr
        sass = subprocess.run([str(bin_dir / "nvdisasm"), "-c", str(cubin)], capture_output=True, text=True,
                              check=True).stdout
    regs = re.search(r"Used (\d+) registers", log)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    pairs = bm * bn / (32 * warps)
    return {"kernel": kernel, "dtype": dtype, "shared": shared, "config": config, "l1": "half" if half else "input",
            "aligned": aligned,
            "registers": int(regs.group(1)) if regs else None,
            "spill_bytes": [int(spills.group(1)), int(spills.group(2))] if spills else None,
            **per_pair_feature(loops(sass), pairs, dc, lanes.get("W", 1), triton_bwd.SIGN_DC if lanes else None)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", default="fwd,dkdv,dq,bwd")
    parser.add_argument("--dtypes", default="bf16,fp32")
    parser.add_argument("--unshared", action="store_true", help="separate N inputs (nq, nk) instead of q, k")
    parser.add_argument("--configs", default="",
                        help="build these configs instead of flash_triton.CONFIGS, as bench_flash_kernels' "
                             "--candidates ('fwd:64,64,2,1,4,2,128;...'), for the kernels they name")
    parser.add_argument("--l1", default="half", choices=("half", "input", "both"),
                        help="16-bit inputs' L1 operands: half (float16 copies, the default), input (their own "
                             "dtype: CODA_FLASH_HALF_L1=0), or both side by side")
    parser.add_argument("--unaligned", action="store_true",
                        help="no argument known divisible by 16 (lengths that are not; the records before "
                             "sass_sm90_triton36_aligned.json)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    os.environ.pop("TRITON_INTERPRET", None)  # compiled kernels (triton.jit reads it when flash_triton is imported)
    from coda_exp.attention.kernels import flash_triton as ft

    sys.path.insert(0, str(ROOT / "scripts"))
    import triton
    from bench_flash_kernels import parse_configs  # a sibling: one syntax for configs

    # counts depend on Triton's version (3.9 and the GPU machine's 3.6 differ): say which one builds
    print(f"Triton {triton.__version__} ({Path(triton.__file__).parent}), sm_90a, "
          f"{'no argument known divisible by 16' if args.unaligned else 'arguments divisible by 16'}", flush=True)
    chosen = parse_configs(args.configs) if args.configs else {}
    configs = {name: chosen.get(name, [] if chosen else ft.CONFIGS[name]) for name in ft.CONFIGS}

    rows = []
    for dtype in args.dtypes.split(","):
        for kernel in args.kernels.split(","):
            for config, l1 in ((c, m) for c in configs[kernel] for m in
                               (("half", "input") if args.l1 == "both" and dtype != "fp32" else (args.l1,))):
                row = build(kernel, dtype, not args.unshared, config, l1, not args.unaligned)
                rows.append(row)
                print(f"{kernel:5s} {dtype:5s} {row['l1']:5s} {config}: {row['registers']} registers, spills "
                      f"{row['spill_bytes']} B, per pair and feature: tile {row['tile']}, chunk loops "
                      f"{row['chunk_loops']}, total {row['total']}", flush=True)
    if args.json:
        from coda_exp.results import benchmark_environment

        record = {"command": "python scripts/sass_flash_kernels.py " + " ".join(argv if argv is not None else
                                                                                sys.argv[1:]),
                  "target": "sm_90a (ptxas -v, nvdisasm of triton's cubin)", **benchmark_environment(),
                  "rows": rows}
        args.json.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
