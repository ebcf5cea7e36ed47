"""AttConv's YAML: the paper's settings, and the attention swapped from the command line (model/attention=coda)."""

import pytest
import torch

from coda_exp import pipeline
from coda_exp.attention import CoDACrossAttention, SoftmaxCrossAttention
from coda_exp.config_checks import ConfigError
from coda_exp.models import AttConvAdvanced, AttConvLight, AttConvNoConv, attconv_parameter_count
from coda_exp.run_checks import check_compatible


class Data:
    """What a pair data module tells the model (``model_kwargs``), without reading files."""

    def model_kwargs(self):
        return {"vocab_size": 20, "num_classes": 3, "embeddings": None}


def build(make_cfg, *overrides):
    return pipeline.build_model(make_cfg("task=snli", *overrides), Data())


@pytest.mark.parametrize("model,cls", [("attconv_light", AttConvLight), ("attconv_advanced", AttConvAdvanced),
                                       ("attconv_light_noconv", AttConvNoConv)])
def test_paper_settings_and_the_papers_softmax(make_cfg, model, cls):
    net = build(make_cfg, f"model={model}")
    assert type(net) is cls and net.layer.context.attention is None  # eq. 4's softmax
    assert net.embed.embedding_dim == 300 and net.embed.weight.requires_grad  # §4.1: 300-d, fine-tuned
    if model != "attconv_light_noconv":
        assert net.layer.attconv.conv.kernel_size == (3,)  # filter width 3
    assert pipeline.attention_options(make_cfg(f"model={model}")) == {"name": "none"}
    if model == "attconv_light":
        assert attconv_parameter_count(net) == 360_300


@pytest.mark.parametrize("model", ["attconv_light", "attconv_advanced"])
@pytest.mark.parametrize("matching", ["dot", "bilinear"])
def test_coda_swaps_in_from_the_command_line(make_cfg, model, matching):
    net = build(make_cfg, f"model={model}", "model/attention=coda", f"model.matching={matching}")
    attention = net.layer.context.attention
    assert isinstance(attention, CoDACrossAttention) and attention.options.gate == 2.0
    assert attention.proj_e[1].out_features == 300  # hidden: ${model.hidden_size}
    assert pipeline.attention_options(make_cfg(f"model={model}", "model/attention=coda"))["name"] == "coda"
    a, b = torch.tensor([[3, 4, 5]]), torch.tensor([[6, 7]])
    assert net(a, a != 0, b, b != 0).shape == (1, 3)


def test_softmax_cross_attention_fits_too_and_additive_needs_the_paper_softmax(make_cfg):
    net = build(make_cfg, "model=attconv_light", "model/attention=softmax")
    assert isinstance(net.layer.context.attention, SoftmaxCrossAttention)
    with pytest.raises(ConfigError, match="model.matching=additive needs the paper's softmax"):  # before any data
        build(make_cfg, "model=attconv_light", "model/attention=coda", "model.matching=additive")
    with pytest.raises(ConfigError, match="model.matching=additive needs the paper's softmax"):
        check_compatible(make_cfg("task=snli", "model=attconv_light", "model/attention=coda", "model.matching=additive"))
    check_compatible(make_cfg("task=snli", "model=attconv_light", "model.matching=additive"))
    check_compatible(make_cfg("task=snli", "model=attconv_light", "model/attention=coda", "model.matching=bilinear"))
    assert build(make_cfg, "model=attconv_light", "model.matching=additive").layer.context.matching.v is not None
