"""The built-in functions of AlgoLisp (semantics: :mod:`coda_exp.algolisp.interpreter`) and the limits they enforce.

Each entry of :data:`BUILTINS` is ``name -> (arity, fn(interpreter, *values))``; a built-in charges the
interpreter's step budget (``it.tick``) for every element it touches.
"""

from __future__ import annotations

import math

from coda_exp.algolisp.syntax import AlgoLispError

DEFAULT_MAX_STEPS = 100_000
MAX_DEPTH = 1000  # nested calls of any kind: the interpreter's own guard (run_program raises Python's limit)
MAX_LAMBDA_DEPTH = 110  # nested lambda calls: the reference executor's MAX_STACK_DEPTH (nearai code_lisp.py)
MAX_INT_BITS = 1024
MAX_LEN = 100_000
MAX_RANGE = 1000


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
