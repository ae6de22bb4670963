"""Project-wide exceptions.  The CLI turns any :class:`QkwhError` into one line on stderr and a
non-zero exit code; anything else is a bug and keeps its traceback."""

from __future__ import annotations


class QkwhError(Exception):
    """A user-facing failure with a one-line, actionable message."""

    exit_code: int = 1


class InputError(QkwhError):
    """Bad input data: the message names the file and the problem."""

    exit_code = 2


class WarehouseLockedError(QkwhError):
    """Another process holds the warehouse file."""

    exit_code = 3


class NotFoundError(QkwhError):
    """A model, table or file asked for does not exist."""

    exit_code = 4


class MissingFilesError(NotFoundError):
    """A model's cataloged parquet files are gone (moved or deleted): the message names the model,
    a missing file and the fix (re-ingest from the new place, or ``qkwh remove``)."""


class Interrupted(QkwhError):
    """The user pressed Ctrl-C (exit 130, the shell's code for SIGINT)."""

    exit_code = 130


def is_interrupt(exc: BaseException) -> bool:
    """A Ctrl-C: KeyboardInterrupt, or what DuckDB raises for one that arrives while it runs a
    statement (``RuntimeError('Query interrupted')``, or ``duckdb.InterruptException``)."""
    return (isinstance(exc, KeyboardInterrupt) or type(exc).__name__ == "InterruptException"
            or (type(exc) is RuntimeError and str(exc) == "Query interrupted"))
