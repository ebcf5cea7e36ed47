"""Our interpreter of the AlgoLisp language (Polosukhin & Skidanov 2018).

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
  integer over 1024 bits, a string or array over 100,000 items, lambda calls nested deeper than 110 (the limit of
  the executor that made the dataset, which counts lambda scopes only) or any calls nested deeper than 1000 is an
  error.

Every failure is an :class:`AlgoLispError`; execution accuracy (:mod:`coda_exp.metrics.algolisp_exec`) counts it as a failed test, never crashes.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence

from coda_exp.algolisp.builtins import (
    BUILTINS,
    DEFAULT_MAX_STEPS,
    MAX_DEPTH,
    MAX_LAMBDA_DEPTH,
    _arity,
    _check,
)
from coda_exp.algolisp.syntax import AlgoLispError

_INT_RE = re.compile(r"^-?[0-9]+$")
_PYTHON_FRAMES = 6 * MAX_DEPTH  # Python's recursion limit while a program runs: room for MAX_DEPTH nested calls
CONSTANTS = {"true": True, "false": False, "inf": float("inf")}


class _Interp:
    def __init__(self, max_steps: int):
        self.max_steps, self.steps, self.depth, self.lambdas = max_steps, 0, 0, 0

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
        self.it.lambdas += 1
        try:
            if self.it.lambdas > MAX_LAMBDA_DEPTH:
                raise AlgoLispError(f"lambda calls nested deeper than {MAX_LAMBDA_DEPTH}")
            if self.it.depth > MAX_DEPTH:
                raise AlgoLispError(f"calls nested deeper than {MAX_DEPTH}")
            return self.it.eval(self.body, env)
        finally:
            self.it.depth -= 1
            self.it.lambdas -= 1


def run_program(tree, inputs: dict, max_steps: int = DEFAULT_MAX_STEPS):
    """The value of a program tree (nested lists of strings) with its arguments bound to ``inputs``.

    Raises :class:`AlgoLispError` for any failure: unknown function or symbol, wrong arity, type error, index out
    of bounds, division by zero, step budget exhausted, too deep a recursion.
    """
    it = _Interp(max_steps)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, _PYTHON_FRAMES))  # MAX_DEPTH nested calls, a few Python frames each
    try:
        return it.eval(tree, dict(inputs))
    except AlgoLispError:
        raise
    except RecursionError:
        raise AlgoLispError("Python recursion limit reached") from None
    except (TypeError, ValueError, IndexError, KeyError, AttributeError, OverflowError, ZeroDivisionError) as e:
        raise AlgoLispError(f"{type(e).__name__}: {e}") from None
    finally:
        sys.setrecursionlimit(limit)


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


#: the forms the interpreter reads besides built-ins and constants
SPECIAL_SYMBOLS = ("if", "lambda1", "lambda2", "arg1", "arg2", "self")


def unknown_symbols(tree, args: Sequence[str]) -> list[str]:
    """The leaves of a program tree the interpreter cannot evaluate (not an argument of ``args``, a built-in, a
    constant, a special form, an integer or a string literal), in order, each once: a program using one fails
    every test."""
    seen: list[str] = []

    def walk(node) -> None:
        if isinstance(node, list):
            for child in node:
                walk(child)
            return
        token = str(node)
        known = (token in args or token in BUILTINS or token in CONSTANTS or token in SPECIAL_SYMBOLS
                 or _INT_RE.match(token) or (len(token) >= 2 and token[0] == token[-1] == '"'))
        if not known and token not in seen:
            seen.append(token)

    walk(tree)
    return seen

