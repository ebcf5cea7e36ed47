"""coda-exp eval and predict end to end: train a fixture model, evaluate its checkpoint (the training record's test
metrics again, a record the tables count once), predict from files of new inputs (pair, ranking, text, seq2seq,
span), and every user mistake as one message and exit status 2."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from coda_exp import results, table_render, tables
from coda_exp.errors import USER_ERROR_EXIT
from coda_exp.evaluate import eval_main, main, predict_main
from tests import FIXTURES, ROOT
from tests.conftest import eval_paths as _paths
from tests.conftest import train_fixture_model as _train

pytestmark = pytest.mark.usefixtures("one_thread")


def _records(folder, mode):
    return [r for r in results.load_records(folder / "results" / "runs", strict=True) if r.get("mode") == mode]


def test_eval_of_a_checkpoint_gives_the_training_records_metrics_and_counts_once(snli_model, tmp_path):
    _, trained, ckpt = snli_model
    out = tmp_path / "eval"
    assert eval_main([f"ckpt_path={ckpt}", *_paths(out)]) == 0
    (record,) = _records(out, "eval")
    assert set(record["metrics"]) == set(trained["metrics"])
    for name, value in trained["metrics"].items():
        assert record["metrics"][name] == pytest.approx(value, abs=1e-6), name
    # the trained run's configuration: the same cells, the same fingerprint
    for key in ("task", "model", "attention", "seed", "scale", "fingerprint", "fingerprint_overrides", "hparams"):
        assert record[key] == trained[key], key
    assert record["trained_run_id"] == trained["run_id"] and record["checkpoint"].endswith(".ckpt")
    assert record["eval_data"]["same_data"] and record["steps"] == trained["steps"] > 0
    assert record["trained_run_state"] == "finished" and record["checkpoints_averaged"] == 0
    assert (out / "outputs" / "evals").is_dir() and list((out / "outputs" / "evals").rglob("eval.log"))
    with gzip.open(record["predictions"], "rt") as f:
        predictions = [json.loads(line) for line in f]
    with gzip.open(trained["predictions"], "rt") as f:
        assert predictions == [json.loads(line) for line in f]  # the same prediction for every test example
    # tables: one sample per trained model; without its training record the evaluation stands in for it
    spec = tables.load_table_spec(ROOT / "configs" / "tables" / "table_3.yaml")
    both = tables.build_table(spec, [trained, record])
    cells = [c for row in both.cells for c in row if c.status == "ok"]
    assert cells and all(c.n == 1 and c.run_ids == [trained["run_id"]] for c in cells)
    assert "a re-evaluation of " + trained["run_id"] in table_render.render_markdown(both)
    alone = tables.build_table(spec, [record])
    assert [c.run_ids for row in alone.cells for c in row if c.status == "ok"] == [[record["run_id"]]] * len(cells)


def test_eval_of_a_fixture_checkpoint_keeps_its_record_out_of_the_tracked_results(snli_model, tmp_path):
    """Like its training run (scale=fixture): the record goes to outputs/fixture_results/, not results/."""
    _, _, ckpt = snli_model
    assert eval_main([f"ckpt_path={ckpt}", f"paths.root_dir={tmp_path}", "logger=none"]) == 0
    assert not (tmp_path / "results").exists()
    (record,) = results.load_records(tmp_path / "outputs" / "fixture_results" / "runs", strict=True)
    assert record["mode"] == "eval" and record["scale"].startswith("fixture")


def test_eval_of_one_split_on_another_folder_is_listed_apart(snli_model, tmp_path):
    """The folder holds the test file alone: the checkpoint's tokenizers read it, no training file is needed."""
    _, trained, ckpt = snli_model
    copy = tmp_path / "snli_copy"
    copy.mkdir()
    shutil.copy(FIXTURES / "snli" / "snli_1.0_test.jsonl", copy)
    out = tmp_path / "eval"
    assert eval_main([f"ckpt_path={ckpt}", "split=test", f"data.dir={copy}", *_paths(out)]) == 0
    (record,) = _records(out, "eval")
    assert set(record["metrics"]) == {"test/acc", "test/loss"}  # the test split only
    assert record["metrics"]["test/acc"] == pytest.approx(trained["metrics"]["test/acc"])
    assert record["fingerprint"] == trained["fingerprint"]  # data.dir is a location
    assert record["eval_data"] == {"dir": str(copy), "trained_dir": str(FIXTURES / "snli"), "same_data": False}
    spec = tables.load_table_spec(ROOT / "configs" / "tables" / "table_3.yaml")
    table = tables.build_table(spec, [record])
    assert not [c for row in table.cells for c in row if c.status == "ok"]
    assert "on other data" in table_render.render_markdown(table)


