"""AlgoLisp programs as text: the flattened token form of a program tree and its parser.

A program tree is nested lists of strings (a call is ``[function, arg, ...]``); flattened, it is bracket tokens,
``( reduce ( slice a 1 ( len a ) ) 0 + )``. String literals keep their quotes (``" "`` is one token); the lexer of
:func:`parse_program` reads a quoted literal as one token even if its inside was split on spaces, so a target that
went through ``str.split`` and back parses to the same program.
"""

from __future__ import annotations

from collections.abc import Sequence


class AlgoLispError(ValueError):
    """An AlgoLisp program is malformed (syntax) or failed at run time (unknown function, type error, budget)."""


def flatten_tree(tree) -> list[str]:
    """``["reduce", ["slice", "a", "1", ["len", "a"]], "0", "+"]`` -> ``( reduce ( slice a 1 ( len a ) ) 0 + )``."""
    out: list[str] = []

    def walk(node) -> None:
        if isinstance(node, list):
            if not node:
                raise AlgoLispError("empty list in a program tree: every call needs a function")
            out.append("(")
            for child in node:
                walk(child)
            out.append(")")
        elif isinstance(node, bool) or not isinstance(node, (str, int)):
            raise AlgoLispError(f"program tree leaf {node!r} is not a string or an integer")
        else:
            token = str(node)
            if not token or token in ("(", ")"):
                raise AlgoLispError(f"program tree leaf {token!r} is not a symbol")
            out.append(token)

    walk(tree)
    return out


def tokenize_program(text: str) -> list[str]:
    """Split on spaces and brackets; a double-quoted literal (``"a b"``) is one token, its inside kept verbatim."""
    tokens, i, n = [], 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "()":
            tokens.append(ch)
            i += 1
        elif ch == '"':
            end = text.find('"', i + 1)
            if end < 0:
                raise AlgoLispError(f"unterminated string literal at character {i}: {text[i:i + 20]!r}")
            tokens.append(text[i:end + 1])
            i = end + 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in '()"':
                j += 1
            tokens.append(text[i:j])
            i = j
    return tokens


def parse_program(tokens: str | Sequence[str]):
    """Inverse of :func:`flatten_tree`: tokens (or their space-joined string) -> nested lists of strings.

    Raises :class:`AlgoLispError` on unbalanced brackets, an empty call ``( )``, trailing tokens or no tokens.
    """
    text = tokens if isinstance(tokens, str) else " ".join(tokens)
    toks = tokenize_program(text)
    if not toks:
        raise AlgoLispError("empty program")
    stack: list[list] = []
    result = None
    for pos, tok in enumerate(toks):
        if result is not None:
            raise AlgoLispError(f"tokens after the end of the program at token {pos}: {' '.join(toks[pos:pos + 5])}")
        if tok == "(":
            stack.append([])
        elif tok == ")":
            if not stack:
                raise AlgoLispError(f"unbalanced brackets: ')' at token {pos} closes nothing")
            node = stack.pop()
            if not node:
                raise AlgoLispError(f"empty call '( )' at token {pos}")
            if stack:
                stack[-1].append(node)
            else:
                result = node
        elif stack:
            stack[-1].append(tok)
        else:
            result = tok  # a bare symbol is a whole program
    if stack:
        raise AlgoLispError(f"unbalanced brackets: {len(stack)} '(' never closed")
    return result
