"""The AlgoLisp language (Polosukhin & Skidanov 2018): program syntax, built-ins and our interpreter.

Used by the AlgoLisp reader (programs -> target tokens) and by execution accuracy; it knows nothing of either.
"""

from coda_exp.algolisp.builtins import DEFAULT_MAX_STEPS
from coda_exp.algolisp.interpreter import passes_tests, run_program
from coda_exp.algolisp.syntax import AlgoLispError, flatten_tree, parse_program, tokenize_program

__all__ = ["DEFAULT_MAX_STEPS", "AlgoLispError", "flatten_tree", "parse_program", "passes_tests", "run_program",
           "tokenize_program"]
