import math
import re
import sys
import unicodedata
from collections import Counter
from functools import cache

import pytest

from coda_exp.metrics.bleu import (
    detokenize,
    multi_bleu,
    sacrebleu_score,
    t2t_bleu,
    t2t_bleu_stats,
    tokenized_bleu,
    unescape_moses,
)


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


def test_iwslt_bleu_evaluation_t2t_and_bleu_tok_on_the_text_and_sacrebleu_detokenized(monkeypatch, tmp_path):
    from coda_exp.data import IWSLTDataModule
    from coda_exp.tasks import seq2seq_eval
    from tests import FIXTURES

    dm = IWSLTDataModule(dir=str(FIXTURES / "iwslt15_envi"), cache_dir=str(tmp_path), batch_size=4)
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
    assert got["bleu_t2t"] == pytest.approx(t2t_bleu(hyps, refs)) == pytest.approx(_t2t_reference(hyps, refs))
    assert set(got) == set(seq2seq_eval.EVALUATION_METRICS["bleu"])  # each logged as val/<name> and test/<name>
    assert "tok:13a" in dm.stats["sacrebleu_signature"]  # recorded in the run record's data section


def test_table_4_compares_t2t_bleu_and_its_notes_print_the_sacrebleu_signature():
    from pathlib import Path

    from coda_exp.tables import load_table_spec

    _, sig = sacrebleu_score(["a b c d"], ["a b c d"])
    settings = sig.rsplit("|version:", 1)[0]  # the version is in each run record
    spec = load_table_spec(Path(__file__).parents[2] / "configs" / "tables" / "table_4.yaml")
    assert f"`{settings}`" in spec.notes and "detokenize" in spec.notes
    assert spec.columns[0].metric == "test/bleu_t2t" and "t2t-bleu, cased" in spec.notes and "28.43" in spec.notes


# -- t2t-bleu, written again here from Tensor2Tensor's description (tensor2tensor/utils/bleu_hook.py) ---------------
@cache
def _t2t_regexes():
    """bleu_tokenize's three substitutions (mteval-v14's international tokenization) with Python's re: the
    Unicode classes P (punctuation) and S (symbols) listed from unicodedata, a digit being \\d."""
    def chars(prefix):
        return re.escape("".join(chr(c) for c in range(sys.maxunicode)
                                 if unicodedata.category(chr(c)).startswith(prefix)))

    punct, symbols = chars("P"), chars("S")
    return [(re.compile(rf"([^\d])([{punct}])"), r"\1 \2 "), (re.compile(rf"([{punct}])([^\d])"), r" \1 \2"),
            (re.compile(rf"([{symbols}])"), r" \1 ")]


def _t2t_tokenize(line: str) -> list[str]:
    for regex, repl in _t2t_regexes():
        line = regex.sub(repl, line)
    return line.split()


def _ngrams(tokens: list[str]) -> Counter:
    return Counter(tuple(tokens[i:i + n]) for n in range(1, 5) for i in range(len(tokens) - n + 1))


def _t2t_reference(hyps: list[str], refs: list[str], case_sensitive: bool = True) -> float:
    """bleu_wrapper: lowercase unless case_sensitive, bleu_tokenize, compute_bleu (x 100, as t2t-bleu prints)."""
    if not case_sensitive:
        hyps, refs = [h.lower() for h in hyps], [r.lower() for r in refs]
    matches, possible, hyp_len, ref_len = [0] * 4, [0] * 4, 0, 0
    for hyp, ref in zip(hyps, refs):
        h, r = _t2t_tokenize(hyp), _t2t_tokenize(ref)
        hyp_len, ref_len = hyp_len + len(h), ref_len + len(r)
        hc, rc = _ngrams(h), _ngrams(r)
        for gram, count in rc.items():
            matches[len(gram) - 1] += min(count, hc[gram])
        for gram, count in hc.items():
            possible[len(gram) - 1] += count
    precisions, smooth = [0.0] * 4, 1.0
    for i in range(4):
        if possible[i] > 0:
            if matches[i] > 0:
                precisions[i] = matches[i] / possible[i]
            else:
                smooth *= 2
                precisions[i] = 1.0 / (smooth * possible[i])
    geo_mean = math.exp(sum(math.log(p) for p in precisions if p) / 4) if max(precisions) > 0 else 0.0
    ratio = hyp_len / ref_len
    bp = math.exp(1 - 1.0 / ratio) if 0 < ratio < 1.0 else (0.0 if ratio <= 0 else 1.0)
    return 100 * geo_mean * bp


