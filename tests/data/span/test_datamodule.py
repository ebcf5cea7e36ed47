"""The span family's readers (Quasar-T, SearchQA) on their fixtures and on damaged copies, the context pipeline
(gold span, training window, caps, dropped examples) and the batches of SpanDataModule."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest
import torch

from coda_exp.data.common.errors import DataError
from coda_exp.data.span import SpanDataModule, find_span, get_span_reader, tokens_with_space
from coda_exp.data.span.context import cut_training
from tests import FIXTURES

QUASAR_Q = "questions/train_questions.json.gz"
QUASAR_C = "contexts/short/train_contexts.json.gz"


def module(tmp_path, name, src=None, **kw):
    dm = SpanDataModule(name, dir=str(src or FIXTURES / name), cache_dir=str(tmp_path / "cache"), **kw)
    dm.setup()
    return dm


def copy(tmp_path, name):
    return shutil.copytree(FIXTURES / name, tmp_path / name)


def write_gz(path, lines):
    path.write_bytes(gzip.compress("".join(line + "\n" for line in lines).encode()))


# ---- readers on the fixtures ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, n", [("quasart", 24), ("searchqa", 24)])
def test_readers_read_every_question_of_their_fixture(name, n):
    rows = list(get_span_reader(name).read("train", FIXTURES / name))
    assert len(rows) == n and {"id", "question", "answers", "passages", "where"} <= set(rows[0])
    assert rows[0]["question"].startswith("What is") and rows[0]["answers"][0].startswith("the ")
    assert sum(not r["passages"] for r in rows) == 2  # the empty context lists (k % 11 == 5)
    assert all(len(r["passages"]) == 3 for r in rows if r["passages"])


def test_quasar_short_and_long_contexts_and_split_files():
    short = list(get_span_reader("quasart").read("validation", FIXTURES / "quasart"))
    long = list(get_span_reader("quasart", contexts="long").read("validation", FIXTURES / "quasart"))
    assert [r["id"] for r in short] == [r["id"] for r in long] == [f"dev{k}" for k in range(8)]
    assert long[0]["passages"][0] == "A longer pseudo-document follows ." and long[0]["passages"][1:] == short[0]["passages"]
    with pytest.raises(DataError, match="short', 'long"):
        get_span_reader("quasart", contexts="medium")


def test_searchqa_line_parsing(tmp_path):
    d = tmp_path / "s"
    d.mkdir()
    (d / "train.txt").write_text("<s> Paris is the capital . </s> <s>  </s> <s> It is big. </s> ||| capital of "
                                 "France ? ||| Paris\n\n ||| no snippets here ? ||| none\n", encoding="utf-8")
    rows = list(get_span_reader("searchqa").read("train", d))
    assert rows[0]["passages"] == ["Paris is the capital .", "It is big."] and rows[0]["answers"] == ["Paris"]
    assert rows[0]["question"] == "capital of France ?" and rows[1]["passages"] == []
    assert rows[1]["where"].endswith("train.txt:3")


# ---- malformed input: file and line -----------------------------------------------------------------------------
@pytest.mark.parametrize("line, message", [
    ("<s> a </s> ||| only a question", r"train.txt:2: malformed line with 2 fields"),
    ("<s> a </s> ||| q ||| ", r"train.txt:2: empty answer"),
    ("<s> a </s> stray ||| q ||| a", r"train.txt:2: text 'stray' outside <s>"),
])
def test_searchqa_malformed_line_names_file_and_line(tmp_path, line, message):
    d = copy(tmp_path, "searchqa")
    text = (d / "train.txt").read_text(encoding="utf-8").splitlines()
    (d / "train.txt").write_text("\n".join([text[0], line, *text[1:]]) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=message):
        module(tmp_path, "searchqa", src=d)


@pytest.mark.parametrize("which, line, message", [
    (QUASAR_Q, '{"uid": "x", "question": "q ?"', r"train_questions.json.gz:2: malformed JSON"),
    (QUASAR_Q, '{"uid": "x", "question": "q ?"}', r"train_questions.json.gz:2: missing or empty field 'answer'"),
    (QUASAR_Q, '{"uid": "nope", "question": "q ?", "answer": "a"}', (r"train_questions.json.gz:2: question 'nope' "
                                                                       r"has no line in .*train_contexts.json.gz")),
    (QUASAR_C, '{"uid": "x", "contexts": [[0.5]]}', r"train_contexts.json.gz:2: context .* is not \[score, text\]"),
    (QUASAR_C, '{"uid": "x", "contexts": "text"}', r"train_contexts.json.gz:2: field 'contexts' must be a list"),
])
def test_quasar_malformed_line_names_file_and_line(tmp_path, which, line, message):
    d = copy(tmp_path, "quasart")
    lines = gzip.decompress((d / which).read_bytes()).decode().splitlines()
    write_gz(d / which, [lines[0], line, *lines[1:]])
    with pytest.raises(DataError, match=message):
        module(tmp_path, "quasart", src=d)


def test_quasar_a_repeated_question_uid_names_both_lines(tmp_path):
    d = copy(tmp_path, "quasart")
    lines = gzip.decompress((d / QUASAR_Q).read_bytes()).decode().splitlines()
    uid = json.loads(lines[0])["uid"]
    again = json.dumps({"uid": uid, "question": "another question ?", "answer": "a"})
    write_gz(d / QUASAR_Q, [*lines[:2], again, *lines[2:]])
    with pytest.raises(DataError, match=rf"train_questions.json.gz:3: uid {uid!r} repeats .*train_questions"
                                        r".json.gz:1$"):
        module(tmp_path, "quasart", src=d)


@pytest.mark.parametrize("name, rel, split", [("quasart", "questions/dev_questions.json.gz", "validation"),
                                              ("quasart", QUASAR_C, "train"), ("searchqa", "test.txt", "test")])
def test_empty_and_non_utf8_files_name_the_file(tmp_path, name, rel, split):
    d = copy(tmp_path, name)
    path = d / rel
    if rel.endswith(".gz"):
        write_gz(path, ["  "])
    else:
        path.write_text("\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"{rel}: empty file \(read for the {split} split\)"):
        module(tmp_path, name, src=d)
    good = (FIXTURES / name / rel).read_bytes()
    body = gzip.decompress(good) if rel.endswith(".gz") else good
    lines = body.split(b"\n")
    bad = b"\n".join([lines[0], lines[1].replace(b" ", b" \xe9", 1), *lines[2:]])
    path.write_bytes(gzip.compress(bad) if rel.endswith(".gz") else bad)
    with pytest.raises(DataError, match=rf"{rel}:2: byte .* is not UTF-8"):
        module(tmp_path, name, src=d)


def test_missing_files_and_no_directory_are_clear_errors(tmp_path):
    with pytest.raises(DataError, match="lacks val.txt"):
        d = copy(tmp_path, "searchqa")
        (d / "val.txt").unlink()
        module(tmp_path, "searchqa", src=d)
    with pytest.raises(DataError, match="no Hugging Face hub copy"):
        SpanDataModule("quasart", dir=None, cache_dir=str(tmp_path)).setup()


# ---- the context pipeline ---------------------------------------------------------------------------------------
def test_tokens_keep_their_whitespace_and_the_span_is_the_first_normalised_occurrence():
    toks = tokens_with_space("He met the U.S. president;  the  President, in 1990.")
    assert "".join(toks) == "He met the U.S. president;  the  President, in 1990."
    assert find_span(toks, tokens_with_space("President")) == (7, 7)  # "U.S." is four tokens
    assert find_span(toks, tokens_with_space("The u.s. President")) == (3, 7)  # articles, case and dots normalised
    assert "".join(toks[3:8]).strip() == "U.S. president"  # the text as written
    assert find_span(toks, tokens_with_space("vice president")) is None
    assert find_span(toks, tokens_with_space("the")) is None  # nothing left after normalisation


def test_training_window_and_truncation():
    assert cut_training(list("abcdefghij"), (8, 9), 4, "window") == (6, (2, 3))
    assert cut_training(list("abcdefghij"), (4, 4), 4, "window") == (2, (2, 2))
    assert cut_training(list("abcdefghij"), (4, 4), 4, "all") is None  # beyond the first 4 tokens
    assert cut_training(list("abcdefghij"), (1, 2), 4, "all") == (0, (1, 2))
    assert cut_training(list("abcdefghij"), (1, 7), 4, "window") is None  # longer than the cap
    assert cut_training(list("abc"), (1, 2), None, "all") == (0, (1, 2))


def test_absent_answers_and_empty_contexts_are_dropped_from_training_and_counted(tmp_path):
    dm = module(tmp_path, "quasart")
    # 24 training questions: k % 7 == 3 (k = 3, 10, 17) lack the answer, k % 11 == 5 (k = 5, 16) have no context
    assert dm.stats["train_dropped_no_answer"] == 5 and dm.stats["train_empty_contexts"] == 2
    assert dm.stats["train_examples"] == 19 and any("5 of 24 training questions dropped" in w for w in dm.warnings)
    # evaluation keeps every question (EM/F1 over all of them); no gold span: start = end = -1
    assert dm.stats["validation_examples"] == 8 and dm.stats["validation_empty_contexts"] == 1
    starts = [r["start"] for r in dm.splits["validation"]]
    assert starts.count(-1) == 2 and dm.stats["validation_answer_in_context"] == 0.75
    empty = next(i for i, t in enumerate(dm.tokens("validation")) if not t)
    assert dm.splits["validation"][empty]["p_ids"] == [] and dm.answers("validation")[empty][0].startswith("the ")


def test_every_training_span_holds_the_answer(tmp_path):
    dm = module(tmp_path, "searchqa", max_len_passage_train=6, max_len_query=3)
    itos = dm.vocab.itos
    for row, answers in zip(dm.splits["train"], dm.answers("train")):
        assert len(row["p_ids"]) <= 6 and len(row["q_ids"]) <= 3
        span = " ".join(itos[i] for i in row["p_ids"][row["start"]: row["end"] + 1])
        assert span == answers[0].lower().removeprefix("the ")
    assert dm.stats["train_dropped_truncated"] == 0
    truncated = module(tmp_path, "searchqa", max_len_passage_train=6, train_context="all")
    assert truncated.stats["train_dropped_truncated"] > 0


def test_batches_with_characters_and_exact_match(tmp_path):
    dm = module(tmp_path, "quasart", batch_size=4, use_char=True, use_exact_match=True, max_word_len=5)
    batch = next(iter(dm.train_dataloader()))
    b, lp = batch["p_ids"].shape
    assert batch["p_chars"].shape == (b, lp, 5) and batch["q_chars"].shape[:2] == batch["q_ids"].shape
    assert batch["p_em"].shape == (b, lp) and batch["p_em"].dtype == torch.float
    assert torch.equal(batch["p_mask"], batch["p_ids"] != 0) and ((batch["p_chars"] > 0).any(-1) == batch["p_mask"]).all()
    assert batch["p_em"][~batch["p_mask"]].eq(0).all() and batch["p_em"].sum() > 0
    assert (batch["start"] <= batch["end"]).all() and batch["p_mask"].gather(1, batch["end"][:, None]).all()
    kwargs = dm.model_kwargs()
    assert kwargs["char_vocab_size"] == len(dm.chars) + 2 and kwargs["embeddings"] is None and kwargs["pad_id"] == 0
    assert int(batch["p_chars"].max()) < kwargs["char_vocab_size"]
    plain = next(iter(module(tmp_path, "quasart").val_dataloader()))
    assert "p_chars" not in plain and "q_em" not in plain and module(tmp_path, "quasart").model_kwargs()["char_vocab_size"] is None


def test_pretrained_vectors_and_subsets(tmp_path):
    glove = tmp_path / "glove.txt"
    glove.write_text("planet 1 2\nmars 3 4\nflower 5 6\n", encoding="utf-8")
    dm = module(tmp_path, "searchqa", embeddings={"path": str(glove)}, max_train_examples=10, max_eval_examples=3)
    assert dm.embedding_matrix.shape == (len(dm.vocab), 2) and dm.stats["embeddings_found"] >= 2
    assert dm.stats["train_questions"] == 10 and len(dm.splits["test"]) == len(dm.answers("test")) == 3
    assert json.dumps(dm.stats)  # the run record is JSON


@pytest.mark.parametrize("split,file", [("test", "test"), ("validation", "dev")])
def test_an_evaluation_split_whose_answers_never_occur_is_refused(tmp_path, split, file):
    """Every context empty: EM and F1 would be 0 whatever the model (issue 20): the test split is refused, and so
    is a validation split (model selection would run on a metric that is always 0)."""
    d = copy(tmp_path, "quasart")
    path = d / "contexts" / "short" / f"{file}_contexts.json.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    write_gz(path, [json.dumps({"uid": r["uid"], "contexts": []}) for r in rows])
    with pytest.raises(DataError, match=rf"quasart {split}: none of the .* questions has its answer in its context "
                                        r"\(\d+ contexts empty\)"):
        module(tmp_path, "quasart", src=d)


@pytest.mark.parametrize("split,file", [("validation", "val.txt"), ("test", "test.txt")])
def test_a_searchqa_evaluation_split_with_every_context_empty_is_refused(tmp_path, split, file):
    d = copy(tmp_path, "searchqa")
    lines = (d / file).read_text(encoding="utf-8").splitlines()
    (d / file).write_text("".join("<s> </s> |||" + line.split("|||", 1)[1] + "\n" for line in lines if line.strip()),
                          encoding="utf-8")
    with pytest.raises(DataError, match=rf"searchqa {split}: none of the .* questions has its answer in its context"):
        module(tmp_path, "searchqa", src=d)


def test_an_unknown_contexts_kind_is_the_data_error_itself_not_hydras_wrapper(make_cfg):
    """The DataError a data module's constructor raises reaches the command line as itself (one line, exit 2):
    Hydra's instantiate wrapped it in an InstantiationException (a traceback, exit 1)."""
    from coda_exp.pipeline import build_data

    with pytest.raises(DataError, match=r"data.contexts must be one of \['short', 'long'\], got 'medium'"):
        build_data(make_cfg("task=quasart", "scale=fixture", "data.contexts=medium"))
