"""The base of every error a user's own input causes (a bad config value, data file, folder or checkpoint).

Such an error is one message naming the key, file or line and what was expected: ``train.py`` prints it alone and
exits with :data:`USER_ERROR_EXIT` (2), where a crash (any other exception) keeps its traceback and Hydra's exit
status 1. In a sweep the job fails as any other (the sweep goes on and lists it at the end), logged without a
traceback. Each module's own error class (``ConfigError``, ``DataError``, ``OutputDirError``, ``CheckpointError``)
derives from it besides its builtin base.
"""

from __future__ import annotations

import errno

USER_ERROR_EXIT = 2
# no space left on the device, over the user's quota, or over a file-size limit (ulimit -f, the filesystem's largest)
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class UserError(Exception):
    """An error in the user's input, reported as its message alone (see the module docstring)."""


def print_error(err: UserError, verbose: bool = False) -> None:
    """``error: <message>`` on stderr: a user's mistake is its message alone. With ``-v`` an error raised from
    another (a module of the user's own that raised on import, a file a library could not read) has that error's
    traceback printed first: the message names its last frame only."""
    import sys
    import traceback

    cause = err.__cause__
    if verbose and cause is not None and not isinstance(cause, UserError):
        traceback.print_exception(type(cause), cause, cause.__traceback__, file=sys.stderr)
    print(f"error: {err}", file=sys.stderr, flush=True)


def exit_status(err: BaseException | None) -> int:
    """The status a process leaving with ``err`` in flight exits with: 0 without one, 130 for a Ctrl-C (a
    KeyboardInterrupt, or the exit Lightning makes of one), a SystemExit's own (143 for a SIGTERM's stop),
    :data:`USER_ERROR_EXIT` for a :class:`UserError`, 1 for any other exception."""
    if err is None:
        return 0
    if isinstance(err, KeyboardInterrupt) or isinstance(err, SystemExit) and isinstance(err.__context__,
                                                                                          KeyboardInterrupt):
        return 130
    if isinstance(err, SystemExit):
        return err.code if isinstance(err.code, int) else 0 if err.code is None else 1
    return USER_ERROR_EXIT if isinstance(err, UserError) else 1


def cause_of(err: BaseException | None, kind: type[BaseException] | tuple) -> BaseException | None:
    """The first exception of type ``kind`` in ``err``'s chain (itself, then its causes and contexts, up to a
    ``raise ... from None``, which says what came before does not matter), or None: the error behind a library's
    own (torch reports a full disk as a RuntimeError whose context is the OSError)."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, kind):
            return err
        seen.add(id(err))
        err = err.__cause__ or (None if err.__suppress_context__ else err.__context__)
    return None


def full_disk(err: BaseException | None) -> OSError | None:
    """The OSError of a full disk, quota or file-size limit behind ``err`` (:func:`cause_of`), or None."""
    failed = cause_of(err, OSError)
    return failed if failed is not None and failed.errno in DISK_FULL else None


def what_to_free(err: OSError) -> str:
    """What a user does about ``err`` (a :func:`full_disk` error): free space, or lift a file-size limit."""
    if err.errno == errno.EFBIG:
        return "raise the file-size limit (ulimit -f) or write to a filesystem that takes larger files"
    return "free space on that disk"