def test_eval_of_a_run_that_has_not_finished_is_listed_apart(snli_model, tmp_path, caplog):
    """A stopped run's checkpoint (its run folder holds no finished record) used to fill a table cell as a run
    trained to its end."""
    folder, _, ckpt = snli_model
    run_dir = folder / "run"
    copy = tmp_path / "stopped"
    shutil.copytree(run_dir, copy)  # the same folder, without its record: a run stopped before its end
    out = tmp_path / "eval"
    ckpt_copy = copy / Path(ckpt).relative_to(run_dir)
    assert eval_main([f"ckpt_path={ckpt_copy}", *_paths(out)]) == 0
    (record,) = _records(out, "eval")
    assert record["trained_run_state"] == "not finished" and "no finished record" in caplog.text
    # the checkpoint's vectors are the trained ones: no "randomly initialised" warning, as its training gave
    said = "no pretrained embeddings (data.embeddings.path is null)"
    assert said not in caplog.text and not [w for w in record["warnings"] if said in w]
    assert [w for w in snli_model[1]["warnings"] if said in w]
    spec = tables.load_table_spec(ROOT / "configs" / "tables" / "table_3.yaml")
    table = tables.build_table(spec, [record])
    assert not [c for row in table.cells for c in row if c.status == "ok"]
    assert "whose training had not finished" in table_render.render_markdown(table)


def test_eval_needs_no_run_folder_and_the_checkpoint_alone_is_enough(snli_model, tmp_path):
    _, trained, ckpt = snli_model
    alone = tmp_path / "alone.ckpt"
    shutil.copy(ckpt, alone)
    out = tmp_path / "eval"
    assert eval_main([f"ckpt_path={alone}", "split=validation", *_paths(out)]) == 0
    (record,) = _records(out, "eval")
    assert record["metrics"]["val/acc"] == pytest.approx(trained["metrics"]["val/acc"])
    assert "predictions" not in record  # no test split, no test predictions


