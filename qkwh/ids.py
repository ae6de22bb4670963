"""Model ids are identifiers: the one check every id passes before qkwh stores it.

A model id names a model in every table, in file names of reports and exports, and in SQL the
warehouse builds (the ``vectors`` view).  So it is restricted to a safe alphabet: it starts with
a letter or digit, continues with letters, digits, ``.``, ``_`` or ``-``, holds no ``..`` and is
at most :data:`MAX_LENGTH` characters long.  No ``/``, quotes, whitespace or control characters.

Ids are compared ignoring case (:func:`model_id_key`): DuckDB identifiers such as the per-model
views ``vectors_<model_id>`` ignore case, and so do the file names of reports on some systems, so
``M1`` and ``m1`` cannot both be stored (:func:`case_collision`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from qkwh.errors import InputError

MAX_LENGTH = 128
_ALLOWED = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_CHAR = re.compile(r"[A-Za-z0-9._-]")
RULE = (
    "letters, digits, '.', '_' and '-', starting with a letter or digit, no '..', "
    f"at most {MAX_LENGTH} characters"
)


def model_id_problem(model_id: object) -> str | None:
    """Why ``model_id`` is not a valid model id, or None when it is."""
    if not isinstance(model_id, str):
        return f"is a {type(model_id).__name__}, not text"
    if not model_id:
        return "is empty"
    if len(model_id) > MAX_LENGTH:
        return f"is {len(model_id)} characters long"
    if ".." in model_id:
        return "contains '..'"
    if not _ALLOWED.fullmatch(model_id):
        bad = next((c for c in model_id if not _CHAR.fullmatch(c)), None)
        return f"contains {bad!r}" if bad is not None else f"starts with {model_id[0]!r}"
    return None


def check_model_id(model_id: object, *, origin: str = "model id") -> str:
    """Return ``model_id`` if it is a valid identifier, else raise :class:`InputError` (exit 2).

    ``origin`` says where the id came from (``--model-id``, the registry, ...) for the message.
    """
    problem = model_id_problem(model_id)
    if problem is not None:
        raise InputError(f"{origin} {model_id!r} {problem}; a model id may hold only {RULE}")
    return model_id  # type: ignore[return-value]


def model_id_key(model_id: str) -> str:
    """The form in which two model ids are compared: ids that differ only in case are one id."""
    return model_id.lower()


def case_collision(model_id: str, existing: Iterable[str]) -> str | None:
    """The first id of ``existing`` (sorted) that differs from ``model_id`` only in case, else None."""
    key = model_id_key(model_id)
    return next((m for m in sorted(existing) if m != model_id and model_id_key(m) == key), None)
