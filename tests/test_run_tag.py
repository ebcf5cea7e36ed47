"""Run folders named by their configuration: ``${run_tag:...}`` (``coda_exp/run_tag.py``) in
``configs/hydra/default.yaml``'s single-run folder and sweep job subfolder."""

from __future__ import annotations

import re

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf, open_dict

from coda_exp import resolvers, run_tag
from coda_exp.fingerprint import configuration_label
from tests import ROOT

TAG = re.compile(rf"^-{run_tag.TAG_PATTERN}$")


def test_a_plain_run_has_no_tag():
    """Only what configuration_label leaves out: the grid's choices, seed, scale, budgets, where a run is stored."""
    plain = ["task=snli", "model=decompatt", "seed=3", "scale=fixture", "task.epochs=2", "paths.log_dir=/x",
             "resume=auto", "logger=csv", "data.dir=/data/snli", "trainer=cpu", "callbacks=gate_stats"]
    assert configuration_label(plain) == ""
    assert run_tag.folder_suffix(plain) == "" and run_tag.folder_suffix([]) == ""
    assert OmegaConf.create({"d": "x-s1${run_tag:${o}}", "o": plain}).d == "x-s1"


def test_overrides_give_a_readable_tag_ending_with_the_configurations_hash():
    suffix = run_tag.folder_suffix(["task=snli", "model=decompatt", "model/attention=coda", "optimizer.lr=3e-4"])
    assert TAG.match(suffix) and suffix.startswith("-attention_coda+lr_3e-4@")
    assert OmegaConf.create({"d": "${run_tag:${o}}", "o": ["optimizer.lr=3e-4", "model/attention=coda"]}).d == suffix
    # the same configuration whatever the order or the spelling of a number: the same hash; another: another hash
    assert run_tag.folder_suffix(["optimizer.lr=0.0003", "model/attention=coda"]).endswith(suffix[-7:])
    assert run_tag.folder_suffix(["optimizer.lr=1e-3", "model/attention=coda"])[-7:] != suffix[-7:]


def test_the_experiment_names_the_tag_and_shared_last_keys_keep_what_tells_them_apart():
    suffix = run_tag.folder_suffix(["experiment=table_8", "seed=2", "model.attention.center_e=true",
                                    "model.scoring.center_e=false"])
    assert suffix.startswith("-table_8+attention.center_e_true+scoring.center_e_fals")  # cut at 60 characters
    assert run_tag.folder_suffix(["experiment=quickstart", "model=decompatt_coda", "seed=1"]).startswith(
        "-quickstart@")
    assert run_tag.experiment_of(["experiment=a", "+experiment=b"]) == "b"
    assert run_tag.experiment_of(["model=x"]) is None


def test_what_the_folder_name_says_already_is_not_repeated_in_the_tag():
    """Your own data named as docs/layout.md advises (task.name=mine data.dataset=mine) made folders
    runs/mine-decompatt/...-s1-dataset_mine+name_mine@...: the hash still tells the configurations apart."""
    mine = run_tag.folder_suffix(["task=snli", "task.name=mine", "data.dataset=mine", "optimizer.lr=1e-3"])
    assert TAG.match(mine) and mine.startswith("-lr_1e-3@"), mine
    alone = run_tag.folder_suffix(["task=snli", "task.name=mine", "data.dataset=mine"])
    assert TAG.match(alone) and alone.startswith("-@") and alone != run_tag.folder_suffix(["task.name=other"])
    assert run_tag.folder_suffix(["task=snli", "data.dataset=mnli"]).startswith("-dataset_mnli@")
    assert run_tag.folder_suffix(["task=snli", "data.dataset=snli"]).startswith("-@")


