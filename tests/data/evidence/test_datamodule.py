"""FEVER: claim reader errors, the Wikipedia store, retrieval on the fixture dump, the evidence data module."""

from __future__ import annotations

import json
import random
import shutil

import pytest
import torch

from coda_exp.data.common.errors import DataError
from coda_exp.data.evidence import (
    EvidenceDataModule,
    RetrievalOptions,
    TfidfRanker,
    get_claim_reader,
    open_store,
)
from coda_exp.data.evidence.retrieval import retrieved_evidence, select_sentences
from coda_exp.data.evidence.wiki import parse_lines
from tests import FIXTURES

SRC = FIXTURES / "fever"
OPTS = RetrievalOptions(hash_bits=16)


@pytest.fixture
def data(tmp_path):
    """A writable copy of the fixture folder."""
    shutil.copytree(SRC, tmp_path / "fever")
    return tmp_path / "fever"


def module(directory, cache, **kw) -> EvidenceDataModule:
    return EvidenceDataModule(dir=str(directory), cache_dir=str(cache), retrieval={"hash_bits": 16},
                              progress=False, **kw)


def set_line(path, lineno: int, text: str) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[lineno - 1] = text
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_reader_reads_the_three_splits_with_labels_and_evidence():
    reader = get_claim_reader("fever")
    rows = {s: list(reader.read(s, SRC)) for s in ("train", "validation", "test")}
    assert [len(r) for r in rows.values()] == [36, 12, 12]
    assert {r["label"] for r in rows["train"]} == {0, 1, 2}
    nei = next(r for r in rows["train"] if r["label"] == 2)
    assert nei["evidence"][0][0][2:] == [None, None]
    assert rows["train"][0]["where"].endswith("train.jsonl:1")


@pytest.mark.parametrize("line, message", [
    ('{"id": 1, "label": "SUPPORTS", "claim": "x", "evidence": [[[1, 2, "Oak", 0]]', "malformed JSON line"),
    ('{"id": 1, "label": "MAYBE", "claim": "x", "evidence": [[[1, 2, "Oak", 0]]]}', "unknown label 'MAYBE'"),
    ('{"id": "1", "label": "SUPPORTS", "claim": "x", "evidence": [[[1, 2, "Oak", 0]]]}', "non-integer field 'id'"),
    ('{"id": 1, "label": "SUPPORTS", "claim": "", "evidence": [[[1, 2, "Oak", 0]]]}', "empty field 'claim'"),
    ('{"id": 1, "label": "SUPPORTS", "claim": "x", "evidence": [[[1, 2, null, null]]]}', "needs a page name"),
    ('{"id": 1, "label": "REFUTES", "claim": "x", "evidence": [[[1, 2, "Oak"]]]}', r"is not \[annotation_id"),
    ('{"id": 1, "label": "REFUTES", "claim": "x", "evidence": []}', "must be a list of evidence sets"),
])
def test_reader_errors_name_file_and_line(data, line, message):
    set_line(data / "paper_dev.jsonl", 3, line)
    with pytest.raises(DataError, match=message) as err:
        list(get_claim_reader("fever").read("validation", data))
    assert "paper_dev.jsonl:3" in str(err.value)


def test_a_repeated_claim_id_is_refused_naming_both_lines(data):
    """Retrieved evidence and predictions are keyed by claim id: a repeat would score one claim with the other's
    evidence (issue 20)."""
    first = json.loads((data / "paper_test.jsonl").read_text(encoding="utf-8").splitlines()[0])
    row = json.loads((data / "paper_test.jsonl").read_text(encoding="utf-8").splitlines()[5])
    set_line(data / "paper_test.jsonl", 6, json.dumps({**row, "id": first["id"]}))
    with pytest.raises(DataError, match=f"claim id {first['id']} repeats") as err:
        list(get_claim_reader("fever").read("test", data))
    assert "paper_test.jsonl:6" in str(err.value) and "paper_test.jsonl:1" in str(err.value)


