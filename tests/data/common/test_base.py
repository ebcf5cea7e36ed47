"""The base data module's choice of splits: an evaluation with the trained model's tokenizers reads the split it
evaluates, and needs no training file (``coda-exp eval split=test data.dir=...`` of a folder without one)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hydra.utils import instantiate

from coda_exp.data.common.errors import DataError

FAMILIES = {  # task: (its overrides, a file or folder name of its training split)
    "snli": (["task=snli"], "snli_1.0_train.jsonl"),
    "wikiqa": (["task=wikiqa"], "WikiQA-train.tsv"),
    "trecqa": (["task=trecqa"], "TRAIN-ALL.xml"),
    "scitail": (["task=scitail"], "scitail_1.0_train.tsv"),
    "sst": (["task=sst", "model=transformer_classifier"], "stsa.binary.train"),
    "imdb": (["task=imdb", "model=transformer_classifier"], "train"),
    "mlu": (["task=mlu", "model=transformer"], "train.txt"),
    "algolisp": (["task=algolisp", "model=transformer"], "metaset3.train.jsonl"),
    "iwslt15_envi": (["task=iwslt15_envi", "model=transformer"], "train.en"),
    "quasart": (["task=quasart", "model=decaprop"], "train"),
    "fever": (["task=fever"], "train.jsonl"),
}


def without_training_files(source: Path, folder: Path) -> Path:
    """A copy of the fixture folder ``source`` without a file or folder whose name says ``train``."""
    shutil.copytree(source, folder, ignore=lambda _, names: [n for n in names if "train" in n.lower()])
    return folder


@pytest.mark.parametrize("task", list(FAMILIES))
def test_an_evaluation_with_saved_tokenizers_reads_its_split_alone(make_cfg, tmp_path, task):
    overrides, train_name = FAMILIES[task]
    cfg = make_cfg(*overrides, "scale=fixture")
    trained = instantiate(cfg.data)
    trained.setup("fit")
    state = trained.encoder_state()
    assert any(train_name in str(p) for p in Path(cfg.data.dir).rglob("*"))  # the copy below lacks it
    copy = without_training_files(Path(cfg.data.dir), tmp_path / "eval_data")
    restored = instantiate(cfg.data, dir=str(copy))
    restored.restore_encoders(state)
    restored.only_splits = ("test",)
    restored.setup("fit")
    assert "train" not in restored.splits and "validation" not in restored.splits
    assert any(s == "test" or s.startswith("test_") for s in restored.splits)

    rebuilt = instantiate(cfg.data, dir=str(copy))  # no saved tokenizers: they come from the training files
    rebuilt.only_splits = ("test",)
    with pytest.raises(DataError, match="train"):
        rebuilt.setup("fit")


def test_a_held_out_validation_split_still_reads_the_training_file(make_cfg, tmp_path):
    """``data.validation_from_train``: the validation split is part of the training file, so it is read."""
    cfg = make_cfg("task=snli", "scale=fixture", "+data.validation_from_train=0.2")
    trained = instantiate(cfg.data)
    trained.setup("fit")
    restored = instantiate(cfg.data)
    restored.restore_encoders(trained.encoder_state())
    restored.only_splits = ("validation",)
    restored.setup("fit")
    assert len(restored.splits["validation"]) == len(trained.splits["validation"])
    assert "test" not in restored.splits