def test_eval_says_it_runs_on_one_device_when_told_more(snli_model, tmp_path, caplog):
    """Evaluation is one process on one device: trainer=ddp and trainer.devices=2 are said to be unused, not
    dropped in silence."""
    _, trained, ckpt = snli_model
    out = tmp_path / "eval"
    args = [f"ckpt_path={ckpt}", "split=validation", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"]
    assert eval_main([*args, *_paths(out)]) == 0
    assert "evaluation runs on one device: the trainer's devices=2, num_nodes=1 and strategy=ddp" in caplog.text
    (record,) = _records(out, "eval")
    assert record["metrics"]["val/acc"] == pytest.approx(trained["metrics"]["val/acc"])


@pytest.mark.parametrize("args,message", [
    (["ckpt_path=/nonexistent/x.ckpt"], "no such checkpoint file"),
    ([], "ckpt_path=... is required"),
    (["split=dev"], "split=dev: expected one of all, test, validation"),
    # its hint named task.module.decoding.beam_size, a key a pair classifier's checkpoint does not have
    (["task=wikiqa"], ("the checkpoint's task is the trained run's; change a key of its configuration instead "
                       "(data.dir=..., data.eval_batch_size=...)")),
    (["model/attention=coda"], "the checkpoint's model is the trained run's"),
    (["data.no_such_key=1"], "has no key 'data.no_such_key'"),
    (["logger=nope"], "logger"),
    (["data.dir=/nonexistent/snli"], "/nonexistent/snli"),
    (["trainer.precision=bf17-mixed"], "Lightning refuses these settings: Precision 'bf17-mixed' is invalid"),
    (["optimizer.lr=0.1"], "optimizer.lr=0.1: eval trains nothing, and this key only steers training"),
    (["data.eval_batch_size=0"], "data.eval_batch_size = 0: expected an int >= 1"),
    (["ckpt_path=/"], "/: a folder, not a checkpoint file"),
    (["task.epochs=3"], "task.epochs=3: eval trains nothing"),
])
def test_eval_mistakes_are_one_message_and_exit_2(snli_model, tmp_path, capsys, args, message):
    _, _, ckpt = snli_model
    given = list(args)
    if not any(a.startswith("ckpt_path=") for a in given) and message != "ckpt_path=... is required":
        given.insert(0, f"ckpt_path={ckpt}")
    assert eval_main([*_paths(tmp_path), *given]) == USER_ERROR_EXIT
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err, err
    assert not list(tmp_path.rglob("*.json"))  # no record


def test_eval_and_predict_print_their_usage_for_help(capsys):
    assert main(["eval", "--help"]) == 0
    usage = capsys.readouterr().out
    assert usage.startswith("usage: coda-exp eval ckpt_path=FILE")
    assert "best.ckpt" not in usage and "epochNNN-stepN.ckpt" in usage  # what runs write (configs/callbacks)
    assert main(["predict", "-h"]) == 0 and "input=FILE.jsonl|.tsv" in capsys.readouterr().out


def test_predict_refuses_to_write_over_its_input(tmp_path, capsys):
    inputs = _write(tmp_path / "in.jsonl", [{"premise": "a", "hypothesis": "b"}])
    before = inputs.read_bytes()
    assert predict_main([f"ckpt_path={tmp_path / 'none.ckpt'}", f"input={inputs}", f"output={inputs}"]) == 2
    assert "is the input file" in capsys.readouterr().err and inputs.read_bytes() == before
    assert predict_main([f"ckpt_path={tmp_path / 'none.ckpt'}", f"input={inputs}", f"output={tmp_path}"]) == 2
    assert f"output={tmp_path} is a folder: name the predictions file" in capsys.readouterr().err


def test_predict_keeps_another_inputs_predictions_at_the_default_output(tmp_path, capsys):
    plain = _write(tmp_path / "q.jsonl", [{"text_a": "a", "text_b": "b"}])
    packed = tmp_path / "q.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    theirs = _write(tmp_path / "q.predictions.jsonl", [{"line": f"{plain}:1", "label": "neutral"}])
    before = theirs.read_bytes()
    assert predict_main([f"ckpt_path={tmp_path / 'none.ckpt'}", f"input={packed}"]) == USER_ERROR_EXIT
    err = capsys.readouterr().err
    assert f"the default output {theirs} holds the predictions of {plain}" in err
    assert f"output={tmp_path / 'q.jsonl.gz.predictions.jsonl'}" in err and theirs.read_bytes() == before
    # the same input again overwrites its own predictions (here: up to the missing checkpoint)
    assert predict_main([f"ckpt_path={tmp_path / 'none.ckpt'}", f"input={plain}"]) == USER_ERROR_EXIT
    assert "holds the predictions" not in capsys.readouterr().err


def test_a_corrupt_checkpoint_is_named(tmp_path, capsys):
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"not a checkpoint")
    assert main(["eval", f"ckpt_path={bad}"]) == USER_ERROR_EXIT
    assert f"{bad}: cannot be read" in capsys.readouterr().err


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _predict(ckpt, inputs, tmp_path, *extra):
    out = tmp_path / "out.jsonl"
    assert predict_main([f"ckpt_path={ckpt}", f"input={inputs}", f"output={out}", *extra]) == 0
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def test_predict_pair_classification_from_jsonl_and_tsv(snli_model, tmp_path, capsys, caplog):
    _, _, ckpt = snli_model
    rows = [{"id": "p1", "text_a": "A man is playing a guitar.", "text_b": "A man plays music."},
            {"id": 7, "text_a": "A dog runs.", "text_b": "A cat sleeps.", "ignored": True}]
    capsys.readouterr()
    got = _predict(ckpt, _write(tmp_path / "in.jsonl", rows), tmp_path)
    said = capsys.readouterr().out + capsys.readouterr().err + caplog.text
    assert said.count("predictions") == 1 and f"wrote 2 predictions to {tmp_path / 'out.jsonl'}" in said  # once
    labels = ["entailment", "neutral", "contradiction"]
    assert [g["id"] for g in got] == ["p1", 7] and [g["line"] for g in got] == [f"{tmp_path}/in.jsonl:1",
                                                                              f"{tmp_path}/in.jsonl:2"]
    for g in got:
        assert set(g["probabilities"]) == set(labels) and g["label"] == max(g["probabilities"],
                                                                            key=g["probabilities"].get)
        assert sum(g["probabilities"].values()) == pytest.approx(1.0)
    tsv = tmp_path / "in.tsv"
    tsv.write_text("text_a\ttext_b\n" + "".join(f"{r['text_a']}\t{r['text_b']}\n" for r in rows), encoding="utf-8")
    assert [g["probabilities"] for g in _predict(ckpt, tsv, tmp_path)] == [g["probabilities"] for g in got]
    assert "does not know" not in caplog.text
    odd = [rows[0], {"text_a": "zzzz qqq", "text_b": "xxyy wwvv"}]  # no word the model knows: a warning, predicted
    assert len(_predict(ckpt, _write(tmp_path / "odd.jsonl", odd), tmp_path)) == 2
    assert (f"1 of 2 inputs are mostly tokens the model does not know (1 entirely; the first: "
            f"{tmp_path / 'odd.jsonl'}:2)") in caplog.text


