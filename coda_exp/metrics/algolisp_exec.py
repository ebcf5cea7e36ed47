"""Our interpreter of the AlgoLisp language (Polosukhin & Skidanov 2018) and execution accuracy.

A program is a tree: a leaf is an argument name, ``arg1``/``arg2``/``self`` inside a lambda, a literal (an integer,
a double-quoted string, ``true``, ``false``, ``inf``) or a built-in function used as a value (``(reduce a 0 +)``);
a list is a call ``(f x y ...)``. Semantics (chosen to agree with the executor that produced the dataset's tests):

* arguments are evaluated eagerly, left to right; only ``if`` is lazy (``&&`` and ``||`` do not short-circuit);
* ``/`` on two integers is floor division and ``%`` takes the sign of the divisor (Python's ``//`` and ``%``:
  ``(/ -7 2)`` = -4, ``(% -7 2)`` = 1); a zero divisor is an error; ``sqrt`` returns a float;
* ``(lambda1 body)`` / ``(lambda2 body)`` make closures (lexical scope) whose parameters are ``arg1`` (and ``arg2``);
  inside, ``self`` is the lambda itself (recursion); ``(reduce arr init f)`` folds left, ``f(acc, element)``;
* ``(slice arr lo hi)`` is ``arr[max(lo, 0):hi]``; ``(deref arr i)`` needs ``0 <= i < len``; ``head``/``last`` of an
  empty array is an error; ``(range lo hi)`` is ``[lo, hi)`` with at most 1000 elements; ``(str_index i s)`` takes
  the index first; ``(str_split s d)`` drops empty pieces; ``(digits n)`` lists the digits of ``|n|``;
* every evaluation step, and every element a built-in touches, costs one unit of a step budget; running out, an
  integer over 1024 bits, a string or array over 100,000 items or nesting deeper than 200 calls is an error.

Every failure is an :class:`AlgoLispError`; :func:`execution_accuracy` counts it as a failed test, never crashes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from coda_exp.data.seq2seq.algolisp import AlgoLispError, parse_program

DEFAULT_MAX_STEPS = 100_000
MAX_DEPTH = 200
MAX_INT_BITS = 1024
MAX_LEN = 100_000
MAX_RANGE = 1000
_INT_RE = re.compile(r"^-?\d+$")
CONSTANTS = {"true": True, "false": False, "inf": float("inf")}


class _Interp:
    def __init__(self, max_steps: int):
        self.max_steps, self.steps, self.depth = max_steps, 0, 0

    def tick(self, n: int = 1) -> None:
        self.steps += n
        if self.steps > self.max_steps:
            raise AlgoLispError(f"step budget of {self.max_steps} exhausted")

    def eval(self, node, env: dict):
        self.tick()
        if isinstance(node, str):
            if node in env:
                return env[node]
            if node in CONSTANTS:
                return CONSTANTS[node]
            if node in BUILTINS:
                return _Builtin(node, self)
            if _INT_RE.match(node):
                return _check(int(node))
            if len(node) >= 2 and node[0] == node[-1] == '"':
                return node[1:-1]
            raise AlgoLispError(f"unknown symbol {node!r}")
        if not isinstance(node, list) or not node:
            raise AlgoLispError(f"not a program node: {node!r}")
        head, args = node[0], node[1:]
        if head == "if":
            _arity("if", args, 3)
            return self.eval(args[1] if self.eval(args[0], env) else args[2], env)
        if head in ("lambda1", "lambda2"):
            _arity(head, args, 1)
            return _Closure(1 if head == "lambda1" else 2, args[0], env, self)
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise AlgoLispError(f"calls nested deeper than {MAX_DEPTH}")
            if isinstance(head, str) and head not in env and head in BUILTINS:
                _arity(head, args, BUILTINS[head][0])
                return self.apply(head, [self.eval(a, env) for a in args])
            fn = self.eval(head, env)
            if not callable(fn):
                raise AlgoLispError(f"{head!r} is not a function")
            return fn(*[self.eval(a, env) for a in args])
        finally:
            self.depth -= 1

    def apply(self, name: str, values: list):
        try:
            return _check(BUILTINS[name][1](self, *values))
        except AlgoLispError:
            raise
        except (TypeError, ValueError, IndexError, KeyError, AttributeError, OverflowError, ZeroDivisionError) as e:
            raise AlgoLispError(f"{name}: {type(e).__name__}: {e}") from None


class _Builtin:
    """A built-in function used as a value, e.g. the ``+`` of ``(reduce a 0 +)``."""

    __slots__ = ("it", "name")

    def __init__(self, name: str, it: _Interp):
        if name in ("if", "lambda1", "lambda2"):
            raise AlgoLispError(f"{name} is a special form, not a value")
        self.name, self.it = name, it

    def __call__(self, *values):
        _arity(self.name, values, BUILTINS[self.name][0])
        self.it.tick()
        return self.it.apply(self.name, list(values))


class _Closure:
    __slots__ = ("arity", "body", "env", "it")

    def __init__(self, arity: int, body, env: dict, it: _Interp):
        self.arity, self.body, self.env, self.it = arity, body, env, it

    def __call__(self, *values):
        _arity(f"lambda{self.arity}", values, self.arity)
        env = dict(self.env)
        env.update(zip(("arg1", "arg2"), values))
        env["self"] = self
        self.it.depth += 1
        try:
            if self.it.depth > MAX_DEPTH:
                raise AlgoLispError(f"calls nested deeper than {MAX_DEPTH}")
            return self.it.eval(self.body, env)
        finally:
            self.it.depth -= 1


def _arity(name: str, args, n: int) -> None:
    if len(args) != n:
        raise AlgoLispError(f"{name} takes {n} argument(s), got {len(args)}")


def _check(value):
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
        raise AlgoLispError(f"integer over {MAX_INT_BITS} bits")
    if isinstance(value, (str, list)) and len(value) > MAX_LEN:
        raise AlgoLispError(f"value longer than {MAX_LEN}")
    return value


def _num(v, name: str):
    if not isinstance(v, (int, float)):
        raise AlgoLispError(f"{name}: expected a number, got {type(v).__name__}")
    return v


def _int(v, name: str) -> int:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if not isinstance(v, int):
        raise AlgoLispError(f"{name}: expected an integer, got {type(v).__name__}")
    return v


def _seq(v, name: str, kind=(list,)):
    if not isinstance(v, kind):
        raise AlgoLispError(f"{name}: expected {'an array' if kind == (list,) else 'a string'}, got {v!r:.40}")
    return v


def _fn(f, name: str):
    if not callable(f):
        raise AlgoLispError(f"{name}: expected a function, got {f!r:.40}")
    return f


def _add(it, x, y):
    if isinstance(x, (str, list)) and type(x) is type(y):
        if len(x) + len(y) > MAX_LEN:
            raise AlgoLispError(f"value longer than {MAX_LEN}")
        it.tick(len(x) + len(y))
        return x + y
    return _num(x, "+") + _num(y, "+")


def _div(it, x, y):
    if _num(y, "/") == 0:
        raise AlgoLispError("division by zero")
    return x // y if isinstance(_num(x, "/"), int) and isinstance(y, int) else x / y


def _mod(it, x, y):
    if _num(y, "%") == 0:
        raise AlgoLispError("modulo by zero")
    return _num(x, "%") % y


def _pow(it, x, y):
    _num(x, "pow"), _num(y, "pow")
    if isinstance(x, int) and isinstance(y, int) and y > 0 and abs(x) > 1 and y * x.bit_length() > MAX_INT_BITS + 64:
        raise AlgoLispError(f"integer over {MAX_INT_BITS} bits")
    return x ** y


def _sqrt(it, x):
    if _num(x, "sqrt") < 0:
        raise AlgoLispError("sqrt of a negative number")
    return math.sqrt(x)


def _deref(it, a, i):
    i = _int(i, "deref")
    if not 0 <= i < len(_seq(a, "deref", (list, str))):
        raise AlgoLispError(f"deref: index {i} out of bounds for length {len(a)}")
    return a[i]


def _end(it, a, which: int, name: str):
    if not _seq(a, name, (list, str)):
        raise AlgoLispError(f"{name} of an empty array")
    return a[which]


def _range(it, lo, hi):
    lo, hi = _int(lo, "range"), _int(hi, "range")
    if hi - lo > MAX_RANGE:
        raise AlgoLispError(f"range of more than {MAX_RANGE} elements")
    it.tick(max(0, hi - lo))
    return list(range(lo, hi))


def _map(it, a, f):
    _fn(f, "map")
    return [f(x) for x in _seq(a, "map")]


def _filter(it, a, f):
    _fn(f, "filter")
    return [x for x in _seq(a, "filter") if f(x)]


def _reduce(it, a, init, f):
    _fn(f, "reduce")
    acc = init
    for x in _seq(a, "reduce"):
        acc = f(acc, x)
    return acc


def _partial(index: int):
    def make(it, value, f):
        _fn(f, f"partial{index}")
        return lambda *rest: f(*rest[:index], value, *rest[index:])
    return make


def _combine(it, f, g):
    _fn(f, "combine"), _fn(g, "combine")
    return lambda *args: f(g(*args))


def _str_split(it, s, d):
    _seq(s, "str_split", (str,)), _seq(d, "str_split", (str,))
    if not d:
        raise AlgoLispError("str_split: empty delimiter")
    it.tick(len(s))
    return [p for p in s.split(d) if p]


def _digits(it, n):
    return [int(c) for c in str(abs(_int(n, "digits")))]


def _is_prime(it, n):
    n = _int(n, "is_prime")
    if n <= 1:
        return False
    limit = math.isqrt(n)
    it.tick(limit)
    return all(n % d for d in range(2, limit + 1))


def _sorted(it, a):
    it.tick(len(_seq(a, "sort")))
    return sorted(a)


def _is_sorted(it, a):
    it.tick(len(_seq(a, "is_sorted")))
    return all(a[i] <= a[i + 1] for i in range(len(a) - 1))


def _contains(it, a, x):
    it.tick(len(_seq(a, "contains", (list, str))))
    return x in a


BUILTINS: dict[str, tuple[int, object]] = {
    "+": (2, _add),
    "-": (2, lambda it, x, y: _num(x, "-") - _num(y, "-")),
    "*": (2, lambda it, x, y: _num(x, "*") * _num(y, "*")),
    "/": (2, _div),
    "%": (2, _mod),
    "pow": (2, _pow),
    "sqrt": (1, _sqrt),
    "square": (1, lambda it, x: _num(x, "square") * x),
    "abs": (1, lambda it, x: abs(_num(x, "abs"))),
    "floor": (1, lambda it, x: int(float(_num(x, "floor")))),
    "min": (2, lambda it, x, y: min(x, y)),
    "max": (2, lambda it, x, y: max(y, x)),
    "==": (2, lambda it, x, y: x == y),
    "!=": (2, lambda it, x, y: x != y),
    "<": (2, lambda it, x, y: x < y),
    ">": (2, lambda it, x, y: x > y),
    "<=": (2, lambda it, x, y: x <= y),
    ">=": (2, lambda it, x, y: x >= y),
    "&&": (2, lambda it, x, y: bool(x) and bool(y)),
    "||": (2, lambda it, x, y: bool(x) or bool(y)),
    "!": (1, lambda it, x: not x),
    "len": (1, lambda it, a: len(_seq(a, "len", (list, str)))),
    "head": (1, lambda it, a: _end(it, a, 0, "head")),
    "last": (1, lambda it, a: _end(it, a, -1, "last")),
    "tail": (1, lambda it, a: _seq(a, "tail")[1:]),
    "deref": (2, _deref),
    "int-deref": (2, _deref),
    "slice": (3, lambda it, a, lo, hi: _seq(a, "slice", (list, str))[max(0, _int(lo, "slice")):_int(hi, "slice")]),
    "append": (2, lambda it, a, v: _seq(a, "append") + [v]),
    "concat": (2, lambda it, a, b: _seq(a, "concat") + _seq(b, "concat")),
    "reverse": (1, lambda it, a: _seq(a, "reverse", (list, str))[::-1]),
    "sort": (1, _sorted),
    "is_sorted": (1, _is_sorted),
    "contains": (2, _contains),
    "range": (2, _range),
    "map": (2, _map),
    "filter": (2, _filter),
    "reduce": (3, _reduce),
    "invoke1": (2, lambda it, f, x: _fn(f, "invoke1")(x)),
    "combine": (2, _combine),
    "partial0": (2, _partial(0)),
    "partial1": (2, _partial(1)),
    "partial2": (2, _partial(2)),
    "strlen": (1, lambda it, s: len(_seq(s, "strlen", (str,)))),
    "str_index": (2, lambda it, i, s: _seq(s, "str_index", (str,))[_int(i, "str_index")]),
    "str_concat": (2, lambda it, a, b: _seq(a, "str_concat", (str,)) + _seq(b, "str_concat", (str,))),
    "str_split": (2, _str_split),
    "str_min": (2, lambda it, x, y: x if _seq(x, "str_min", (str,)) <= _seq(y, "str_min", (str,)) else y),
    "str_max": (2, lambda it, x, y: y if _seq(x, "str_max", (str,)) <= _seq(y, "str_max", (str,)) else x),
    "str": (1, lambda it, x: str(x)),
    "digits": (1, _digits),
    "is_prime": (1, _is_prime),
}


def run_program(tree, inputs: dict, max_steps: int = DEFAULT_MAX_STEPS):
    """The value of a program tree (nested lists of strings) with its arguments bound to ``inputs``.

    Raises :class:`AlgoLispError` for any failure: unknown function or symbol, wrong arity, type error, index out
    of bounds, division by zero, step budget exhausted, too deep a recursion.
    """
    it = _Interp(max_steps)
    try:
        return it.eval(tree, dict(inputs))
    except AlgoLispError:
        raise
    except RecursionError:
        raise AlgoLispError("Python recursion limit reached") from None
    except (TypeError, ValueError, IndexError, KeyError, AttributeError, OverflowError, ZeroDivisionError) as e:
        raise AlgoLispError(f"{type(e).__name__}: {e}") from None


def _same(value, expected) -> bool:
    if callable(value):
        return False
    if isinstance(value, list) and isinstance(expected, list):
        return len(value) == len(expected) and all(_same(v, e) for v, e in zip(value, expected))
    return value == expected


def passes_tests(tree, tests: Sequence[dict], max_steps: int = DEFAULT_MAX_STEPS) -> bool:
    """Whether the program ``tree`` gives every test's ``output`` from its ``input``; no tests -> False."""
    if not tests:
        return False
    try:
        return all(_same(run_program(tree, t["input"], max_steps), t["output"]) for t in tests)
    except AlgoLispError:
        return False


