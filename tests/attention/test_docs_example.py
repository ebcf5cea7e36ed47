"""docs/coda_attention.md's example runs as written, and its sentences on masks hold (True = real token; a
padded query row is zero; keys all masked give zeros, no error)."""

from __future__ import annotations

import re

import torch

from tests import ROOT


def _example() -> str:
    text = (ROOT / "docs" / "coda_attention.md").read_text(encoding="utf-8")
    return re.search(r"```python\n(.*?)```", text, re.DOTALL).group(1)


def test_the_documented_example_runs_as_written():
    scope: dict = {}
    exec(compile(_example(), "docs/coda_attention.md", "exec"), scope)  # noqa: S102 (our own doc)
    M, A2, B2, y, out = (scope[k] for k in ("M", "A2", "B2", "y", "out"))
    assert M.shape == (2, 5, 7) and A2.shape == (2, 5, 64) and B2.shape == (2, 7, 64)
    assert (M[1, :, 4:] == 0).all()  # the masked pairs
    assert y.shape == (2, 10, 512) and torch.isfinite(y).all()
    assert out.dtype == torch.bfloat16 and out.shape == (2, 8, 10, 64)
    assert (out[1, :, 6:] == 0).all()  # padded query rows


def test_the_mask_is_true_for_real_tokens_and_all_masked_keys_give_zeros():
    from coda_exp.attention import coda_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 4, 8) for _ in range(3))
    real = torch.tensor([[True, True, True, False]])
    out = coda_attention(q, k, v, mask=real[:, None, None, :])
    dropped = coda_attention(q, k[..., :3, :], v[..., :3, :])  # the padded key left out altogether
    torch.testing.assert_close(out, dropped)
    none = coda_attention(q, k, v, mask=torch.zeros(1, 1, 1, 4, dtype=torch.bool))
    assert (none == 0).all()