def test_predict_agrees_with_the_test_predictions(snli_model, tmp_path):
    """The test file's own pairs, predicted from a file, get the labels the training run's test gave them."""
    _, trained, ckpt = snli_model
    from coda_exp.data.pair.readers import get_pair_reader

    examples = list(get_pair_reader("snli").read("test", str(FIXTURES / "snli")))
    got = _predict(ckpt, _write(tmp_path / "test.jsonl", [{"text_a": e["text_a"], "text_b": e["text_b"]}
                                                         for e in examples]), tmp_path)
    with gzip.open(trained["predictions"], "rt") as f:
        tested = {r["index"]: r["prediction"] for r in map(json.loads, f)}
    labels = ["entailment", "neutral", "contradiction"]
    assert [g["label"] for g in got] == [labels[tested[i]] for i in range(len(examples))]


@pytest.mark.parametrize("rows,message", [
    ([{"text_a": "x"}], "in.jsonl:1: missing field(s) text_b"),
    ([{"text_a": "x", "text_b": "y"}, {"text_a": "x", "text_b": 3}], "in.jsonl:2: field 'text_b' must be a string"),
])
def test_predict_bad_input_names_file_and_line(snli_model, tmp_path, capsys, rows, message):
    _, _, ckpt = snli_model
    inputs = _write(tmp_path / "in.jsonl", rows)
    assert predict_main([f"ckpt_path={ckpt}", f"input={inputs}"]) == USER_ERROR_EXIT
    assert message in capsys.readouterr().err
    assert not (tmp_path / "in.predictions.jsonl").exists()


def test_predict_malformed_json_and_missing_input(snli_model, tmp_path, capsys):
    _, _, ckpt = snli_model
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text_a": "x", "text_b": "y"}\n{oops\n', encoding="utf-8")
    assert predict_main([f"ckpt_path={ckpt}", f"input={bad}"]) == USER_ERROR_EXIT
    assert f"{bad}:2: malformed JSON line" in capsys.readouterr().err
    csv_file = tmp_path / "in.csv"
    csv_file.write_text("text_a,text_b\nA man.,A person.\n", encoding="utf-8")
    assert predict_main([f"ckpt_path={ckpt}", f"input={csv_file}"]) == USER_ERROR_EXIT
    err = capsys.readouterr().err
    assert f"{csv_file}: a comma-separated .csv file; coda-exp predict reads JSON lines" in err and "Traceback" not in err
    assert predict_main([f"ckpt_path={ckpt}"]) == USER_ERROR_EXIT
    assert "input=FILE is required" in capsys.readouterr().err


