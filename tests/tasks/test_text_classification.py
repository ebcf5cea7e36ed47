import functools
import math

import pytest
import pytorch_lightning as pl
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from torch import nn

from coda_exp import pipeline
from coda_exp.data.common import tokenization
from coda_exp.data.common.errors import DataError
from coda_exp.data.common.vocab import EOS_ID, PAD_ID
from coda_exp.data.text.datamodule import TextClassificationDataModule
from coda_exp.data.text.readers import get_text_reader
from coda_exp.tasks.base import TaskModule
from coda_exp.tasks.text_classification import TextClassificationTask
from tests import FIXTURES

SOURCES = {"imdb": FIXTURES / "imdb", "sst2": FIXTURES / "sst", "sst5": FIXTURES / "sst"}


class MeanPoolClassifier(nn.Module):
    """Stand-in with TransformerClassifier's signature: ``forward(ids, mask) -> logits``."""

    def __init__(self, vocab_size: int, num_classes: int, pad_id: int = 0, dim: int = 16, **_):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, dim, padding_idx=pad_id)
        self.out = nn.Linear(dim, num_classes)

    def forward(self, ids, mask):
        h = self.emb(ids) * mask.unsqueeze(-1)
        return self.out(h.sum(1) / mask.sum(1, keepdim=True).clamp(min=1))


def make_dm(cache, name, **kw):
    kw = {"max_tokens": 256, "max_len": 64, "bpe_vocab_size": 300, **kw}
    dm = TextClassificationDataModule(name, dir=str(SOURCES[name]), cache_dir=str(cache), **kw)
    dm.setup()
    return dm


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.mark.parametrize("name,sizes,classes", [("imdb", (14, 2, 16), 2), ("sst2", (30, 10, 10), 2),
                                                ("sst5", (30, 10, 10), 5)])
def test_datamodule_on_fixtures(cache, name, sizes, classes):
    dm = make_dm(cache, name)
    assert tuple(dm.stats[f"{s}_examples"] for s in ("train", "validation", "test")) == sizes
    assert dm.model_kwargs() == {"vocab_size": dm.tokenizer.vocab_size, "num_classes": classes, "pad_id": 0}
    assert dm.task_kwargs() == {"num_classes": classes}
    assert dm.warnings == [] and dm.stats["vocab_size"] == dm.tokenizer.vocab_size
    seen = []
    for b in dm.train_dataloader():
        assert set(b) == {"ids", "mask", "label", "index", "length"}
        # the text's tokens before truncation, without the appended eos (AttConv Figure 5 groups by it)
        assert (b["length"] >= b["mask"].sum(-1) - int(dm.append_eos)).all()
        assert b["ids"].dtype == torch.long and b["mask"].dtype == torch.bool and b["label"].dtype == torch.long
        assert b["ids"].numel() <= 256  # the token budget, padding included
        assert torch.equal(b["mask"], b["ids"] != PAD_ID)
        n = b["mask"].sum(1)
        assert n.max() == b["ids"].shape[1]  # padded to the longest in the batch
        assert (b["ids"][torch.arange(len(n)), n - 1] == EOS_ID).all()  # eos ends every text
        seen += b["index"].tolist()
    assert sorted(seen) == list(range(sizes[0]))


def test_batches_map_back_to_the_reader(cache):
    dm = make_dm(cache, "sst2")
    texts = [x["text"] for x in get_text_reader("sst2").read("test", SOURCES["sst2"])]
    labels = [x["label"] for x in get_text_reader("sst2").read("test", SOURCES["sst2"])]
    for b in dm.test_dataloader():
        for ids, y, i in zip(b["ids"], b["label"], b["index"]):
            assert dm.tokenizer.decode(ids) == texts[i] and y == labels[i]


def test_tokenizer_is_trained_on_train_and_cached(cache, monkeypatch):
    first = make_dm(cache, "sst5")
    assert first.tokenizer_path.is_file() and first.tokenizer_path.parent == cache / "sst5"

    def refuse(*a, **k):
        raise AssertionError("retrained although cached")

    monkeypatch.setattr(tokenization, "train_bpe", refuse)
    again = make_dm(cache, "sst5")
    assert again.tokenizer_path == first.tokenizer_path
    assert again.splits["train"]["ids"] == first.splits["train"]["ids"]
    with pytest.raises(AssertionError, match="retrained"):  # another vocabulary size is another tokenizer
        make_dm(cache, "sst5", bpe_vocab_size=200)