def test_missing_empty_and_non_utf8_claim_files(data):
    reader = get_claim_reader("fever")
    (data / "paper_test.jsonl").write_bytes(b"")
    with pytest.raises(DataError, match="paper_test.jsonl: empty file"):
        list(reader.read("test", data))
    (data / "paper_test.jsonl").write_bytes(b'{"id": 1, "claim": "caf\xe9"}\n')
    with pytest.raises(DataError, match=r"paper_test.jsonl:1: byte .* is not UTF-8"):
        list(reader.read("test", data))
    (data / "train.jsonl").unlink()
    with pytest.raises(DataError, match="lacks train.jsonl"):
        list(reader.read("train", data))
    with pytest.raises(DataError, match="no Hugging Face hub copy"):
        list(reader.read("train", None))


def test_store_looks_pages_up_by_normalised_id(tmp_path):
    store = open_store(SRC, tmp_path)
    assert len(store) == 12  # the empty-id page of wiki-001 is skipped
    assert store.sentence("Oak", 0) == "Oak is a tree ."
    assert store.sentence("Zu\u0308rich", 0) == store.sentence("Z\u00fcrich", 0) == "Zürich is a city in switzerland ."
    assert store.sentence("Oak", 99) is None and store.lines("Nowhere") is None
    assert open_store(SRC, tmp_path).path == store.path  # built once, then reused
    pairs = store.random_sentences(random.Random(0), 3)
    assert len(pairs) == 3 and all(store.sentence(p, n) for p, n in pairs)


def test_wiki_dump_errors(data, tmp_path):
    assert parse_lines("0\tA .\tlink\n\n2\tC .", "w") == ["A .", "", "C ."]
    with pytest.raises(DataError, match="w: malformed 'lines' entry"):
        parse_lines("zero\tA .", "w")
    for number in ("²", "١"):  # digits to str.isdigit(), not sentence numbers
        with pytest.raises(DataError, match=f"w: malformed 'lines' entry '{number}"):
            parse_lines(f"{number}\tA .", "w")
    set_line(data / "wiki-pages" / "wiki-002.jsonl", 2, '{"id": "Copper", "text": "x"}')
    with pytest.raises(DataError, match=r"wiki-002.jsonl:2: missing or non-string field 'lines'"):
        open_store(data, tmp_path / "c1")
    shutil.rmtree(data / "wiki-pages")
    with pytest.raises(DataError, match="no Wikipedia dump"):
        open_store(data, tmp_path / "c2")


def test_evidence_naming_a_page_or_sentence_not_in_the_dump(data, tmp_path):
    row = json.loads((data / "train.jsonl").read_text().splitlines()[0])
    row["evidence"] = [[[1, 2, "Atlantis", 0]]]
    set_line(data / "train.jsonl", 1, json.dumps(row))
    with pytest.raises(DataError, match=r"train.jsonl:1: evidence names page 'Atlantis'"):
        module(data, tmp_path / "c").setup()
    row["evidence"] = [[[1, 2, "Oak", 40]]]
    set_line(data / "train.jsonl", 1, json.dumps(row))
    with pytest.raises(DataError, match=r"train.jsonl:1: evidence names sentence 40 of page 'Oak'"):
        module(data, tmp_path / "c").setup()


def test_retrieval_finds_the_cited_page_and_sentence(tmp_path):
    store = open_store(SRC, tmp_path)
    ranker = TfidfRanker.build(store, OPTS, progress=False)
    assert ranker.closest(["Is the violin a string instrument ?"], 5)[0][0] == "Violin"
    assert ranker.closest(["zzz qqq"], 5) == [[]]  # no shared n-gram: no page
    claims = [c for c in get_claim_reader("fever").read("test", SRC) if c["label"] != 2]
    predicted, path = retrieved_evidence(store, OPTS, "test", claims, "k", progress=False)
    for c in claims:
        gold = c["evidence"][0][0]
        assert (gold[2], gold[3]) in predicted[c["id"]] and len(predicted[c["id"]]) == 5
    assert path.is_file() and retrieved_evidence(store, OPTS, "test", [], "k", progress=False)[0] == predicted
    cands = [("P", 0, "the cat sat"), ("P", 1, "a dog ran"), ("Q", 0, "cats and dogs")]
    assert select_sentences("dog ran", cands, 2, OPTS.vectorizer())[0] == ["P", 1]


@pytest.mark.parametrize("keep", [0, 100, 3000])
def test_a_wikipedia_store_cut_short_is_one_message_naming_it(tmp_path, keep):
    store = open_store(SRC, tmp_path)
    path = store.path
    store.con.close()
    path.write_bytes(path.read_bytes()[:keep])
    with pytest.raises(DataError, match=rf"{path}: not a readable Wikipedia store .*delete it and run again"):
        open_store(SRC, tmp_path)


