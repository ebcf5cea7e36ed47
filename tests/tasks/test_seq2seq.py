"""Seq2SeqTask evaluation: the final validation decodes like the test, <unk> never matches, saved predictions."""

from __future__ import annotations

import functools

import pytest
import torch

from coda_exp.data.common.vocab import BOS_ID as BOS
from coda_exp.data.common.vocab import EOS_ID as EOS
from coda_exp.data.common.vocab import PAD_ID as PAD
from coda_exp.data.common.vocab import UNK_ID as UNK
from coda_exp.tasks import Seq2SeqTask, TaskModule
from tests import FIXTURES

BEAM = {"strategy": "beam", "beam_size": 4, "length_penalty": 0.6, "max_len_a": 1.5, "max_len_b": 10}


def make_task(**kwargs) -> Seq2SeqTask:
    args = {"model": torch.nn.Linear(2, 2), "optimizer": functools.partial(torch.optim.SGD, lr=0.1),
            "pad_id": PAD, "bos_id": BOS, "eos_id": EOS, "unk_id": UNK,
            "decode_text": lambda ids: " ".join(f"w{i}" if i != UNK else "<unk>" for i in ids), "decoding": BEAM}
    return Seq2SeqTask(**{**args, **kwargs})


def finish(task: Seq2SeqTask, stage: str, rows: list) -> dict:
    """Run the end of an evaluation epoch on (index, hypothesis ids, reference ids) rows; the logged metrics."""
    logged = {}
    task.log_dict = lambda metrics, **_: logged.update(metrics)
    task._eval[stage] = rows
    task._finish(stage)
    return logged


def test_final_validation_decodes_like_the_test():
    task = make_task()
    assert task.eval_decoding("val") == {"strategy": "greedy", "max_len_a": 1.5, "max_len_b": 10}
    assert task.eval_decoding("test") == BEAM
    task.prepare_final_evaluation()
    assert task.eval_decoding("val") == BEAM and task.eval_decoding("test") == BEAM
    TaskModule.prepare_final_evaluation(task)  # the base hook exists and does nothing
    # val_decoding null takes every length cap of decoding (max_len used to be left out: greedy ran to 512 tokens)
    capped = make_task(decoding={**BEAM, "max_len": 24})
    assert capped.eval_decoding("val") == {"strategy": "greedy", "max_len": 24, "max_len_a": 1.5, "max_len_b": 10}


def test_final_validation_generates_with_the_test_decoding(monkeypatch):
    task = make_task()
    used = []
    monkeypatch.setattr(task, "forward", lambda batch: torch.zeros(1, 2, 8))
    monkeypatch.setattr(task, "log", lambda *a, **k: None)
    monkeypatch.setattr(task, "generate", lambda batch, decoding: used.append(decoding["strategy"])
                        or torch.tensor([[5, EOS]]))
    batch = {"tgt_out": torch.tensor([[5, EOS]]), "tgt_mask": torch.tensor([[True, True]]), "index": torch.tensor([0])}
    task._start("val")
    task._eval_step(batch, "val")
    task.prepare_final_evaluation()
    task._eval_step(batch, "val")
    assert used == ["greedy", "beam"]


def test_exact_match_never_counts_the_unknown_token():
    rows = [(0, [5, 6], [5, 6]), (1, [5, UNK], [5, UNK]), (2, [UNK], [UNK]), (3, [5], [6])]
    task = make_task()
    assert finish(task, "test", rows)["test/acc_seq"] == pytest.approx(0.25)
    assert [r["exact"] for r in task.test_predictions] == [True, False, False, False]
    assert finish(make_task(unk_id=None), "val", rows)["val/acc_seq"] == pytest.approx(0.75)  # no unk: ids only


def test_an_output_cut_at_the_length_cap_is_not_exact(monkeypatch):
    """A hypothesis the decoder cut at its length cap (no end-of-sequence token) whose tokens equal the reference
    does not count: the model had not stopped there."""
    task = make_task()
    monkeypatch.setattr(task, "forward", lambda batch: torch.zeros(2, 3, 8))
    monkeypatch.setattr(task, "log", lambda *a, **k: None)
    monkeypatch.setattr(task, "generate", lambda batch, decoding: torch.tensor([[5, 6, EOS], [5, 6, 7]]))
    batch = {"tgt_out": torch.tensor([[5, 6, EOS], [5, 6, EOS]]), "tgt_mask": torch.ones(2, 3, dtype=torch.bool),
             "index": torch.tensor([0, 1])}
    task._start("test")
    task._eval_step(batch, "test")
    capped = make_task()
    monkeypatch.setattr(capped, "forward", lambda batch: torch.zeros(1, 3, 8))
    monkeypatch.setattr(capped, "log", lambda *a, **k: None)
    monkeypatch.setattr(capped, "generate", lambda batch, decoding: torch.tensor([[5, 6]]))  # the cap: 2 tokens
    capped._start("test")
    capped._eval_step({k: v[1:] for k, v in batch.items()}, "test")
    assert [row[3] for row in task._eval["test"]] == [True, False]
    assert finish(task, "test", task._eval["test"])["test/acc_seq"] == pytest.approx(0.5)
    assert [r["exact"] for r in task.test_predictions] == [True, False]
    assert [r["hypothesis"] for r in task.test_predictions] == ["w5 w6", "w5 w6 w7"]
    assert finish(capped, "test", capped._eval["test"])["test/acc_seq"] == 0.0  # "w5 w6" = the reference, cut