def test_truncation_subsets_and_fixed_size_batches(tmp_path):
    dm = make_dm(tmp_path, "imdb", max_len=8, max_tokens=None, batch_size=4, max_train_examples=6,
                 max_eval_examples=3)
    assert max(dm.splits["train"]["length"]) == 8 and dm.stats["train_truncated"] == 6
    assert all(ids[-1] == EOS_ID for ids in dm.splits["train"]["ids"])
    assert dm.stats["train_examples"] == 6 and dm.stats["test_examples"] == 3
    assert set(dm.splits["train"]["index"]) <= set(range(14))  # the reader's index survives subsetting
    assert [len(b["label"]) for b in dm.train_dataloader()] == [4, 2]
    no_eos = make_dm(tmp_path, "imdb", max_len=8, append_eos=False)
    assert EOS_ID not in {t for ids in no_eos.splits["train"]["ids"] for t in ids}


def test_imdb_validate_on_test_records_a_warning(tmp_path):
    dm = make_dm(tmp_path, "imdb", val_fraction=0.0)
    assert dm.stats["train_examples"] == 16 and dm.stats["validation_examples"] == 16
    assert dm.warnings and "test set" in dm.warnings[0]


def test_datamodule_errors(tmp_path):
    with pytest.raises(DataError, match=r"unknown tokenizer 'chars'.*\['bpe', 'word'\]"):
        TextClassificationDataModule("sst2", tokenizer="chars")
    with pytest.raises(DataError, match="max_tokens=100 is below max_len=512"):
        TextClassificationDataModule("sst2", max_tokens=100, max_len=512)
    with pytest.raises(DataError, match="unknown dataset 'yelp5'"):
        TextClassificationDataModule("yelp5")
    with pytest.raises(DataError, match="lacks stsa.binary.train"):
        TextClassificationDataModule("sst2", dir=str(tmp_path), cache_dir=str(tmp_path / "c")).setup()


def test_label_smoothing_follows_t2t():
    task = TextClassificationTask(MeanPoolClassifier(10, 2), torch.optim.Adam, num_classes=2, label_smoothing=0.1)
    batch = {"ids": torch.tensor([[4, 5, 2]]), "mask": torch.ones(1, 3, dtype=torch.bool), "label": torch.tensor([1])}
    task.log = lambda *a, **k: None
    logp = torch.log_softmax(task(batch), -1)[0]
    expected = -(0.9 * logp[1] + 0.1 * logp[0]) + (0.9 * math.log(0.9) + 0.1 * math.log(0.1))  # KL to (0.1, 0.9)
    assert task.training_step(batch, 0).item() == pytest.approx(expected.item(), rel=1e-5)


