"""The AlgoLisp language: flatten <-> parse, our interpreter (hand-computed results), its errors."""

from __future__ import annotations

import json
import sys

import pytest

from coda_exp.algolisp import AlgoLispError, flatten_tree, parse_program, run_program
from tests import FIXTURES

FIX = FIXTURES / "algolisp"


def run(src: str, **inputs):
    return run_program(parse_program(src), inputs)


@pytest.mark.parametrize("src, inputs, expected", [
    ("( reduce ( slice a 1 ( len a ) ) 0 + )", {"a": [5, 1, 2, 3]}, 6),
    ("( map a ( lambda1 ( * arg1 2 ) ) )", {"a": [1, -2, 3]}, [2, -4, 6]),
    ("( filter a ( lambda1 ( > arg1 0 ) ) )", {"a": [3, -1, 0, 4]}, [3, 4]),
    ("( reduce a 1 ( lambda2 ( * arg1 arg2 ) ) )", {"a": [2, 3, 4]}, 24),
    ("( reduce a 0 ( lambda2 ( - arg1 arg2 ) ) )", {"a": [1, 2, 3]}, -6),  # a left fold: ((0-1)-2)-3
    ("( if ( < a b ) a b )", {"a": 7, "b": 3}, 3),
    ("( str_concat a b )", {"a": "ab", "b": "cd"}, "abcd"),
    ("( str_index 1 a )", {"a": "hello"}, "e"),
    ('( str_split a " " )', {"a": "to be  or"}, ["to", "be", "or"]),
    ("( / -7 2 )", {}, -4),
    ("( % -7 2 )", {}, 1),
    ("( len ( filter ( range 0 10 ) ( lambda1 ( == ( % arg1 3 ) 0 ) ) ) )", {}, 4),
    ("( invoke1 ( partial0 10 - ) 3 )", {}, 7),
    ("( invoke1 ( partial1 10 - ) 3 )", {}, -7),
    ("( map a ( combine ( partial0 1 + ) ( lambda1 ( * arg1 arg1 ) ) ) )", {"a": [1, 2, 3]}, [2, 5, 10]),
    ("( digits a )", {"a": -305}, [3, 0, 5]),
    ("( reduce ( map a ( lambda1 ( strlen arg1 ) ) ) 0 max )", {"a": ["ab", "abcd", "a"]}, 4),
    ("( deref ( reverse a ) 0 )", {"a": [1, 2, 3]}, 3),
    ("( slice ( sort a ) -2 2 )", {"a": [3, 1, 2]}, [1, 2]),
    ("( map a ( lambda1 ( map b ( partial0 arg1 + ) ) ) )", {"a": [10, 20], "b": [1, 2]}, [[11, 12], [21, 22]]),
    ("( invoke1 ( lambda1 ( if ( < arg1 2 ) arg1 ( + ( self ( - arg1 1 ) ) ( self ( - arg1 2 ) ) ) ) ) 10 )",
     {}, 55),
    ("( && true ( || ( == a 1 ) ( ! ( != a 1 ) ) ) )", {"a": 2}, False),
    ("( map a ( lambda1 ( is_prime arg1 ) ) )", {"a": [97, 91, 2, 1]}, [True, False, True, False]),
    ("( + ( sqrt 16 ) ( square 3 ) )", {}, 13),
    ('( reduce a " " str_max )', {"a": ["b", "ab", "c"]}, "c"),
    ("( str_min ( last a ) ( head a ) )", {"a": ["b", "ab", "c"]}, "b"),
    ("( contains ( append ( tail a ) 9 ) 9 )", {"a": [1]}, True),
    ("a", {"a": [1, 2]}, [1, 2]),
])
def test_hand_computed_programs(src, inputs, expected):
    assert run(src, **inputs) == expected


@pytest.mark.parametrize("src, message", [
    ("( frobnicate a )", "unknown symbol 'frobnicate'"),
    ("( + a zz )", "unknown symbol 'zz'"),
    ("( / 1 0 )", "division by zero"),
    ("( deref a 3 )", "out of bounds"),
    ("( head ( filter a ( lambda1 false ) ) )", "empty"),
    ("( + 1 )", "takes 2 argument"),
    ("( reduce a 0 ( lambda1 arg1 ) )", "takes 1 argument"),
    ("( invoke1 ( lambda1 ( self arg1 ) ) 1 )", "nested deeper"),
    ("( reduce ( range 0 1000 ) 0 ( lambda2 ( reduce ( range 0 1000 ) arg1 + ) ) )", "step budget"),
    ("( range 0 5000 )", "range of more than"),
    ("( pow 10 10000 )", "bits"),
    ("( + a \"x\" )", "expected a number"),
    ("( < a \"x\" )", "TypeError"),
    ("( map 3 ( lambda1 arg1 ) )", "expected an array"),
    ("( invoke1 3 4 )", "expected a function"),
])
def test_runtime_errors_are_algolisp_errors(src, message):
    with pytest.raises(AlgoLispError, match=message):
        run(src, a=[1, 2, 3])


def test_recursion_goes_as_deep_as_the_reference_executor():
    """The dataset's executor allows 110 nested lambda scopes (nearai code_lisp.py's MAX_STACK_DEPTH) and counts
    nothing else; 200 nested calls of any kind used to fail a correct program from a recursion depth of 66."""
    count_down = "( invoke1 ( lambda1 ( if ( <= arg1 0 ) 0 ( + 1 ( self ( - arg1 1 ) ) ) ) ) a )"
    assert run(count_down, a=109) == 109  # 110 nested lambda calls
    with pytest.raises(AlgoLispError, match="lambda calls nested deeper than 110"):
        run(count_down, a=110)
    nested = "a"
    for _ in range(900):  # built-in calls nest deep without a lambda, and Python's own limit is restored after
        nested = f"( + 1 {nested} )"
    limit = sys.getrecursionlimit()
    assert run(nested, a=0) == 900 and sys.getrecursionlimit() == limit


def test_flatten_parse_round_trip():
    trees = [json.loads(line)["short_tree"] for s in ("train", "dev", "test")
             for line in (FIX / f"metaset3.{s}.jsonl").read_text().splitlines()]
    trees += [["len", ["str_split", "a", '" "']], "a", ["str_concat", '"a b"', ["str_index", "0", "b"]]]
    for tree in trees:
        tokens = flatten_tree(tree)
        assert parse_program(tokens) == tree
        assert parse_program(" ".join(tokens)) == tree
        assert parse_program(" ".join(tokens).split()) == tree  # a quoted space survives whitespace tokenisation
    assert flatten_tree(["len", ["str_split", "a", '" "']]) == ["(", "len", "(", "str_split", "a", '" "', ")", ")"]
    assert flatten_tree(["+", 1, "a"]) == ["(", "+", "1", "a", ")"]


@pytest.mark.parametrize("text, message", [
    ("( + a 1", "never closed"),
    ("+ a 1 )", "after the end"),
    ("( + a 1 ) )", "after the end"),
    (") a", "closes nothing"),
    ("( )", "empty call"),
    ("", "empty program"),
    ('( str_concat a " )', "unterminated"),
])
def test_parse_errors(text, message):
    with pytest.raises(AlgoLispError, match=message):
        parse_program(text)