@pytest.mark.parametrize("task,model,rows,check", [
    ("wikiqa", "decompatt", [{"text_a": "how are glacier caves formed ?", "text_b": "A partly submerged glacier cave",
                              "group": "q1"},
                             {"text_a": "how are glacier caves formed ?", "text_b": "The ice facade", "group": "q1"},
                             {"text_a": "who wrote it ?", "text_b": "nobody", "group": "q2"}],
     lambda got: sorted(g["rank"] for g in got[:2]) == [1, 2] and got[2]["rank"] == 1
     and all(isinstance(g["score"], float) for g in got)),
    ("sst", "transformer_classifier", [{"text": "a gorgeous , witty film"}, {"text": "dull and tedious"}],
     lambda got: all(g["label"] in g["probabilities"] for g in got)),
    ("mlu", "transformer", [{"src": "x=3;y=x+2;y"}, {"src": "a=1;a"}],
     lambda got: all(isinstance(g["hypothesis"], str) for g in got)),
    ("quasart", "decaprop", [{"question": "what color is the sky ?", "passages": ["the sky is blue today .",
                                                                                  "grass is green ."]},
                             {"question": "who", "passages": "one passage as a string"}],
     lambda got: all(g["answer"] and 0 <= g["start"] <= g["end"] for g in got)),
    ("fever", "attconv_light", [{"claim": "Paris is in France.", "evidence": ["Paris is the capital of France.",
                                                                               "France is in Europe."]},
                                {"claim": "The moon is cheese.", "evidence": "The Moon is rock."}],
     lambda got: all(set(g["probabilities"]) == {"SUPPORTS", "REFUTES", "NOT ENOUGH INFO"} for g in got)),
])
def test_predict_each_family_from_a_fixture_model(tmp_path, compose, task, model, rows, check):
    _, ckpt = _train(compose, tmp_path, f"task={task}", f"model={model}", "task.epochs=1",
                          "save_predictions=false")
    got = _predict(ckpt, _write(tmp_path / "in.jsonl", rows), tmp_path)
    assert len(got) == len(rows) and check(got), got


def test_eval_and_predict_of_a_translation_model_with_its_one_vocabulary(tmp_path, compose):
    """IWSLT's joint BPE vocabulary rides in the checkpoint as one tokenizer for both sides (and the model has one
    embedding for both): the evaluation scores tst2013 again with it (t2t-bleu, the paper's metric, beside bleu_tok
    and sacreBLEU) and predict translates new English."""
    trained, ckpt = _train(compose, tmp_path / "train", "task=iwslt15_envi", "model=coda_transformer",
                           "task.max_steps=4", "task.val_check_interval=2", "save_predictions=false")
    assert trained["data"]["shared_vocab"]
    out = tmp_path / "eval"
    assert eval_main([f"ckpt_path={ckpt}", "split=test", *_paths(out)]) == 0
    (record,) = _records(out, "eval")
    assert record["data"]["shared_vocab"]  # the restored tokenizers: one object again
    for name in ("test/bleu_t2t", "test/bleu_tok", "test/bleu"):
        assert record["metrics"][name] == pytest.approx(trained["metrics"][name], abs=1e-6), name
    rows = [{"src": "we like a new song , it &apos;s true ."}, {"src": "i see a zebra ."}]
    got = _predict(ckpt, _write(tmp_path / "in.jsonl", rows), tmp_path)
    assert len(got) == 2 and all(isinstance(g["hypothesis"], str) for g in got)


def test_an_older_checkpoint_rebuilds_its_tokenizers_from_its_data(snli_model, tmp_path, capsys, caplog):
    """A checkpoint written before tokenizers and the run's identity rode along: evaluated and predicted from
    tokenizers rebuilt from its training files; its record is listed apart (whose run it is, is unknown)."""
    import torch

    from coda_exp.tasks.base import CHECKPOINT_DATA, CHECKPOINT_RUN

    _, trained, ckpt = snli_model
    state = torch.load(ckpt, weights_only=False)
    del state[CHECKPOINT_DATA], state[CHECKPOINT_RUN]
    old = tmp_path / "old.ckpt"
    torch.save(state, old)
    out = tmp_path / "eval"
    assert eval_main([f"ckpt_path={old}", "split=test", *_paths(out)]) == 0
    (record,) = _records(out, "eval")
    assert record["metrics"]["test/acc"] == pytest.approx(trained["metrics"]["test/acc"])
    assert record["trained_run_id"] is None
    spec = tables.load_table_spec(ROOT / "configs" / "tables" / "table_3.yaml")
    assert "a checkpoint of an unknown run" in table_render.render_markdown(tables.build_table(spec, [record]))
    got = _predict(old, _write(tmp_path / "in.jsonl", [{"text_a": "A man.", "text_b": "A person."}]), tmp_path)
    assert got[0]["label"] in ("entailment", "neutral", "contradiction")
    assert "no pretrained embeddings" not in caplog.text  # rebuilt tokenizers, the checkpoint's vectors all the same
    test_only = tmp_path / "test_only"  # its tokenizers need the training file: said so
    test_only.mkdir()
    shutil.copy(FIXTURES / "snli" / "snli_1.0_test.jsonl", test_only)
    capsys.readouterr()
    assert eval_main([f"ckpt_path={old}", "split=test", f"data.dir={test_only}", *_paths(out)]) == USER_ERROR_EXIT
    err = capsys.readouterr().err
    assert "carries no tokenizers" in err and "lacks snli_1.0_train.jsonl" in err and "Traceback" not in err