def test_lightning_fast_dev_run_with_test_predictions(cache):
    dm = make_dm(cache, "sst5")
    net = MeanPoolClassifier(**dm.model_kwargs())
    task = TextClassificationTask(net, functools.partial(torch.optim.Adam, lr=1e-2), label_smoothing=0.1,
                                  **dm.task_kwargs())
    assert isinstance(task, TaskModule)
    trainer = pl.Trainer(fast_dev_run=True, accelerator="cpu", logger=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(task, datamodule=dm)
    out = trainer.test(task, datamodule=dm, verbose=False)[0]
    assert 0.0 <= out["test/acc"] <= 1.0 and torch.isfinite(torch.tensor(out["test/loss"]))
    preds = task.test_predictions
    first = next(iter(dm.test_dataloader()))
    assert [p["index"] for p in preds] == first["index"].tolist()
    assert set(preds[0]) == {"index", "label", "prediction", "length"} and all(0 <= p["prediction"] < 5 for p in preds)
    assert [p["length"] for p in preds] == first["length"].tolist()


@pytest.mark.parametrize("overrides,classes,steps", [(["task=imdb"], 2, 20), (["task=sst"], 2, 8),
                                                     (["task=sst", "data.dataset=sst5"], 5, 8)])
def test_task_configs_build_on_fixtures(make_cfg, overrides, classes, steps):
    paper = make_cfg(*overrides)  # the paper's settings (scale=paper); the fixture scale shrinks steps/batches
    assert paper.task.max_steps == 2000 and paper.data.max_tokens == 4096 and paper.scheduler.warmup_steps == 8000
    cfg = make_cfg(*overrides, "scale=fixture", "scheduler.warmup_steps=8000")
    assert cfg.task.family == "text_classification" and cfg.task.monitor == "val/acc"
    # step-bounded as at the paper's scale (SST's fixture: one batch, a step an epoch, 8 of them)
    assert cfg.task.max_steps == steps and cfg.task.epochs == 1000 and cfg.data.max_tokens == 512
    assert str(cfg.data.dir).endswith(f"tests/fixtures/{cfg.task.name}")
    dm = instantiate(cfg.data)
    dm.setup()
    assert dm.num_classes == classes
    task = pipeline.build_task(cfg, MeanPoolClassifier(**dm.model_kwargs()), dm)
    assert isinstance(task, TextClassificationTask)
    assert task.label_smoothing == 0.1
    opt = task.configure_optimizers()
    assert tuple(opt["optimizer"].defaults["betas"]) == (0.9, 0.997)
    opt["optimizer"].step()  # (no gradients: a no-op) so that the scheduler may step
    sched = opt["lr_scheduler"]["scheduler"]
    for _ in range(1999):
        sched.step()
    # T2T transformer_tiny: 2.0 * (2000 / 8000) * 8000 ** -0.5 * 128 ** -0.5 at the 2000th step
    assert sched.get_last_lr()[0] == pytest.approx(2.0 * 0.25 * 8000 ** -0.5 * 128 ** -0.5)


def test_yelp_task_config_has_the_paper_settings(make_cfg):
    cfg = make_cfg("task=yelp", "model=transformer_classifier")
    assert cfg.task.family == "text_classification" and cfg.task.monitor == "val/acc" and cfg.task.epochs == 10
    assert cfg.optimizer._target_ == "torch.optim.Adagrad" and cfg.optimizer.lr == 0.01  # AttConv §4.1
    d = cfg.data
    assert (d.dataset, d.tokenizer, d.batch_size, d.max_len, d.min_words, d.lowercase) == ("yelp", "word", 50, 100,
                                                                                           4, True)
    assert d.append_eos is False and d.embeddings.path is None and cfg.get("scheduler") is None
    cpu = make_cfg("task=yelp", "scale=cpu")
    assert (cpu.data.max_train_examples, cpu.data.max_eval_examples, cpu.task.epochs) == (50000, None, 5)
    fixture = make_cfg("task=yelp", "scale=fixture")
    assert str(fixture.data.dir).endswith("tests/fixtures/yelp") and fixture.data.batch_size == 10


def test_yelp_fast_dev_run_through_the_pipeline(make_cfg, tmp_path):
    cfg = make_cfg("task=yelp", "model=transformer_classifier", "scale=fixture", "debug=fdr", "logger=none")
    dm = instantiate(cfg.data)
    dm.setup()
    assert dm.model_kwargs()["embeddings"] is None and dm.num_classes == 5
    assert dm.stats["train_dropped_short"] == 2 and dm.stats["train_examples"] == 58
    net = pipeline.build_model(cfg, dm)
    task = pipeline.build_task(cfg, net, dm)
    opt = task.configure_optimizers()
    assert isinstance(opt, torch.optim.Adagrad) and opt.defaults["lr"] == 0.01 and opt.defaults["eps"] == 1e-8
    pipeline.run(cfg)
    assert not (tmp_path / "results" / "runs").exists()  # debug runs write no record


def test_transformer_classifier_refuses_pretrained_vectors(make_cfg, tmp_path):
    vectors = tmp_path / "vectors.txt"
    vectors.write_text("good 1 0\nbad 0 1\n", encoding="utf-8")
    cfg = make_cfg("task=yelp", "model=transformer_classifier", "scale=fixture", f"data.embeddings.path={vectors}")
    dm = instantiate(cfg.data)
    dm.setup()
    assert dm.model_kwargs()["embeddings"].shape == (dm.tokenizer.vocab_size, 2)
    with pytest.raises(InstantiationException, match="takes no pretrained vectors; set data.embeddings.path=null"):
        pipeline.build_model(cfg, dm)
