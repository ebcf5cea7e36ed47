"""MNLI, SciTail, DNLI, TrecQA and UDC: readers on their fixtures (official formats), edge cases, protocols,
R_N@k, and two short runs (MNLI's two test sets, UDC's recalls)."""

import gzip
import json
import logging
import shutil
from collections import Counter

import pytest
import torch

from coda_exp.data import DataError, PairDataModule, get_reader
from coda_exp.metrics import ranking_scores
from tests import FIXTURES


def examples(name, path):
    return list(get_reader(name).read_file(path, "train"))




# ---- MNLI ------------------------------------------------------------------------------------------------


def test_mnli_two_test_sets_and_a_fixed_validation_holdout(tmp_path, dm):
    rows = [json.loads(line) for line in (FIXTURES / "mnli" / "multinli_1.0_train.jsonl").read_text().splitlines()]
    kept = [r for r in rows if r["gold_label"] != "-"]
    assert len(kept) < len(rows)  # pairs without a gold label are dropped, as in SNLI
    m = dm(tmp_path, "mnli", seed=1)
    k = round(0.1 * len(kept))
    assert m.stats["validation_held_out_from_train"] == k == len(m.splits["validation"])
    assert len(m.splits["train"]) == len(kept) - k
    pairs = lambda d: Counter(zip(d["text_a"], d["text_b"]))
    assert pairs(m.splits["validation"]) + pairs(m.splits["train"]) == Counter(
        (r["sentence1"], r["sentence2"]) for r in kept)  # a partition of the training file
    assert m.test_sets == ["test_matched", "test_mismatched"]
    assert m.task_kwargs() == {"num_classes": 3, "test_sets": ["matched", "mismatched"]}
    loaders = m.test_dataloader()
    assert isinstance(loaders, list) and len(loaders) == 2
    dev = (FIXTURES / "mnli" / "multinli_1.0_dev_mismatched.jsonl").read_text().splitlines()
    assert len(m.splits["test_mismatched"]) == 24 - sum(json.loads(line)["gold_label"] == "-" for line in dev)
    # the held-out slice depends on holdout_seed, not on the run's seed: every run validates on the same pairs
    other = dm(tmp_path / "b", "mnli", seed=2)
    assert other.splits["validation"]["text_a"] == m.splits["validation"]["text_a"]
    third = dm(tmp_path / "c", "mnli", holdout_seed=5)
    assert third.splits["validation"]["text_a"] != m.splits["validation"]["text_a"]


def test_mnli_needs_a_validation_choice(tmp_path):
    with pytest.raises(DataError, match="no validation file.*validation_from_train"):
        PairDataModule("mnli", dir=str(FIXTURES / "mnli"))
    with pytest.raises(DataError, match="fraction"):
        PairDataModule("mnli", dir=str(FIXTURES / "mnli"), validation_from_train=2.0)


def test_hub_schemas_of_mnli_and_scitail(tmp_path, monkeypatch):
    import datasets

    calls = []

    def fake(*args, split):
        calls.append((*args, split))
        if args[0] == "nyu-mll/multi_nli":
            return datasets.Dataset.from_dict({"premise": ["A b .", "C d ."], "hypothesis": ["A .", "C ."],
                                               "label": [2, -1]})
        return datasets.Dataset.from_dict({"premise": ["P ."], "hypothesis": ["H ."], "label": ["neutral"]})

    monkeypatch.setattr(datasets, "load_dataset", fake)
    m = PairDataModule("mnli", dir=None, cache_dir=str(tmp_path / "m"), validation_from_train=0.5)
    assert list(m.reader.read_hub("test_mismatched")) == [
        {"text_a": "A b .", "text_b": "A .", "label": 2, "group": ""}]
    assert calls[-1] == ("nyu-mll/multi_nli", "validation_mismatched")
    assert next(iter(get_reader("scitail").read_hub("validation")))["label"] == 1
    assert calls[-1] == ("allenai/scitail", "tsv_format", "validation")


def test_benchmarks_without_a_hub_say_so(tmp_path):
    for name in ("dnli", "trecqa", "udc"):
        m = PairDataModule(name, dir=None, cache_dir=str(tmp_path / name), ranking=name != "dnli")
        with pytest.raises(DataError, match="no Hugging Face hub copy.*data.dir=DIR"):
            m.setup()


