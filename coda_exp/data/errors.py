"""Errors raised for bad or missing data: each message names the file, line or key and what was expected."""


class DataError(ValueError):
    """A dataset could not be read: missing files, a malformed row, an unknown label."""
