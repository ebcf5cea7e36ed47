"""scripts/studies/mlu/gate_at_init.py: CoDA's gate at initialisation per layer and variant (the gate-scale study's first table)."""

from __future__ import annotations

import pytest


def test_the_variants_open_or_close_the_gate_as_their_formulas_say(load_script):
    gate = load_script("studies/mlu/gate_at_init")
    found = {name: gate.measure(name, ["task=mlu", "scale=fixture"], seed=1)
             for name in ("coda_transformer", "coda_transformer_center_n", "coda_transformer_t2t")}
    layers = set(found["coda_transformer"])
    assert {"encoder.layers.0.self_attn", "decoder_layers.0.cross_attn"} <= layers
    assert all(set(per) == layers for per in found.values())
    for layer in layers:
        default, centred, t2t = (found[n][layer] for n in found)
        assert 0 < default[0] < 0.1  # eq. 10: 2 sigmoid(-||q - k||_1 / sqrt(dk)) starts nearly closed
        assert centred[0] == pytest.approx(0.5, abs=0.02)  # sigmoid of a row-centred N
        assert t2t[0] < default[0] and t2t[1] >= default[1]  # N = -||q / sqrt(dk) - k||_1: closer to 0
    text = gate.table(found)
    assert text.splitlines()[0] == "| layer | coda_transformer | coda_transformer_center_n | coda_transformer_t2t |"
    assert len(text.splitlines()) == 2 + len(layers)


def test_a_model_without_coda_is_refused(load_script):
    with pytest.raises(SystemExit, match="no CoDA attention layer"):
        load_script("studies/mlu/gate_at_init").measure("transformer", ["task=mlu", "scale=fixture"], seed=1)
