"""Cataloged file paths as DuckDB ``read_parquet`` arguments that match exactly that file.

DuckDB reads a path holding ``*``, ``?`` or ``[`` as a glob pattern: a dataset folder named
``ds[1]`` would read the files of ``ds1`` (and miss its own).  Every place a cataloged path
reaches ``read_parquet`` passes it through :func:`escape_glob`.
"""

from __future__ import annotations

_SPECIAL = frozenset("*?[")


def escape_glob(path: str) -> str:
    """The glob pattern that matches exactly ``path``: each ``*``, ``?`` and ``[`` wrapped in a
    one-character class (``[*]``, ``[?]``, ``[[]``); a path without them is returned unchanged
    (DuckDB then reads it directly, no directory listing)."""
    return "".join(f"[{c}]" if c in _SPECIAL else c for c in str(path))