def test_a_folder_named_like_the_hub_dataset_is_never_read_as_the_hub_copy(tmp_path, monkeypatch):
    """data.dir=null run from a folder holding ./snli: the datasets library read that folder as the hub dataset, and
    cached it as the hub's for every later offline run."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "snli").mkdir()
    monkeypatch.setattr("datasets.load_dataset", lambda *a, **k: pytest.fail("the local folder was loaded"))
    with pytest.raises(DataError, match=f"hub dataset 'snli' is read, but {tmp_path / 'snli'} in the current folder "
                                        f"has that name .* pass data.dir={tmp_path / 'snli'}"):
        next(iter(get_reader("snli").read("train")))


# ---- SciTail ---------------------------------------------------------------------------------------------


def test_scitail_both_release_formats_agree(tmp_path, dm):
    tsv = examples("scitail", FIXTURES / "scitail" / "tsv_format" / "scitail_1.0_train.tsv")
    snli = examples("scitail", FIXTURES / "scitail" / "snli_format" / "scitail_1.0_train.txt")
    assert tsv == snli and len(tsv) == 60
    names = get_reader("scitail").label_names
    assert names == ("entails", "neutral") and {names[e["label"]] for e in tsv} == set(names)
    m = dm(tmp_path, "scitail")  # the release folder: tsv_format is used
    assert m.reader.path(FIXTURES / "scitail", "test").parent.name == "tsv_format"
    only_snli = tmp_path / "only_snli"
    shutil.copytree(FIXTURES / "scitail" / "snli_format", only_snli)  # data.dir = a format folder itself
    m2 = dm(tmp_path / "b", "scitail", src=only_snli)
    assert m2.splits["test"]["label"] == m.splits["test"]["label"] and m.num_classes == 2


def test_scitail_errors_name_file_and_line(tmp_path, dm, copy_fixture):
    d = copy_fixture(tmp_path, "scitail")
    p = d / "tsv_format" / "scitail_1.0_dev.tsv"
    lines = p.read_text().splitlines()
    lines[2] = lines[2].rsplit("\t", 1)[0] + "\tcontradiction"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"scitail_1.0_dev.tsv:3: unknown label 'contradiction'.*entails"):
        examples("scitail", p)
    lines[2] = "only one field"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"scitail_1.0_dev.tsv:3: malformed row with 1 tab-separated"):
        examples("scitail", p)
    shutil.copy(FIXTURES / "scitail" / "tsv_format" / "scitail_1.0_dev.tsv", p)
    shutil.rmtree(d / "snli_format")
    (d / "tsv_format" / "scitail_1.0_test.tsv").unlink()
    with pytest.raises(DataError, match="lacks tsv_format/scitail_1.0_test.tsv .*allenai.org"):
        dm(tmp_path, "scitail", src=d)
    assert get_reader("scitail").path(d, "validation") == p  # a split needs its own file only


# ---- DNLI ------------------------------------------------------------------------------------------------


def test_dnli_json_array_and_json_lines(tmp_path, dm):
    path = FIXTURES / "dnli" / "dialogue_nli_dev.jsonl"
    data = json.loads(path.read_text())
    assert isinstance(data, list)  # the release's files hold one JSON array despite the extension
    ex = examples("dnli", path)
    assert len(ex) == len(data) and ex[0]["text_a"] == data[0]["sentence1"]
    names = get_reader("dnli").label_names
    assert [names[e["label"]] for e in ex] == [d["label"] for d in data]
    lines = tmp_path / "dialogue_nli_dev.jsonl"
    lines.write_text("".join(json.dumps(d) + "\n" for d in data))
    assert examples("dnli", lines) == ex
    nested = tmp_path / "release"  # data.dir may be the folder above dialogue_nli/
    shutil.copytree(FIXTURES / "dnli", nested / "dialogue_nli")
    assert len(dm(tmp_path, "dnli", src=nested).splits["test"]) == 24


def test_dnli_edge_cases(tmp_path):
    data = json.loads((FIXTURES / "dnli" / "dialogue_nli_dev.jsonl").read_text())
    bad = tmp_path / "bad.jsonl"
    data[3]["label"] = "contradiction"
    bad.write_text(json.dumps(data))
    with pytest.raises(DataError, match=r"element 3 \(id dialogue_nli_dev_3\): unknown label 'contradiction'"):
        examples("dnli", bad)
    bad.write_text("".join(json.dumps(d) + "\n" for d in data))
    with pytest.raises(DataError, match=r"bad.jsonl:4: unknown label"):
        examples("dnli", bad)
    bad.write_text("")
    with pytest.raises(DataError, match="empty file"):
        examples("dnli", bad)
    bad.write_text(json.dumps(data)[:-40])
    with pytest.raises(DataError, match="bad.jsonl:1: malformed JSON"):
        examples("dnli", bad)


# ---- TrecQA ----------------------------------------------------------------------------------------------


def test_trecqa_xml_and_toks_layouts_agree(tmp_path, dm):
    for split, folder in (("TRAIN-ALL", "train-all"), ("DEV", "raw-dev"), ("TEST", "raw-test")):
        xml = examples("trecqa", FIXTURES / "trecqa" / f"{split}.xml")
        toks = examples("trecqa", FIXTURES / "trecqa" / "toks" / folder)
        assert xml == toks and xml
    assert xml[0]["text_a"].startswith("What is ") and "\t" not in xml[0]["text_b"]
    a, b = dm(tmp_path, "trecqa"), dm(tmp_path / "b", "trecqa", src=FIXTURES / "trecqa" / "toks")
    assert a.splits["test"]["group"] == b.splits["test"]["group"]


def test_trecqa_clean_and_raw_evaluation(tmp_path, dm):
    clean = dm(tmp_path, "trecqa", eval_protocol="clean")
    raw = dm(tmp_path / "raw", "trecqa", eval_protocol="raw")
    answered = dm(tmp_path / "ans", "trecqa", eval_protocol="answered")
    for split in ("validation", "test"):
        groups = {s: len(set(m.splits[split]["group"])) for s, m in
                  (("clean", clean), ("raw", raw), ("answered", answered))}
        # the fixture has one all-positive and one all-negative question per evaluation split
        assert groups == {"raw": groups["raw"], "answered": groups["raw"] - 1, "clean": groups["raw"] - 2}
        assert clean.stats[f"{split}_groups_dropped_all_positive"] == 1
        assert clean.stats[f"{split}_groups_dropped_no_positive"] == 1
        for g in set(clean.splits[split]["group"]):
            labels = {y for gg, y in zip(clean.splits[split]["group"], clean.splits[split]["label"]) if gg == g}
            assert labels == {0, 1}
    assert len(clean.splits["train"]) == len(raw.splits["train"])  # training keeps every candidate
    with pytest.raises(DataError, match="eval_protocol"):
        PairDataModule("trecqa", eval_protocol="dirty")


def test_trecqa_jacana_names_and_train_all_preferred(tmp_path, dm):
    d = tmp_path / "jacana"
    d.mkdir()
    src = FIXTURES / "trecqa"
    shutil.copy(src / "TRAIN-ALL.xml", d / "train2393.cleanup.xml")
    shutil.copy(src / "DEV.xml", d / "dev-less-than-40.manual-edit.xml")
    shutil.copy(src / "TEST.xml", d / "test-less-than-40.manual-edit.xml")
    small = "\n".join((src / "DEV.xml").read_text().splitlines()[:40]) + "\n"  # a different, smaller TRAIN
    (d / "train-less-than-40.manual-edit.xml").write_text(small.rsplit("</QApairs>", 1)[0] + "</QApairs>\n")
    reader = get_reader("trecqa")
    assert reader.path(d, "train").name == "train2393.cleanup.xml"  # TRAIN-ALL wins over TRAIN
    (d / "train2393.cleanup.xml").unlink()
    assert reader.path(d, "train").name == "train-less-than-40.manual-edit.xml"
    assert len(dm(tmp_path, "trecqa", src=d).splits["test"]) == len(dm(tmp_path / "b", "trecqa").splits["test"])
    (d / "dev-less-than-40.manual-edit.xml").unlink()
    assert reader.path(d, "test").name == "test-less-than-40.manual-edit.xml"  # a split needs its own file only
    with pytest.raises(DataError, match="lacks the validation file .*DEV.xml.*raw-dev.*TRAIN-ALL.xml.*a.toks"):
        reader.path(d, "validation")


def test_trecqa_edge_cases(tmp_path, caplog):
    xml = (FIXTURES / "trecqa" / "DEV.xml").read_text()
    p = tmp_path / "DEV.xml"
    no_cands = "<QApairs id='9.9'>\n<question>\nWhy\t?\nWRB\t.\n</question>\n</QApairs>\n"
    p.write_text(no_cands + xml)
    with caplog.at_level(logging.WARNING):
        ex = examples("trecqa", p)
    assert "'9.9' has no candidates; skipped" in caplog.text
    assert ex == examples("trecqa", FIXTURES / "trecqa" / "DEV.xml")
    p.write_text(xml.replace("<negative>", "<maybe>", 1))
    line = xml.splitlines().index("<negative>") + 1
    with pytest.raises(DataError, match=rf"DEV.xml:{line}: unknown element <maybe>"):
        examples("trecqa", p)
    p.write_text(xml.rsplit("</QApairs>", 1)[0])
    with pytest.raises(DataError, match="</QApairs> missing"):
        examples("trecqa", p)
    p.write_text("\n")
    with pytest.raises(DataError, match="DEV.xml: empty file"):
        examples("trecqa", p)
    toks = tmp_path / "raw-dev"
    shutil.copytree(FIXTURES / "trecqa" / "toks" / "raw-dev", toks)
    sim = (toks / "sim.txt").read_text().splitlines()
    (toks / "sim.txt").write_text("\n".join(["2"] + sim[1:]) + "\n")
    with pytest.raises(DataError, match=r"raw-dev/sim.txt:1: unknown label '2'"):
        examples("trecqa", toks)
    (toks / "sim.txt").write_text("\n".join(sim[1:]) + "\n")
    with pytest.raises(DataError, match="one line per candidate"):
        examples("trecqa", toks)


# ---- UDC -------------------------------------------------------------------------------------------------


def test_udc_train_pairs_and_ten_candidate_groups(tmp_path, dm):
    m = dm(tmp_path, "udc")
    train = m.splits["train"]
    assert len(set(train["group"])) == len(train) == 64 and set(train["label"]) == {0, 1}
    test = m.splits["test"]
    assert len(test) == 60 and len(set(test["group"])) == 6
    for g in set(test["group"]):
        labels = [y for gg, y in zip(test["group"], test["label"]) if gg == g]
        assert labels == [1] + [0] * 9  # ground truth first, then the distractors in order
    assert "__eou__" in test["text_a"][0]


def test_udc_edge_cases(tmp_path, copy_fixture):
    d = copy_fixture(tmp_path, "udc")
    p = d / "valid.csv"
    lines = p.read_text().splitlines()
    p.write_text(lines[0].replace("Ground Truth Utterance", "Answer") + "\n" + "\n".join(lines[1:]) + "\n")
    with pytest.raises(DataError, match=r"valid.csv:1: unexpected header"):
        examples("udc", p)
    p.write_text("\n".join(lines[:2] + [lines[2].rsplit(",", 1)[0] + ',""'] + lines[3:]) + "\n")
    with pytest.raises(DataError, match=r"valid.csv:3: empty field in column 'Distractor_8'"):
        examples("udc", p)
    t = d / "train.csv"
    rows = t.read_text().splitlines()
    t.write_text("\n".join(rows[:3] + [rows[3].rsplit(",", 1)[0] + ",yes"]) + "\n")
    with pytest.raises(DataError, match=r"train.csv:4: unknown label 'yes'"):
        examples("udc", t)
    t.write_text("")
    with pytest.raises(DataError, match="train.csv: empty file"):
        examples("udc", t)


def test_udc_a_stray_quote_is_reported_where_its_row_begins(tmp_path, copy_fixture):
    d = copy_fixture(tmp_path, "udc")
    t = d / "train.csv"
    rows = t.read_text().splitlines()
    t.write_text("\n".join(rows[:4] + ['"' + rows[4]] + rows[5:]) + "\n")  # line 5 opens a quote never closed
    with pytest.raises(DataError, match=rf"train.csv:5: malformed row with 1 fields; expected 3 \(Context, Utterance, "
                                        rf"Label\) \(it runs to line {len(rows)}: an unclosed quote on line 5\?\)"):
        examples("udc", t)
    t.write_text("\n".join(rows[:4] + [rows[4] + ",extra"] + rows[5:]) + "\n")  # a one-line row: no span
    with pytest.raises(DataError, match=r"train.csv:5: malformed row with 4 fields; expected 3 \(Context, Utterance, "
                                        r"Label\)$"):
        examples("udc", t)


def test_udc_eval_files_need_ten_candidates_a_row(tmp_path, copy_fixture):
    d = copy_fixture(tmp_path, "udc")
    reader = get_reader("udc")
    for split, name in (("validation", "valid.csv"), ("test", "test.csv")):
        p = d / name
        lines = p.read_text().splitlines()
        p.write_text("\n".join(",".join(line.split(",")[:4]) for line in lines) + "\n")  # 4 columns kept
        with pytest.raises(DataError, match=rf"{name}:1: unexpected header .*{split} split.*Distractor_8"):
            list(reader.read_file(p, split))
        shutil.copy(d / "train.csv", p)  # the training file's format copied over an evaluation file
        with pytest.raises(DataError, match=rf"{name}:1: unexpected header \['Context', 'Utterance', 'Label'\]"):
            list(reader.read_file(p, split))
    # the training file may be in either format
    assert len(list(reader.read_file(FIXTURES / "udc" / "test.csv", "train"))) == 60


def test_recall_at_k_hand_computed_with_pessimistic_ties():
    # group 0: ground truth (first) scored 0.5; distractors 0.9, 0.5 (tie), then seven lower -> pessimistic rank 3
    s0 = [0.5, 0.9, 0.5] + [0.1] * 7
    # group 1: ground truth best -> rank 1; its first distractor is 0.2
    s1 = [0.8, 0.2] + [0.3] * 8
    scores = torch.tensor(s0 + s1)
    labels = torch.tensor(([1] + [0] * 9) * 2)
    groups = torch.tensor([0] * 10 + [1] * 10)
    out = ranking_scores(scores, labels, groups, ["r10@1", "r10@2", "r10@5", "r2@1", "mrr"])
    assert out["r10@1"] == 0.5 and out["r10@2"] == 0.5 and out["r10@5"] == 1.0
    # R2@1: group 0 compares 0.5 with 0.9 (lost), group 1 0.8 with 0.2 (won)
    assert out["r2@1"] == 0.5
    # MRR breaks ties pessimistically too (it kept input order before, rank 2 here: the ground truth is listed
    # first, so input order favoured it): rank 3
    assert out["mrr"] == pytest.approx((1 / 3 + 1) / 2)
    const = ranking_scores(torch.zeros(10), torch.tensor([1] + [0] * 9), torch.zeros(10, dtype=torch.long),
                           ["r10@1", "r10@5"])
    assert const["r10@1"] == 0.0 and const["r10@5"] == 0.0  # a constant scorer gets no credit
    # "first distractor" is the first in input order (``order``), whatever order the batches arrived in
    perm = torch.randperm(20, generator=torch.Generator().manual_seed(0))
    again = ranking_scores(scores[perm], labels[perm], groups[perm], ["r2@1", "r10@1"], order=perm)
    assert again["r2@1"] == 0.5 and again["r10@1"] == 0.5
    with pytest.raises(ValueError, match="fewer than 10"):
        ranking_scores(scores[:5], labels[:5], groups[:5], ["r10@1"])
    with pytest.raises(ValueError, match="unknown ranking metric"):
        ranking_scores(scores, labels, groups, ["r2@3"])


# ---- short runs ------------------------------------------------------------------------------------------


def test_mnli_run_reports_matched_and_mismatched(make_cfg, tmp_path):
    from coda_exp import results
    from coda_exp.pipeline import run

    run(make_cfg("task=mnli", "scale=fixture", "task.epochs=1", "logger=none", "data.validation_from_train=0.2"))
    rec = results.load_records(tmp_path / "results" / "runs", strict=True)[0]
    assert {"val/acc", "test/acc_matched", "test/acc_mismatched"} <= set(rec["metrics"])
    assert "test/acc" not in rec["metrics"]
    with gzip.open(rec["predictions"], "rt") as f:
        preds = [json.loads(line) for line in f]
    sets = [p["test_set"] for p in preds]
    assert sets.count("matched") == rec["data"]["test_matched_examples"]
    assert sets.count("mismatched") == rec["data"]["test_mismatched_examples"]
    acc = sum(p["label"] == p["prediction"] for p in preds if p["test_set"] == "matched") / sets.count("matched")
    assert acc == pytest.approx(rec["metrics"]["test/acc_matched"])


def test_udc_run_reports_recalls(make_cfg, tmp_path):
    from coda_exp import results
    from coda_exp.pipeline import run

    # eval batches of 7 candidates and a validation cut at 2 batches (and Lightning's 2-batch sanity check): batches
    # hold whole groups of 10, so no cut leaves a group of fewer than 10 ("r10@1: group 1 has 4 candidates")
    run(make_cfg("task=udc", "scale=fixture", "task.epochs=1", "logger=none", "data.eval_batch_size=7",
                 "trainer.limit_val_batches=2"))
    rec = results.load_records(tmp_path / "results" / "runs", strict=True)[0]
    assert {f"{s}/{m}" for s in ("val", "test") for m in ("r10@1", "r10@2", "r10@5", "r2@1")} <= set(rec["metrics"])
    with gzip.open(rec["predictions"], "rt") as f:
        preds = [json.loads(line) for line in f]
    out = ranking_scores(torch.tensor([p["score"] for p in preds]), torch.tensor([p["label"] for p in preds]),
                         torch.tensor([p["group"] for p in preds]), ["r10@1"], torch.tensor([p["index"] for p in preds]))
    assert out["r10@1"] == pytest.approx(rec["metrics"]["test/r10@1"])  # recomputable from the predictions
