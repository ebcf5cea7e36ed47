"""CoDAOptions: validated once, the same defaults in coda_matrix, CoDACrossAttention and CoDAScoring and their YAML."""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from omegaconf import OmegaConf

from coda_exp.attention import CoDACrossAttention, CoDAOptions, CoDAScoring, coda_components, coda_matrix
from coda_exp.attention.functional import PAPER_EQUATIONS, resolve_options
from coda_exp.attention.options import DEFAULTS, OPTION_NAMES
from tests import ROOT
from tests.attention.reference import make_inputs

MODULES = {"attention": CoDACrossAttention, "scoring": CoDAScoring}


@pytest.mark.parametrize("option,value,needle", [
    ("e_fn", "relu", "CoDA option e_fn must be one of ['sigmoid', 'tanh'], got 'relu'"),
    ("n_fn", "softmax", "CoDA option n_fn must be one of ['algebraic', 'arctan', 'sigmoid', 'tanh']"),
    ("center_over", "batch", "CoDA option center_over must be one of ['slice', 'row'], got 'batch'"),
    ("kernel", "flashy", "CoDA option kernel must be one of ['auto', 'flash', 'fused', 'numba', 'chunked', 'torch']"),
    ("scale", 1, "CoDA option scale must be True or False, got 1"),
    ("center_e", "yes", "CoDA option center_e must be True or False"),
    ("alpha", -0.5, "CoDA option alpha must be a finite float >= 0"),
    ("beta", True, "CoDA option beta must be a finite float >= 0"),
    ("gate_scale", float("inf"), "CoDA option gate_scale must be null or a finite float > 0"),
])
def test_each_bad_option_is_named_with_its_allowed_values(option, value, needle):
    for build in (lambda: CoDAOptions(**{option: value}), lambda: CoDACrossAttention(4, **{option: value}),
                  lambda: CoDAScoring(**{option: value})):
        with pytest.raises(ValueError) as err:
            build()
        assert needle in str(err.value)


def test_options_are_frozen_coerced_and_resolve_the_gate():
    opts = CoDAOptions(alpha=1, gate_scale=3)
    assert isinstance(opts.alpha, float) and opts.gate_scale == 3.0 and opts.gate == 3.0
    with pytest.raises(AttributeError):
        opts.alpha = 2.0
    assert CoDAOptions().gate == 2.0 and CoDAOptions(center_n=True).gate == 1.0  # eq. 5 / eq. 3
    # eq. 5's 2 is sigmoid's (it used to double Table 9's tanh, arctan and algebraic gates too, to (-2, 0])
    assert [CoDAOptions(n_fn=f).gate for f in ("tanh", "arctan", "algebraic")] == [1.0, 1.0, 1.0]
    assert CoDAOptions(n_fn="tanh", gate_scale=2).gate == 2.0
    assert CoDAOptions(scale=True, alpha=2.0).temperatures(16) == (0.5, 0.25)
    assert CoDAOptions(scale=False, alpha=2.0).temperatures(16) == (2.0, 1.0)
    assert CoDAOptions().replace(center_e=True).centred and not CoDAOptions().centred
    with pytest.raises(ValueError, match=r"unknown CoDA option\(s\) \['l1_backend'\]"):
        CoDAOptions().replace(l1_backend="torch")


def _defaults(fn) -> dict:
    params = inspect.signature(fn).parameters
    return {name: params[name].default for name in OPTION_NAMES}


@pytest.mark.parametrize("group", list(MODULES))
def test_module_defaults_are_the_dataclass_defaults_but_the_documented_ones(group):
    module = MODULES[group]
    want = {**DEFAULTS.as_dict(), **module.OPTION_DEFAULTS}
    assert _defaults(module.__init__) == want
    assert set(module.OPTION_DEFAULTS) < set(OPTION_NAMES)
    doc = " ".join(module.__doc__.split())
    for name, value in module.OPTION_DEFAULTS.items():  # a different default is said in the docstring
        assert re.search(rf"``{name}`` = \"?{value}\"?[:,.]", doc), name
    built = module(4) if module is CoDACrossAttention else module()
    assert built.options == CoDAOptions(**want)


def test_the_functional_defaults_are_the_printed_equations():
    tensors, mask = make_inputs(0)
    assert resolve_options(None, {}) == DEFAULTS
    # the functional API's default is the printed equations: the dataclass's but for eq. 10's 1/sqrt(d) scaling
    assert resolve_options(None, {}, PAPER_EQUATIONS) == DEFAULTS.replace(scale=False)
    assert torch.equal(coda_matrix(*tensors, mask=mask), coda_matrix(*tensors, CoDAOptions(scale=False), mask=mask))
    maps = coda_components(*tensors, CoDAOptions(n_fn="tanh"), mask=mask, center_n=True)  # object + override
    torch.testing.assert_close(maps.weights, coda_matrix(*tensors, mask=mask, n_fn="tanh", center_n=True, scale=True))


@pytest.mark.parametrize("group", list(MODULES))
def test_yaml_sets_every_option_to_the_code_default(group):
    cfg = OmegaConf.load(ROOT / "configs" / "model" / group / "coda.yaml")
    module = MODULES[group]
    params = inspect.signature(module.__init__).parameters
    assert set(OPTION_NAMES) <= set(cfg), "every CoDA option (center_over, kernel...) is reachable from the YAML"
    for key in cfg:
        if key.startswith("_") or key == "name":
            continue
        raw = OmegaConf.to_container(cfg, resolve=False)[key]
        if isinstance(raw, str) and raw.startswith("${"):
            continue  # the model's own value (hidden size, dropout)
        assert key in params, f"{group}/coda.yaml key {key} is no argument of {module.__name__}"
        assert raw == params[key].default, f"{group}/coda.yaml {key}: {raw!r}, code default {params[key].default!r}"


def test_module_defaults_have_one_table():
    """Each module's OPTION_DEFAULTS is its row of options.MODULE_OPTION_DEFAULTS; option_defaults(target) is what
    reports compare a run's options with (curves.attention_variant)."""
    from coda_exp.attention import CoDACrossAttention, CoDAScoring, option_defaults
    from coda_exp.attention.options import MODULE_OPTION_DEFAULTS

    assert CoDAScoring.OPTION_DEFAULTS is MODULE_OPTION_DEFAULTS["CoDAScoring"]
    assert CoDACrossAttention.OPTION_DEFAULTS is MODULE_OPTION_DEFAULTS["CoDACrossAttention"]
    assert option_defaults("coda_exp.attention.CoDAScoring") == {**DEFAULTS.as_dict(), "center_over": "row"}
    assert option_defaults("CoDACrossAttention")["gate_scale"] == 2.0
    assert option_defaults(None) == option_defaults("some.Other") == DEFAULTS.as_dict()
