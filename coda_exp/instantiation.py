"""Hydra's ``instantiate``, with the project's own errors kept whole.

A constructor that refuses its arguments raises a :class:`~coda_exp.errors.UserError` (a ``DataError`` for
``data.contexts=medium``, a ``ConfigError``...), which Hydra wraps in an ``InstantiationException``: a traceback and
exit status 1 instead of the one-line message and exit status 2 every other user error gets. :func:`instantiate`
re-raises the UserError itself.
"""

from __future__ import annotations

from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate as hydra_instantiate

from coda_exp.errors import UserError, cause_of


def instantiate(config: Any, *args: Any, **kwargs: Any) -> Any:
    """``hydra.utils.instantiate(config, *args, **kwargs)``; a UserError behind Hydra's InstantiationException is
    raised as itself."""
    try:
        return hydra_instantiate(config, *args, **kwargs)
    except InstantiationException as err:
        user = cause_of(err, UserError)
        if user is None:
            raise
        raise user from None