TOKENIZATION_CASES = [
    "we like a new song , it &apos;s true .",
    "chúng_tôi thích một mới bài_hát , đúng &quot; vậy &quot; .",
    "It's 3.5% of $1,000.50 in 2019.",
    "a well-known fact [1] ... (really?) « yes » – “no” …",
    "x+y=z < w > v | u ~ ^ € £ ©",
    "end with a year 2019.",
]


@pytest.mark.parametrize("line", TOKENIZATION_CASES)
def test_t2t_bleu_tokenizes_as_bleu_hook(line):
    from sacrebleu.tokenizers.tokenizer_intl import TokenizerV14International

    assert TokenizerV14International()(line).split() == _t2t_tokenize(line)


def test_t2t_bleu_by_hand_where_intl_and_whitespace_tokens_differ():
    # intl: "the cat sat on the mat ." (7 tokens, the full stop split off) against "the cat sat on a mat ." (7):
    # unigrams 6/7 (the second "the" clipped), bigrams 4/6 (the cat, cat sat, sat on, mat .), trigrams 2/5,
    # 4-grams 1/4; same length: BP = 1; BLEU = 100 * (6/7 * 4/6 * 2/5 * 1/4) ** (1/4) = 100 * (2/35) ** 0.25
    s = t2t_bleu_stats(["the cat sat on the mat."], ["the cat sat on a mat ."])
    assert s.precisions == pytest.approx((600 / 7, 400 / 6, 40.0, 25.0)) and (s.hyp_len, s.ref_len) == (7, 7)
    assert s.score == pytest.approx(100 * (2 / 35) ** 0.25) and s.score == pytest.approx(48.89, abs=5e-3)
    # multi-bleu.perl splits on spaces only: "mat." is one token, so 6 against 7 tokens
    assert multi_bleu(["the cat sat on the mat."], ["the cat sat on a mat ."]).hyp_len == 6
    # the release's escapes are tokens to t2t-bleu as to the reference: "&apos;s" = "& apos ; s" on both sides
    hyp, ref = "we like it, it &apos;s true.", "we like it , it &apos;s true ."
    assert t2t_bleu([hyp], [ref]) == pytest.approx(100.0)
    assert tokenized_bleu([hyp], [ref]) < 60
    assert t2t_bleu_stats([hyp], [ref]).hyp_len == 11


def test_t2t_bleu_agrees_with_bleu_hook_written_again():
    from tests import FIXTURES

    refs = (FIXTURES / "iwslt15_envi" / "tst2013.vi").read_text(encoding="utf-8").splitlines()
    hyps = [r.replace(" .", ".").replace("một", "cái").replace(" , ", ", ") for r in refs]
    hyps[1], hyps[2] = "Tôi đọc cái lớn bài_hát", ""  # case, a short and an empty hypothesis
    for h, r in [(hyps, refs), (TOKENIZATION_CASES, TOKENIZATION_CASES[::-1])]:
        assert t2t_bleu(h, r) == pytest.approx(_t2t_reference(h, r))
        assert t2t_bleu(h, r, lowercase=True) == pytest.approx(_t2t_reference(h, r, case_sensitive=False))
    assert t2t_bleu(hyps, refs) < t2t_bleu(hyps, refs, lowercase=True)
    assert t2t_bleu(hyps, refs) != pytest.approx(tokenized_bleu(hyps, refs))


def test_t2t_bleu_smooths_as_compute_bleu_where_sacrebleu_none_gives_zero():
    # no 4-gram matches: T2T's precision 1 / (2 * 1); BLEU = 100 * (3/4 * 2/3 * 1/2 * 1/2) ** 0.25 (sacreBLEU: 0)
    assert t2t_bleu(["a b c x"], ["a b c d"]) == pytest.approx(100 * (1 / 8) ** 0.25)
    assert t2t_bleu(["a b c x"], ["a b c d"]) == pytest.approx(_t2t_reference(["a b c x"], ["a b c d"]))
    # no 4-gram at all: that order is left out of the logs, which are still divided by 4
    assert t2t_bleu(["a b c"], ["a b c"]) == pytest.approx(100.0) == _t2t_reference(["a b c"], ["a b c"])
    assert t2t_bleu(["x y z w"], ["a b c d"]) == pytest.approx(_t2t_reference(["x y z w"], ["a b c d"]))
    assert t2t_bleu([""], ["a b c d"]) == 0.0


@pytest.mark.parametrize("score", ["multi_bleu", "tokenized_bleu", "t2t_bleu", "sacrebleu_score"])
def test_an_empty_corpus_is_a_clear_error(score):
    """sacrebleu's IndexError ("list index out of range") was all a caller got."""
    from coda_exp.metrics import bleu

    with pytest.raises(ValueError, match="no sentences: BLEU is not defined over an empty corpus"):
        getattr(bleu, score)([], [])
