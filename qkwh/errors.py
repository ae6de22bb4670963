"""Project-wide exceptions.  The CLI turns any :class:`QkwhError` into one line on stderr and a
non-zero exit code; anything else is a bug and keeps its traceback."""

from __future__ import annotations

import difflib
import errno
import re
from collections.abc import Iterable


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` naming the choice closest to ``name``, or ``""`` when none is close."""
    close = difflib.get_close_matches(name, list(dict.fromkeys(choices)), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_names(kind: str, names: Iterable[str], known: Iterable[str], where: str = "") -> str:
    """``no <kind> 'x' (did you mean 'y'?)<where> (have: a, b)`` for names not in ``known`` (each
    known name listed once, in its order)."""
    known = list(dict.fromkeys(known))
    parts = [f"{n!r}{did_you_mean(n, known)}" for n in names]
    return f"no {kind} {', '.join(parts)}{where} (have: {', '.join(known) or 'none'})"


class QkwhError(Exception):
    """A user-facing failure with a one-line, actionable message."""

    exit_code: int = 1


class InputError(QkwhError):
    """Bad input data: the message names the file and the problem."""

    exit_code = 2


class MissingExtraError(InputError):
    """An optional extra is not installed (exit 2, like other bad input): the message ends with the
    command that installs it, e.g. ``pip install 'qkwh[ray]'``."""

    def __init__(self, what: str, extra: str):
        super().__init__(f"{what}: pip install 'qkwh[{extra}]'")
        self.extra = extra


class NotAWarehouseError(InputError):
    """The file given as the warehouse is a DuckDB database but not a qkwh warehouse (``empty``:
    it holds no table at all)."""

    def __init__(self, message: str, *, empty: bool = False) -> None:
        super().__init__(message)
        self.empty = empty


class WarehouseLockedError(QkwhError):
    """Another process holds the warehouse file."""

    exit_code = 3


class NotFoundError(QkwhError):
    """A model, table or file asked for does not exist."""

    exit_code = 4


class MissingFilesError(NotFoundError):
    """A model's cataloged parquet files are gone (moved or deleted): the message names the model,
    a missing file and the fix (re-ingest from the new place, or ``qkwh remove``)."""


class WriteFailedError(QkwhError):
    """A file could not be written (disk full, file size limit, read-only file system): the
    message names the file and the reason, and says what was kept (exit 1)."""


_WRITE_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS}
_DUCKDB_WRITE = re.compile(
    r'[Cc]ould not (?:write|truncate|sync|fsync|extend)[^"]*"(?P<file>[^"]+)"\s*:?\s*(?P<why>[^\n]*)'
)
_WRITE_WORDS = ("No space left", "File too large", "Read-only file system", "quota exceeded")


def write_failure(exc: BaseException) -> tuple[str | None, str] | None:
    """(file or None, reason) when ``exc`` is a failed write -- an OSError of a full disk, a file
    size limit, a quota or a read-only file system, or DuckDB's "Could not write file ..." --
    else None."""
    if isinstance(exc, OSError) and exc.errno in _WRITE_ERRNOS:
        return exc.filename, exc.strerror or str(exc)
    text = str(exc)
    m = _DUCKDB_WRITE.search(text)
    if m:
        return m.group("file"), m.group("why").strip() or "write failed"
    word = next((w for w in _WRITE_WORDS if w.lower() in text.lower()), None)
    return (None, word) if word else None


class Interrupted(QkwhError):
    """The user pressed Ctrl-C (exit 130, the shell's code for SIGINT)."""

    exit_code = 130


def is_interrupt(exc: BaseException) -> bool:
    """A Ctrl-C: KeyboardInterrupt, or what DuckDB raises for one that arrives while it runs a
    statement (``RuntimeError('Query interrupted')``, or ``duckdb.InterruptException``)."""
    return (
        isinstance(exc, KeyboardInterrupt)
        or type(exc).__name__ == "InterruptException"
        or (type(exc) is RuntimeError and str(exc) == "Query interrupted")
    )
