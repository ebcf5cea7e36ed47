"""scripts/keops_cuda_env.py: torch's pip CUDA laid out as KeOps looks for it (headers in one folder, unversioned
libraries), on a fake layout."""

from __future__ import annotations


def test_pip_cuda_is_linked_where_keops_looks(load_script, tmp_path):
    env = load_script("keops_cuda_env")
    pip = tmp_path / "site" / "nvidia"
    (pip / "cu13" / "include").mkdir(parents=True)
    (pip / "cu13" / "lib").mkdir()
    for name in ("include/cuda.h", "include/nvrtc.h", "lib/libnvrtc.so.13", "lib/libnvrtc-builtins.so.13.0"):
        (pip / "cu13" / name).write_text("")
    driver = tmp_path / "driver"
    driver.mkdir()
    (driver / "libcuda.so.580.1").write_text("")
    (driver / "libcuda.so.1").symlink_to("libcuda.so.580.1")
    prefix = tmp_path / "prefix"
    lines = env.exports(prefix, [pip], [driver / "libcuda.so.1"])
    assert not any("not found" in line for line in lines)
    assert f"export CUDA_PATH={prefix}" in lines
    assert any(line.startswith(f"export LD_LIBRARY_PATH={prefix}/lib:{pip}/cu13/lib") for line in lines)
    assert (prefix / "include" / "nvrtc.h").resolve() == pip / "cu13" / "include" / "nvrtc.h"
    assert (prefix / "lib" / "libnvrtc.so").resolve() == pip / "cu13" / "lib" / "libnvrtc.so.13"
    assert {p.name for p in (prefix / "lib").iterdir()} == {"libnvrtc.so", "libnvrtc.so.13", "libcuda.so",
                                                            "libcuda.so.1", "libcuda.so.580.1"}


def test_what_is_missing_is_named(load_script, tmp_path, monkeypatch):
    env = load_script("keops_cuda_env")
    monkeypatch.setattr(env, "LIB_DIRS", ())
    monkeypatch.setattr(env, "find_header", lambda name, roots: None)
    lines = env.exports(tmp_path / "prefix", [], [])
    assert lines[0].startswith("# keops_cuda_env: not found: cuda.h, nvrtc.h, libnvrtc.so, libcuda.so")