def execution_outcomes(hyp_tokens_list: Sequence, examples: Sequence[dict],
                       max_steps: int = DEFAULT_MAX_STEPS) -> list[bool]:
    """Per example: whether its hypothesis (tokens or a string, brackets as tokens) passes ALL of its ``tests``.

    A hypothesis that does not parse, fails at run time or exhausts ``max_steps`` on any test fails the example;
    an example with no tests counts as failed.
    """
    if len(hyp_tokens_list) != len(examples):
        raise ValueError(f"{len(hyp_tokens_list)} hypotheses for {len(examples)} examples")
    return [_passes_text(hyp, ex["tests"], max_steps) for hyp, ex in zip(hyp_tokens_list, examples)]


def _passes_text(hyp, tests: Sequence[dict], max_steps: int) -> bool:
    try:
        return passes_tests(parse_program(hyp), tests, max_steps)
    except AlgoLispError:  # does not parse
        return False


def execution_accuracy(hyp_tokens_list: Sequence, examples: Sequence[dict],
                       max_steps: int = DEFAULT_MAX_STEPS) -> float:
    """Fraction of examples passing all their tests (:func:`execution_outcomes`); 0 for no examples."""
    passed = execution_outcomes(hyp_tokens_list, examples, max_steps)
    return sum(passed) / len(passed) if passed else 0.0
