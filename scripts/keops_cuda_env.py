#!/usr/bin/env python
"""The shell exports KeOps needs for CUDA on a machine whose CUDA comes in pip wheels (torch's ``nvidia-*``).

    eval "$(python3 scripts/keops_cuda_env.py [--prefix /tmp/keops_cuda])"

KeOps (``keopscore.config.cuda``) runs on the GPU only if ``ctypes.util.find_library`` finds ``cuda`` and ``nvrtc``,
and it compiles its NVRTC binder with ``cuda.h`` and ``nvrtc.h`` from one include folder (``CUDA_PATH``/``CUDA_HOME``,
``/usr/local/cuda``, ...) and ``-L<folder of each loaded library> -lcuda -lnvrtc``, i.e. unversioned ``libcuda.so`` and
``libnvrtc.so`` beside the loaded ones. torch's wheels ship ``nvrtc.h``, ``cuda.h`` and ``libnvrtc.so.N`` under
``site-packages/nvidia/`` (no unversioned names, nothing on the loader's path), the driver ``libcuda.so.1`` usually
sits in the ldconfig cache: otherwise KeOps says "CUDA libraries not found ... Switching to CPU only" and CUDA tensors
fail. This finds them, puts the two headers in ``PREFIX/include`` and the libraries under their versioned and
unversioned names in ``PREFIX/lib`` (symbolic links), and prints ``export CUDA_PATH=PREFIX`` and an
``LD_LIBRARY_PATH`` (and ``LIBRARY_PATH``) that starts with ``PREFIX/lib`` and the real nvrtc folder (nvrtc loads
its builtins from there).
With ``CUDA_PATH``/``CUDA_HOME`` set, or a ``/usr/local/cuda`` with both headers and a findable nvrtc, it prints
only a comment: KeOps finds those itself. What it cannot find it names in a comment (the bench's probe then records
KeOps' own failure). Standard library only; never imports torch.
"""

from __future__ import annotations

import argparse
import ctypes.util
import glob
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

HEADERS = ("cuda.h", "nvrtc.h")
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib",
            "/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/lib/wsl/lib")


def nvidia_roots() -> list[Path]:
    """The folders of the ``nvidia`` namespace package (torch's CUDA wheels), without importing torch."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    return [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []


def find_header(name: str, roots: list[Path]) -> Path | None:
    """``include/<name>`` under the pip roots, else in ``/usr/local/cuda/include`` or ``/usr/include``."""
    candidates = [p for root in roots for p in sorted(root.glob(f"**/include/{name}"))]
    candidates += [Path("/usr/local/cuda/include") / name, Path("/usr/include") / name]
    return next((p for p in candidates if p.is_file()), None)


def ldconfig_libs() -> list[Path]:
    try:
        out = subprocess.run(["ldconfig", "-p"], check=False, capture_output=True, text=True).stdout
    except OSError:
        return []
    return [Path(line.rsplit("=>", 1)[1].strip()) for line in out.splitlines() if "=>" in line]


def find_lib(stem: str, roots: list[Path], extra: list[Path]) -> Path | None:
    """``lib<stem>.so*`` (not ``lib<stem>-builtins``): the pip roots first, then ``extra`` (ldconfig's), then the
    usual folders."""
    candidates = [p for root in roots for p in sorted(root.glob(f"**/lib{stem}.so*"))]
    candidates += [p for p in extra if p.name.startswith(f"lib{stem}.so")]
    candidates += [Path(p) for d in LIB_DIRS for p in sorted(glob.glob(f"{d}/lib{stem}.so*"))]
    return next((p for p in candidates if p.exists()), None)


def keops_finds_cuda_itself() -> bool:
    if os.environ.get("CUDA_PATH") or os.environ.get("CUDA_HOME"):
        return True
    include = Path("/usr/local/cuda/include")
    return all((include / h).is_file() for h in HEADERS) and bool(ctypes.util.find_library("nvrtc"))


def link(target: Path, name: Path) -> None:
    if name.is_symlink() or name.exists():
        name.unlink()
    name.symlink_to(target)


def exports(prefix: Path, roots: list[Path], ld_cache: list[Path]) -> list[str]:
    lines = []
    headers = {h: find_header(h, roots) for h in HEADERS}
    libs = {stem: find_lib(stem, roots, ld_cache) for stem in ("nvrtc", "cuda")}
    missing = [h for h, p in headers.items() if p is None] + [f"lib{s}.so" for s, p in libs.items() if p is None]
    if missing:
        lines.append(f"# keops_cuda_env: not found: {', '.join(missing)} (KeOps will run on the CPU only)")
    (prefix / "include").mkdir(parents=True, exist_ok=True)
    (prefix / "lib").mkdir(parents=True, exist_ok=True)
    for name, path in headers.items():
        if path is not None:
            link(path, prefix / "include" / name)
    for stem, path in libs.items():
        if path is None:
            continue
        real = path.resolve()
        names = {f"lib{stem}.so", path.name, real.name}
        if stem == "cuda":
            names.add("libcuda.so.1")
        for name in names:
            link(real, prefix / "lib" / name)
        lines.append(f"# keops_cuda_env: lib{stem} = {real}")
    nvrtc_dir = libs["nvrtc"].resolve().parent if libs["nvrtc"] is not None else None
    path = ":".join(str(p) for p in (prefix / "lib", nvrtc_dir) if p is not None)
    lines += [f"export CUDA_PATH={prefix}",  # find_library searches LD_LIBRARY_PATH (ld) and LIBRARY_PATH (gcc)
              f'export LD_LIBRARY_PATH={path}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}',
              f'export LIBRARY_PATH={path}${{LIBRARY_PATH:+:$LIBRARY_PATH}}']
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prefix", type=Path, default=Path("/tmp/keops_cuda"))
    parser.add_argument("--force", action="store_true", help="even where KeOps would find CUDA itself")
    args = parser.parse_args(argv)
    if keops_finds_cuda_itself() and not args.force:
        print("# keops_cuda_env: CUDA_PATH/CUDA_HOME or /usr/local/cuda with cuda.h, nvrtc.h and libnvrtc: nothing to do")
        return 0
    print("\n".join(exports(args.prefix, nvidia_roots(), ldconfig_libs())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