def test_a_float16_checkpoint_evaluated_without_a_gpu_runs_in_float32_and_says_so(snli_model, tmp_path, caplog, capsys,
                                                                                  monkeypatch):
    """A checkpoint trained with trainer.precision=16-mixed (on a GPU) used to be evaluated on the CPU in bf16-mixed,
    Lightning's substitute, said nowhere (its warning is quiet here). It runs in 32-true, closer to float16, said in
    one line that the record keeps; trainer.precision=16-mixed given on such a machine is refused, as training
    refuses it."""
    import torch

    from coda_exp.tasks.base import CHECKPOINT_CONFIG

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    _, trained, ckpt = snli_model
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    state[CHECKPOINT_CONFIG]["trainer"]["precision"] = "16-mixed"
    fp16 = tmp_path / "fp16.ckpt"
    torch.save(state, fp16)
    out = tmp_path / "eval"
    assert eval_main([f"ckpt_path={fp16}", "split=validation", *_paths(out)]) == 0
    said = ("the checkpoint trained with trainer.precision=16-mixed, which needs a GPU, and this machine has no CUDA "
            "GPU: evaluating in 32-true (float32 holds every float16 value; Lightning would substitute bf16-mixed, "
            "which rounds more); trainer.precision=bf16-mixed evaluates in that")
    assert caplog.text.count(said) == 1
    (record,) = _records(out, "eval")
    assert said in record["warnings"]
    assert record["metrics"]["val/acc"] == pytest.approx(trained["metrics"]["val/acc"])  # float32, as trained here
    capsys.readouterr()
    assert eval_main([f"ckpt_path={fp16}", "trainer.precision=16-mixed", *_paths(tmp_path / "e2")]) == USER_ERROR_EXIT
    assert capsys.readouterr().err.startswith("error: coda-exp eval: trainer.precision=16-mixed: float16 mixed "
                                              "precision needs a GPU, and this machine has no CUDA GPU (Lightning "
                                              "would run bf16-mixed instead, while the record would say 16-mixed): "
                                              "use trainer.precision=32-true or bf16-mixed\n")  # training's words


def test_mlu_files_of_another_size_are_named_in_the_scale_of_the_run_and_of_its_evaluation(tmp_path, compose):
    """MLU files of 40 training pairs trained as if they were the configured 10.9M (the generated run's scale
    label): tables pooled the two. The run's and its evaluation's labels now say what was read."""
    from coda_exp.data.seq2seq.mlu import write_mlu_files

    data = tmp_path / "mlu"
    write_mlu_files(data, num_train=40, num_test=6, num_dev=5)
    record, ckpt = _train(compose, tmp_path / "train", "task=mlu", "model=transformer", f"data.dir={data}",
                          "data.num_validation=5", "data.num_test=6", "task.max_steps=2", "task.val_check_interval=2",
                          "save_predictions=false")
    assert record["scale"] == ("fixture (data.num_validation=5, data.num_test=6, task.max_steps=2, "
                               "task.val_check_interval=2, data.num_train=40)")
    assert any("holds 40 examples, fewer than the configured 10909091" in w for w in record["warnings"])
    short = tmp_path / "short"
    write_mlu_files(short, num_train=1, num_test=3, num_dev=5)
    out = tmp_path / "eval"
    assert eval_main([f"ckpt_path={ckpt}", "split=test", f"data.dir={short}", *_paths(out)]) == 0
    (evaluation,) = _records(out, "eval")
    assert evaluation["scale"] == ("fixture (data.num_validation=5, task.max_steps=2, task.val_check_interval=2, "
                                   "data.num_train=40, data.num_test=3)")  # its own test file's size