def test_a_long_tag_is_cut_and_overrides_beyond_the_cut_still_name_another_folder():
    common = ["model.hidden_size=300", "data.batch_size=32", "model.dropout=0.1", "task.patience=5",
              "preset=paper", "optimizer.lr=1e-3"]
    first = run_tag.config_tag([*common, "trainer.precision=bf16-mixed"])
    second = run_tag.config_tag([*common, "trainer.precision=16-mixed"])
    assert len(first) == len(second) == run_tag.MAX_CHARS
    assert first[:-run_tag.HASH_CHARS] == second[:-run_tag.HASH_CHARS]  # cut before the precision (keys in order)
    assert "precision" in configuration_label([*common, "trainer.precision=16-mixed"])
    assert first != second and TAG.match("-" + first) and TAG.match("-" + second)
    huge = run_tag.config_tag([f"model.k{i}=" + "v" * 40 for i in range(20)])
    assert len(huge) <= run_tag.MAX_CHARS and not re.search(r"[+_.-]@", huge)  # cut, never ending with a separator


@pytest.mark.parametrize("override", ["x.y='a b/c'", "+foo.bar=[1,2]", "x.y={a:1}", 'x.y="p\\\\q*?<>|:"',
                                      "x.y=${oc.env:HOME}", "~model.scoring.beta", "x.y=é"])
def test_unsafe_characters_are_replaced(override):
    """Only characters safe in a file name on Linux, macOS and Windows, in a shell unquoted, and in a Hydra override
    value (ckpt_path=<folder>/...: no '=' nor ',')."""
    suffix = run_tag.folder_suffix([override])
    assert TAG.match(suffix), suffix
    from hydra.core.override_parser.overrides_parser import OverridesParser

    path = f"/o/runs/snli-decompatt/2026-01-01_00-00-00.000000-s1{suffix}/checkpoints/last.ckpt"
    assert OverridesParser.create().parse_override(f"ckpt_path={path}").value() == path


def test_a_deletion_and_an_empty_value_stay_apart():
    assert run_tag.folder_suffix(["~model.scoring.beta"]).startswith("-del_beta@")
    assert run_tag.folder_suffix(["model.scoring.beta=''"]) != run_tag.folder_suffix(["model.scoring.beta="])


def _hydra(overrides: list[str], num: int = 0):
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "configs")):
        cfg = compose("train", overrides=["paths.log_dir=/o", *overrides], return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.job.num = num
    HydraConfig.instance().set_config(cfg)  # as Hydra's run_job does before it resolves the job's folder
    return cfg.hydra


TIME = r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d\.\d{6}"


@pytest.mark.parametrize("overrides,names,tag", [
    (["task=snli", "model=decompatt"], "snli-decompatt", ""),
    (["task=snli", "scale=fixture", "task.epochs=1", "paths.results_dir=/r", "hydra.job.chdir=false"],
     "snli-decompatt", ""),
    (["task=snli", "model=decompatt", "model/attention=coda", "optimizer.lr=3e-4"], "snli-decompatt",
     "-attention_coda+lr_3e-4@"),
    (["experiment=quickstart", "model=decompatt_coda"], "wikiqa-decompatt_coda", "-quickstart@"),
])
def test_the_composed_run_folder_and_sweep_subfolder_carry_the_tag(overrides, names, tag):
    assert resolvers.run_tag_suffix  # (the import registers it, as the entry point's does)
    hydra = _hydra([*overrides, "seed=2"], num=3)
    run_dir, subdir = str(hydra.run.dir), str(hydra.sweep.subdir)
    hashed = rf"[0-9a-f]{{{run_tag.HASH_CHARS}}}" if tag else ""
    assert re.fullmatch(rf"/o/runs/{names}/{TIME}-s2{re.escape(tag)}{hashed}", run_dir), run_dir
    assert re.fullmatch(rf"3-{names}-s2{re.escape(tag)}{hashed}", subdir), subdir
    assert run_dir.endswith(subdir.split("-s2", 1)[1])  # one tag for both


def test_an_interpolation_in_an_override_names_the_folder_as_typed():
    """``callbacks.x.dirpath=${paths.output_dir}/c`` would name the folder not made yet: not resolved."""
    hydra = _hydra(["task=snli", "+callbacks.x.dirpath=${paths.output_dir}/c", "optimizer.lr=${task.epochs}"])
    assert re.search(r"-s1-dirpath_paths\.output_dir_c\+lr_task\.epochs@[0-9a-f]+$", str(hydra.run.dir))
