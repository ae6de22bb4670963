"""Parameter values without pydantic: the plain cases of typer's coercion, done directly.

typer (0.2x) turns every parameter value of a command, the defaults and an unset ``None``
included, into its Python type through a pydantic ``TypeAdapter``.  Importing pydantic and
building the adapters costs more than a tenth of a second, which every command would pay before
it starts.  The qkwh commands only take plain values (``str``, ``int``, ``float``, ``bool``,
``Path``, enums and lists of them, none with bounds, parsers or path checks beyond typer's
defaults), whose conversion is unambiguous; :class:`QuickValue` converts those itself and hands
everything else to typer's own coercion, unchanged: a value it cannot convert with certainty
(``--workers 1e3``, an unknown ``--format``, a path typer would refuse) takes typer's path, so
the result and every error message are typer's.  tests/cli/test_coercion.py checks the two
agree on every parameter of every command.

:func:`install` puts it on the parameters of a command when click asks for them; with a typer
that has no such coercion (before 0.2x) it does nothing.
"""

from __future__ import annotations

import os
import re
from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin

#: the result when the quick way does not apply: typer's coercion decides
SLOW = object()

_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")
_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]{0,14})(?:\.[0-9]{1,15})?")


def _plain(info: Any) -> bool:
    """``info`` (a typer ParameterInfo) asks for nothing beyond the type: no parser, bounds, file
    or path checks."""
    return (
        getattr(info, "parser", None) is None
        and getattr(info, "click_type", None) is None
        and getattr(info, "min", None) is None
        and getattr(info, "max", None) is None
        and not getattr(info, "clamp", False)
        and not getattr(info, "exists", False)
        and getattr(info, "file_okay", True)
        and getattr(info, "dir_okay", True)
        and not getattr(info, "writable", False)
        and not getattr(info, "resolve_path", False)
        and not getattr(info, "allow_dash", False)
        and getattr(info, "path_type", None) is None
    )


def _leaf(annotation: Any, value: Any, info: Any) -> Any:
    """One value of type ``annotation``, or :data:`SLOW`."""
    kind = type(value)
    if annotation is str:
        return value if kind is str else SLOW
    if annotation is bool:
        return value if kind is bool else SLOW
    if annotation is int:
        if kind is int:
            return value
        return int(value) if kind is str and _INT.fullmatch(value) else SLOW
    if annotation is float:
        if kind is float:
            return value
        if kind is int:
            return float(value)
        return float(value) if kind is str and _FLOAT.fullmatch(value) else SLOW
    if annotation is Path:
        if kind is str and value:
            value = Path(value)
        if not isinstance(value, Path):
            return SLOW
        # typer's checks on a path (a file that exists must be readable): when one fails, typer
        # says so in its own words
        if info.readable and os.path.exists(value) and not os.access(value, os.R_OK):
            return SLOW
        return value
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        if isinstance(value, annotation):
            return value
        if kind is str and info.case_sensitive:
            for member in annotation:
                if member.value == value:
                    return member
        return SLOW
    return SLOW


def quick(descriptor: Any, value: Any) -> Any:
    """``value`` as typer would coerce it for a parameter of ``descriptor`` (a typer
    TypeDescriptor), or :data:`SLOW` when that is not certain."""
    info = descriptor.parameter_info
    if descriptor.file_annotation is not None or not _plain(info):
        return SLOW
    annotation = descriptor.annotation
    if get_origin(annotation) is list:
        (item,) = get_args(annotation) or (None,)
        if not isinstance(value, (list, tuple)):
            return SLOW
        items = [_leaf(item, v, info) for v in value]
        return SLOW if any(v is SLOW for v in items) else items
    if get_origin(annotation) is not None:
        return SLOW
    return _leaf(annotation, value, info)


class QuickValue:
    """A typer runtime parameter: :func:`quick` first, typer's own coercion when it declines."""

    def __init__(self, descriptor: Any):
        self.descriptor = descriptor
        self._typer: Any = None

    def typer_param(self) -> Any:
        """typer's own runtime parameter (built on first use: it imports pydantic)."""
        if self._typer is None:
            from typer._coercion import build_runtime_param

            self._typer = build_runtime_param(self.descriptor)
        return self._typer

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        multi = param.multiple or param.nargs == -1
        if value is None:  # what typer returns for a value not given
            return () if multi else None
        if not (multi and isinstance(value, str)) and ctx.token_normalize_func is None:
            rv = quick(self.descriptor, value)
            if rv is not SLOW:
                return rv
        return self.typer_param().coerce(value, param=param, ctx=ctx)


def install(params: list) -> list:
    """``params`` with :class:`QuickValue` as the coercion of each typer parameter that has none
    yet (nothing changes with a typer without runtime coercion)."""
    for p in params:
        if getattr(p, "_runtime_param", 0) is None and hasattr(p, "type_descriptor"):
            p._runtime_param = QuickValue(p.type_descriptor)
    return params
