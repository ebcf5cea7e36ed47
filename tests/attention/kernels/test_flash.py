"""The Flash-CoDA op (``kernels/flash.py``): its dropout seed is a tensor on the inputs' device, drawn from torch's
RNG (reproducible under ``torch.manual_seed``), and an int seed and the same seed as a tensor give the same result."""

from __future__ import annotations

import torch

from coda_exp.attention import CoDAOptions
from coda_exp.attention.flash_spec import FlashParams, reference_forward, seed_value
from coda_exp.attention.kernels.flash import flash_attention, flash_params


def test_the_seed_is_a_device_tensor_from_torch_rng():
    options = CoDAOptions()
    torch.manual_seed(3)
    first = flash_params(options, 8, dropout_p=0.2, device="cpu").seed
    torch.manual_seed(3)
    again = flash_params(options, 8, dropout_p=0.2, device="cpu").seed
    assert isinstance(first, torch.Tensor) and first.shape == (1,) and first.device.type == "cpu"
    assert seed_value(first) == seed_value(again) and 0 <= seed_value(first) < 2 ** 31
    assert flash_params(options, 8).seed == 0  # no dropout: no draw


def test_int_and_tensor_seeds_agree_with_the_reference():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 7, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    as_int = FlashParams(0.5, 0.4, 1.0, "tanh", "sigmoid", dropout_p=0.3, seed=12345)
    as_tensor = FlashParams(0.5, 0.4, 1.0, "tanh", "sigmoid", dropout_p=0.3, seed=torch.tensor([12345]))
    want = reference_forward(q, k, v, q, k, None, None, as_int)
    for params in (as_int, as_tensor):
        torch.testing.assert_close(flash_attention(q, k, v, params=params, backend="cpu"), want,
                                   rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(reference_forward(q, k, v, q, k, None, None, as_tensor), want)