def test_a_page_index_cut_short_is_one_message_naming_it(tmp_path):
    """The TF-IDF index cached beside the dump (hours to build on the full Wikipedia), truncated by a full disk, was
    a zipfile traceback; it is a DataError naming the file to delete."""
    from coda_exp.data.evidence.retrieval import open_ranker

    store = open_store(SRC, tmp_path)
    open_ranker(store, OPTS, progress=False)
    (index,) = store.path.parent.glob("tfidf-*.npz")
    index.write_bytes(index.read_bytes()[:200])
    with pytest.raises(DataError, match=rf"{index}: not a readable page index .*delete it and run again"):
        open_ranker(store, OPTS, progress=False)


def test_a_cached_retrieval_file_cut_short_is_named_as_a_cache_to_delete(tmp_path):
    """A cached retrieval file missing lines was a KeyError (claim id) traceback in fever-retrieve and training; one
    cut mid-line read like a data file's error. Both name the cache file to delete (it is retrieved again)."""
    store = open_store(SRC, tmp_path)
    claims = list(get_claim_reader("fever").read("test", SRC))
    _, path = retrieved_evidence(store, OPTS, "test", claims, "k", progress=False)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(lines[:1]), encoding="utf-8")
    with pytest.raises(DataError, match=rf"{path}: the cached retrieved evidence of test lacks {len(claims) - 1} of "
                                        rf"its {len(claims)} claims .*delete it and run again, it is retrieved again"):
        retrieved_evidence(store, OPTS, "test", claims, "k", progress=False)
    path.write_text(lines[0] + lines[1][:10], encoding="utf-8")
    with pytest.raises(DataError, match=rf"{path}:2: malformed JSON line .*a cached retrieval file of test, not a "
                                        "data file: delete it and run again"):
        retrieved_evidence(store, OPTS, "test", claims, "k", progress=False)
    path.unlink()
    assert len(retrieved_evidence(store, OPTS, "test", claims, "k", progress=False)[0]) == len(claims)


def test_data_module_batches_retrieved_and_gold_evidence(tmp_path):
    dm = module(SRC, tmp_path)
    dm.setup()
    batch = dm.collate(dm.splits["train"][:6])
    b, k, _ = batch["evidence_ids"].shape
    assert (b, k) == (6, 5) and batch["claim_ids"].shape[0] == 6 and batch["label"].tolist() == [0, 1, 2, 0, 1, 2]
    assert batch["evidence_mask"].dtype == batch["claim_mask"].dtype == torch.bool
    assert (batch["evidence_ids"][~batch["evidence_mask"]] == 0).all() and batch["evidence_mask"].any(-1).all()
    assert dm.stats["evidence"] == "retrieved" and dm.model_kwargs()["pad_id"] == 0
    rows = dm.task_kwargs()["claims"]("test")
    assert len(rows) == 12 and all(len(r["predicted_evidence"]) == 5 for r in rows)
    gold = module(SRC, tmp_path, evidence="gold")
    gold.setup()
    rows = gold.claim_rows("train")
    assert rows[0]["predicted_evidence"] == [[rows[0]["evidence"][0][0][2], 0]]  # the smallest gold set
    assert rows[0]["num_gold_evidence"] == 1 and rows[2]["num_gold_evidence"] is None
    nei = gold.collate([gold.splits["train"][2]])
    assert nei["evidence_mask"].shape[1] == 1 and nei["evidence_mask"].any()  # the nearest retrieved sentence


def test_gold_mode_random_nei_is_fixed_and_caps_apply(tmp_path):
    a = module(SRC, tmp_path, evidence="gold", nei_evidence="random", nei_sentences=2, max_train_examples=10)
    b = module(SRC, tmp_path, evidence="gold", nei_evidence="random", nei_sentences=2, max_train_examples=10,
               seed=5)
    a.setup()
    b.setup()
    assert len(a.splits["train"]) == 10 and a.claim_rows("train") == b.claim_rows("train")
    nei = [r for r in a.claim_rows("train") if r["label"] == "NOT ENOUGH INFO"]
    assert nei and all(len(r["predicted_evidence"]) == 2 for r in nei)
    with pytest.raises(DataError, match="data.evidence must be one of"):
        module(SRC, tmp_path, evidence="oracle")
