import math

import pytest

from coda_exp.metrics.bleu import detokenize, multi_bleu, sacrebleu_score, tokenized_bleu, unescape_moses


def test_bleu_tok_is_pinned_to_multi_bleu_perl():
    # multi-bleu.perl on hyp "the cat sat on the mat" / ref "the cat sat on a mat" prints
    #   BLEU = 53.73, 83.3/60.0/50.0/33.3 (BP=1.000, ratio=1.000, hyp_len=6, ref_len=6)
    # by hand: unigrams 5/6 (the second "the" is clipped: the reference has one), bigrams 3/5 (the cat, cat sat,
    # sat on), trigrams 2/4, 4-grams 1/3 (the cat sat on); same length: BP = 1;
    # BLEU = 100 * (5/6 * 3/5 * 2/4 * 1/3) ** (1/4) = 100 * (1/12) ** 0.25 = 53.728
    s = multi_bleu(["the cat sat on the mat"], ["the cat sat on a mat"])
    assert s.precisions == pytest.approx((500 / 6, 60.0, 50.0, 100 / 3))
    assert s.brevity_penalty == 1.0 and (s.hyp_len, s.ref_len) == (6, 6)
    expected = 100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
    assert s.score == pytest.approx(expected) and expected == pytest.approx(53.728, abs=1e-3)
    assert tokenized_bleu(["the cat sat on the mat"], ["the cat sat on a mat"]) == pytest.approx(expected)


def test_brevity_penalty_is_corpus_level():
    hyps = ["a b c d", "w x y z"]
    refs = ["a b c d e f", "w x y z"]
    s = multi_bleu(hyps, refs)
    assert s.precisions == (100.0, 100.0, 100.0, 100.0)
    assert (s.hyp_len, s.ref_len) == (8, 10) and s.ratio == pytest.approx(0.8)
    assert s.brevity_penalty == pytest.approx(math.exp(1 - 10 / 8))
    assert s.score == pytest.approx(100 * math.exp(-0.25))
    # a longer hypothesis is not penalised (precision is)
    assert multi_bleu(["a b c d e f g"], ["a b c d e f"]).brevity_penalty == 1.0


def test_case_sensitive_and_no_retokenization():
    assert tokenized_bleu(["The cat sat on the mat"], ["the cat sat on the mat"]) < 100
    assert tokenized_bleu(["The cat sat on the mat"], ["the cat sat on the mat"], lowercase=True) == pytest.approx(100)
    # "mat." is one token: tokenized BLEU does not split punctuation (sacreBLEU's 13a would)
    assert multi_bleu(["the cat sat on the mat."], ["the cat sat on the mat ."]).hyp_len == 6
    # only whitespace separates tokens; runs of spaces and tabs count once
    assert tokenized_bleu(["the  cat\tsat on the mat"], ["the cat sat on the mat"]) == pytest.approx(100)


def test_zero_precision_gives_zero_like_multi_bleu():
    s = multi_bleu(["a b c"], ["a b c"])  # no 4-gram at all: precision 0 -> BLEU 0 (no smoothing)
    assert s.precisions[3] == 0.0 and s.score == 0.0
    assert tokenized_bleu(["x y z w"], ["a b c d"]) == 0.0
    assert tokenized_bleu([""], ["a b c d"]) == 0.0


def test_sacrebleu_score_and_signature():
    score, sig = sacrebleu_score(["The cat sat on the mat."], ["The cat sat on a mat."])
    assert 0 < score < 100
    assert "nrefs:1" in sig and "tok:13a" in sig and "version:" in sig


def test_misaligned_inputs():
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        tokenized_bleu(["a", "b"], ["a"])
    with pytest.raises(TypeError):
        tokenized_bleu("a b", "a b")


def test_unescape_moses_in_one_pass():
    text = "it &apos;s &quot;x&quot; &amp; y &lt;b&gt; &#91;1&#93; a &#124; b &amp;apos;"
    assert unescape_moses(text) == "it 's \"x\" & y <b> [1] a | b &apos;"  # an escaped & stays one character


SENTENCES = [
    "It isn't what you think, is it?",
    "We're here; they've gone, I'm sure you'll agree.",
    'He said "hello" and left.',
    "The cat's toy (a red ball) costs $5.",
    "Rock & roll: 100% fun!",
    "A well-known fact [1].",
    "You can't stop now... can you?",
    "She'd rather be in Hà Nội, she said.",
    "I don't know what it's about.",
    "Prices rose 3.5% in 2019, didn't they?",
]


@pytest.mark.parametrize("plain", SENTENCES)
def test_detokenize_undoes_the_moses_tokenizer(plain):
    from sacremoses import MosesTokenizer

    tokenized = MosesTokenizer(lang="en").tokenize(plain, escape=True, return_str=True)
    assert tokenized != plain
    assert detokenize(tokenized) == plain  # e.g. "isn &apos;t" -> "isn't", never "isn 't"


def test_detokenize_keeps_vietnamese_and_empty_lines():
    assert detokenize("họ thấy , đúng &quot; vậy &quot; .") == 'họ thấy, đúng "vậy".'
    assert detokenize("") == ""


def test_iwslt_bleu_evaluation_sacrebleu_on_detokenized_text_and_bleu_tok_on_tokens(monkeypatch):
    from coda_exp.data import IWSLTDataModule
    from coda_exp.tasks import seq2seq_eval
    from tests import FIXTURES

    dm = IWSLTDataModule(dir=str(FIXTURES / "iwslt15_envi"), batch_size=4)
    dm.setup()
    refs = [ex["tgt"] for ex in dm.targets("test")]
    hyps = [r.replace(" .", " !") for r in refs]
    seen = []
    monkeypatch.setattr(seq2seq_eval, "sacrebleu_score", lambda h, r: seen.append((h, r)) or sacrebleu_score(h, r))
    got = seq2seq_eval.bleu_evaluation(hyps, dm.targets("test"), dm.stats)
    assert seen == [([detokenize(h) for h in hyps], [detokenize(r) for r in refs])]
    assert 'họ thấy một lớn bài_hát hôm_nay, đúng "vậy".' in seen[0][1]
    assert got["bleu"] == pytest.approx(sacrebleu_score(*seen[0])[0])
    assert got["bleu_tok"] == pytest.approx(tokenized_bleu(hyps, refs))  # on the tokenised text, unchanged
    assert "tok:13a" in dm.stats["sacrebleu_signature"]  # recorded in the run record's data section


def test_table_4_notes_print_the_sacrebleu_signature():
    from pathlib import Path

    from coda_exp.tables import load_table_spec

    _, sig = sacrebleu_score(["a b c d"], ["a b c d"])
    settings = sig.rsplit("|version:", 1)[0]  # the version is in each run record
    spec = load_table_spec(Path(__file__).parents[2] / "configs" / "tables" / "table_4.yaml")
    assert f"`{settings}`" in spec.notes and "detokenize" in spec.notes