def test_predictions_keep_raw_references_and_per_example_outcomes(monkeypatch):
    from coda_exp.tasks import seq2seq_eval

    raw = {"test": [{"tgt": "w5 ngựa_vằn", "tests": []}, {"tgt": "w7", "tests": []}]}
    calls = []

    def fake_execution(hyps, examples, run_info):
        calls.append((hyps, examples))
        run_info["seen"] = True
        return {"acc_exec": 0.5, "exec": [True, False]}

    monkeypatch.setitem(seq2seq_eval.EVALUATIONS, "execution", fake_execution)
    info: dict = {}
    task = make_task(targets=lambda split: raw[split], evaluations=["execution"], run_info=info)
    logged = finish(task, "test", [(0, [5, UNK], [5, UNK]), (1, [7], [7])])
    assert calls == [(["w5 <unk>", "w7"], raw["test"])] and info == {"seen": True}
    assert logged == {"test/acc_seq": 0.5, "test/acc_exec": 0.5}  # the per-example list is not a metric
    assert task.test_predictions == [
        {"index": 0, "hypothesis": "w5 <unk>", "reference": "w5 ngựa_vằn", "exact": False, "exec": True},
        {"index": 1, "hypothesis": "w7", "reference": "w7", "exact": True, "exec": False}]
    no_raw = make_task()  # no raw examples: the reference ids are decoded
    finish(no_raw, "test", [(0, [5, UNK], [5, UNK])])
    assert no_raw.test_predictions[0]["reference"] == "w5 <unk>"
    monkeypatch.setitem(seq2seq_eval.EVALUATIONS, "execution", lambda *a: {"exec": [True]})
    bad = make_task(targets=lambda split: raw[split], evaluations=["execution"])
    with pytest.raises(ValueError, match="per-example 'exec' has 1 values for 2 hypotheses"):
        finish(bad, "test", [(0, [5], [5]), (1, [7], [7])])
    with pytest.raises(ValueError, match="unknown sequence evaluation 'rouge'"):
        make_task(targets=lambda split: raw[split], evaluations=["rouge"])
    with pytest.raises(ValueError, match="need the raw examples"):
        make_task(evaluations=["bleu"])


@pytest.mark.parametrize("name", ["iwslt15_envi", "algolisp"])
def test_data_modules_give_unk_id_and_raw_references(name):
    from coda_exp.data import AlgoLispDataModule, IWSLTDataModule

    # IWSLT with the release's word vocabularies: its <unk> below (the default joint BPE: tests/data/seq2seq)
    dm = (IWSLTDataModule(dir=str(FIXTURES / name), batch_size=4, tokenizer="word") if name == "iwslt15_envi"
          else AlgoLispDataModule(dir=str(FIXTURES / name), batch_size=4))
    dm.setup()
    kwargs = dm.task_kwargs()
    assert kwargs["unk_id"] == UNK and kwargs["pad_id"] == PAD and kwargs["run_info"] is dm.stats
    assert kwargs["evaluations"] == (["bleu"] if name == "iwslt15_envi" else ["execution"])
    if name == "iwslt15_envi":  # tst2013's first line holds a word outside vocab.vi
        line = (FIXTURES / name / "tst2013.vi").read_text(encoding="utf-8").splitlines()[0]
        assert kwargs["targets"]("test")[0]["tgt"] == line == "tôi thấy một ngựa_vằn ."
        assert dm.tgt_tokenizer.decode(dm.splits["test"][0]["tgt"]) == "tôi thấy một <unk> ."
    else:
        assert kwargs["targets"]("test")[1]["tests"] == dm.examples["test"][1]["tests"]


def test_decoding_keys_a_strategy_does_not_take_are_refused_and_use_cache_reaches_greedy(monkeypatch):
    """Greedy used to drop beam options and misspelt caps without a word (max_length: decoding up to 512 tokens)
    and beam raised a TypeError on them: both strategies now refuse them, naming the keys the strategy takes."""
    from coda_exp.tasks import seq2seq

    with pytest.raises(ValueError, match=r"decoding\.max_length, decoding\.beam_size: not options of "
                                         r"decoding\.strategy=greedy, which takes max_len, max_len_a, max_len_b, "
                                         r"use_cache; beam_size is beam search's: set decoding\.strategy=beam"):
        make_task(decoding={"strategy": "greedy", "max_length": 3, "beam_size": 8})
    with pytest.raises(ValueError, match=r"val_decoding\.max_length: not an option of val_decoding\.strategy=beam, "
                                         r"which takes beam_size, .*did you mean val_decoding\.max_len"):
        make_task(val_decoding={"strategy": "beam", "max_length": 3})
    task = make_task()  # val_decoding null: greedy with decoding's caps, its beam options left out
    calls = []
    for name in ("greedy_decode", "beam_search"):
        monkeypatch.setattr(seq2seq, name, lambda model, src, mask, _n=name, **kw: calls.append((_n, kw)))
    batch = {"src_ids": torch.ones(1, 3, dtype=torch.long), "src_mask": torch.ones(1, 3, dtype=torch.bool)}
    task.generate(batch, {"strategy": "greedy", "max_len": 7, "use_cache": False})
    task.generate(batch, task.eval_decoding("val"))
    task.generate(batch, task.eval_decoding("test"))
    assert calls == [("greedy_decode", {"max_len": 7, "use_cache": False}),
                     ("greedy_decode", {"max_len": 512, "max_len_a": 1.5, "max_len_b": 10}),
                     ("beam_search", {"max_len": 512, **{k: v for k, v in BEAM.items() if k != "strategy"}})]
    with pytest.raises(ValueError, match=r"decoding\.length_penalty: not an option of decoding\.strategy=greedy"):
        task.generate(batch, {"strategy": "greedy", "length_penalty": 0.6})
    with pytest.raises(ValueError, match=r"decoding\.strategy = 'beem': expected greedy or beam"):
        task.generate(batch, {"strategy": "beem"})
