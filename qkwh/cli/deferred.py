"""Two rich modules that typer's help formatter imports but the qkwh command line never uses,
imported when something does use them.

``typer.rich_utils`` (what draws every ``--help`` and usage error) starts with
``from rich.markdown import Markdown`` and ``from rich.traceback import Traceback``: markdown-it,
pygments and attrs come with them, about a fifth of the time ``qkwh --help`` takes.  qkwh uses
neither: its help is rich markup, not Markdown, and pretty tracebacks are off.  :func:`defer`
puts a stand-in module in their place before typer imports them: its classes stand for the real
ones, and calling one, reading any other name of the module or an ``isinstance`` check imports
the real module, which then replaces the stand-in (so ``rich.markdown.Markdown(...)`` and
``Console.print_exception()`` work as ever, a few milliseconds later).  A module already
imported is left alone.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

#: module -> the names ``typer.rich_utils`` imports from it
DEFERRED = {"rich.markdown": ("Markdown",), "rich.traceback": ("Traceback",)}


def _real(module: str) -> types.ModuleType:
    """The real ``module``, imported now if only its stand-in is there."""
    found = sys.modules.get(module)
    if isinstance(found, _StandInModule) or found is None:
        sys.modules.pop(module, None)
        return importlib.import_module(module)  # also sets the parent package's attribute
    return found


class _StandInClass(type):
    """The type of a stand-in class: every use goes to the real class of the real module."""

    _module: str

    def real(cls) -> type:
        return getattr(_real(cls._module), cls.__name__)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls.real()(*args, **kwargs)

    def __getattr__(cls, name: str) -> Any:
        return getattr(cls.real(), name)

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls.real())

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, cls.real())


class _StandInModule(types.ModuleType):
    """A module whose names other than the stand-in classes come from the real module."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # import machinery probing (__path__, __spec__ ...)
        return getattr(_real(self.__name__), name)


def defer() -> None:
    """Put the stand-ins of :data:`DEFERRED` in place (a module already imported is left)."""
    for module, names in DEFERRED.items():
        if module in sys.modules:
            continue
        parent_name, _, child = module.rpartition(".")
        parent = importlib.import_module(parent_name)
        stand_in = _StandInModule(module)
        for name in names:
            setattr(stand_in, name, _StandInClass(name, (), {"_module": module}))
        sys.modules[module] = stand_in
        setattr(parent, child, stand_in)
