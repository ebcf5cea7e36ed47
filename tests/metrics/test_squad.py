"""SQuAD EM/F1 on hand-computed cases (articles, punctuation, several gold answers), against torchmetrics' SQuAD,
the data side's token normalisation agreeing with the metric's, and the DDP-safe accumulator."""

from __future__ import annotations

import random

import pytest
import torch

from coda_exp.metrics.squad import (
    IndexedSpanScores,
    best_over_golds,
    exact_match,
    f1,
    is_unigram,
    normalize_answer,
)


@pytest.mark.parametrize("text, norm", [
    ("The  Eiffel Tower!", "eiffel tower"),
    ("an apple, a pear", "apple pear"),
    ("U.S.A.", "usa"),
    ("theatre and Anthem", "theatre and anthem"),  # articles only as whole words
    ("  A\tB  ", "b"),
    ("¡Hola!", "¡hola"),  # only ASCII punctuation (string.punctuation), as the official script
])
def test_normalisation(text, norm):
    assert normalize_answer(text) == norm


def test_exact_match_and_f1_by_hand():
    assert exact_match("the Eiffel tower.", "Eiffel Tower") == 1.0
    assert exact_match("Eiffel", "Eiffel Tower") == 0.0
    # pred [eiffel, tower, in, paris], gold [eiffel, tower]: P = 2/4, R = 1, F1 = 2/3
    assert f1("Eiffel Tower in Paris", "the Eiffel Tower") == pytest.approx(2 / 3)
    # pred [eiffel, tower], gold [eiffel, tower, paris]: P = 1, R = 2/3, F1 = 0.8
    assert f1("the Eiffel, Tower", "Eiffel Tower (Paris)") == pytest.approx(0.8)
    assert f1("x x y", "x y") == pytest.approx(0.8)  # a bag of tokens: common 2, P 2/3, R 1 (a set F1 would say 1)
    assert f1("x x", "x y") == pytest.approx(0.5)  # common 1: P 1/2, R 1/2
    assert f1("", "paris") == 0.0 and f1("paris", "the") == 0.0
    assert exact_match("the", "a") == f1("the", "a") == 1.0  # both normalise to nothing: F1 = EM (SQuAD v2.0 rule)


def test_maximum_over_several_gold_answers():
    em, score = best_over_golds("New York City", ["NYC", "the city of New York", "New York"])
    # EM: none equal; F1: "new york city" vs "city of new york": common 3, P 1, R 3/4 -> 6/7; vs "new york": P 2/3, R 1 -> 0.8
    assert em == 0.0 and score == pytest.approx(6 / 7)
    assert best_over_golds("nyc", ["NYC", "New York"]) == (1.0, 1.0)
    assert best_over_golds("anything", []) == (0.0, 0.0)


def test_unigram_answers_are_counted_after_normalisation():
    assert is_unigram(["The Beatles"]) and not is_unigram(["Board Game"]) and not is_unigram([])


def test_agrees_with_torchmetrics_squad():
    squad = pytest.importorskip("torchmetrics.functional.text").squad
    rng = random.Random(0)
    words = ["the", "a", "Paris", "paris,", "tower", "Eiffel", "an", "old", "city.", "U.S.", "us"]
    for k in range(200):
        pred = " ".join(rng.choices(words, k=rng.randint(0, 4)))
        golds = [" ".join(rng.choices(words, k=rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
        ours = best_over_golds(pred, golds)
        theirs = squad([{"prediction_text": pred, "id": str(k)}],
                       [{"answers": {"answer_start": [0] * len(golds), "text": golds}, "id": str(k)}])
        assert ours[0] * 100 == pytest.approx(float(theirs["exact_match"]))
        assert ours[1] * 100 == pytest.approx(float(theirs["f1"]), abs=1e-4)


def test_data_token_normalisation_agrees_with_the_metric():
    """The gold span (data side, per token) is found exactly where the metric calls the answer an exact match."""
    from coda_exp.data.span import find_span, tokens_with_space  # the test may see both layers

    for context, answer in [("He met the U.S. president in 1990.", "the u.s. President"),
                            ("An apple, a pear; the Big-Apple.", "big-apple"), ("It's O'Neil's book", "o'neil's")]:
        toks = tokens_with_space(context)
        i, j = find_span(toks, tokens_with_space(answer))
        assert exact_match("".join(toks[i: j + 1]), answer) == 1.0


def test_scores_count_each_example_once_and_split_unigram_from_ngram():
    m = IndexedSpanScores()
    m.update(torch.tensor([1.0, 0.0]), torch.tensor([1.0, 0.5]), torch.tensor([True, False]), torch.tensor([0, 1]))
    # the distributed sampler repeated example 0 (with another score: only its first occurrence counts)
    m.update(torch.tensor([0.0, 1.0]), torch.tensor([0.0, 1.0]), torch.tensor([True, True]), torch.tensor([0, 2]))
    out = m.compute()
    assert out["em"] == pytest.approx(2 / 3) and out["f1"] == pytest.approx(2.5 / 3)
    assert out["em_unigram"] == pytest.approx(1.0) and out["f1_ngram"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="one shape"):
        m.update(torch.ones(2), torch.ones(3), torch.ones(2, dtype=torch.bool), torch.arange(2))
