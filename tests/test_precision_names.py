"""trainer.precision as a configuration: Lightning's spellings of one precision are one configuration (fingerprint,
run tag, label), and float16 weights with an optimizer whose eps float16 cannot hold are refused."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from coda_exp import run_tag
from coda_exp.fingerprint import configuration_label, fingerprint, same_spelling
from coda_exp.precision_checks import float16_weights_problem
from tests import ROOT


@pytest.mark.parametrize("spellings", [
    (["trainer.precision=bf16"], ["trainer.precision=bf16-mixed"], ["+trainer.precision='bf16-mixed'"]),
    (["trainer.precision=32"], ["trainer.precision=32-true"], []),
    (["trainer.precision=16"], ["trainer.precision=16-mixed"]),
    (["trainer.precision=64"], ["trainer.precision=64-true"]),
])
def test_spellings_of_one_precision_are_one_configuration(spellings):
    """A probe trained snli x decompatt_coda five ways: bf16 and bf16-mixed (bit-identical metrics), 32, 32-true and
    no override (bit-identical) had five fingerprints, so tables never pooled them."""
    prints = {fingerprint(["model/attention=coda", *s]) for s in spellings}
    tags = {run_tag.folder_suffix(["model/attention=coda", *s]) for s in spellings}
    labels = {configuration_label(["model/attention=coda", *s]) for s in spellings}
    assert len(prints) == len(tags) == len(labels) == 1, (prints, tags, labels)
    assert same_spelling(["seed=1", "~trainer.precision"]) == ["seed=1", "~trainer.precision"]


def test_the_default_precision_is_every_trainer_options():
    """Why an explicit 32-true is no configuration change: every configs/trainer option runs 32-true unless told."""
    for path in sorted((ROOT / "configs" / "trainer").glob("*.yaml")):
        precision = OmegaConf.load(path).get("precision")
        assert precision in (None, "32-true"), path


@pytest.mark.parametrize("optimizer,refused", [
    ({"_target_": "torch.optim.Adam", "_partial_": True, "lr": 3e-4}, ("Adam's state would be float16, where its "
                                                                       "eps=1e-08 is 0")),
    ({"_target_": "torch.optim.Adagrad", "_partial_": True, "eps": 1e-8}, "Adagrad's state"),
    ({"_target_": "torch.optim.Adam", "_partial_": True, "eps": 1e-4}, None),
    ({"_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.1}, None),  # no eps at all
    (None, None),
])
def test_float16_weights_need_an_eps_float16_holds(optimizer, refused):
    problem = float16_weights_problem(OmegaConf.create(optimizer) if optimizer else None)
    assert (problem is None) if refused is None else (refused in problem and "optimizer.eps=1e-4" in problem)
