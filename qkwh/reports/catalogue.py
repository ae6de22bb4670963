"""The figure catalogue: figures and sections are declared by the module that draws them.

A report module declares its section once and each figure beside the function that builds it::

    from qkwh.reports.catalogue import figure, section

    SECTION = section("Reach", order=35)   # the sections' order on a page (see below)

    @figure(
        "reach-forest",
        section=SECTION,
        title="Softmax reach per model",
        caption="Each model's mean reach with its interval.",
        sources=("model_summary", "model_metric_ci"),
    )
    def reach_forest(marts: Marts) -> Drawn: ...

    @figure("reach-profile", section=SECTION, title=..., caption=..., sources=(...),
            per_model=True)
    def reach_profile(marts: Marts, model_id: str) -> Drawn: ...

The decorator returns the function unchanged.  A list of ready :class:`FigureDef` objects can be
declared with :func:`register` instead.  :func:`catalogue` imports every module of the
``qkwh.reports`` package (so a new module there needs no other edit) and returns the figures
in page order: by the order of their section, then by ``order`` (default 0), then in the order
they were declared.

Tests register figures without editing any file: :func:`registered` undoes what its block
declared (figures and sections)::

    with registered():
        section("Toy", order=99)
        figure("toy-metric", section="Toy", title="Toy", caption="A toy.",
               sources=("model_metric_ci",))(lambda marts: chart)
        render(warehouse, out=folder)
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from qkwh.errors import QkwhError
from qkwh.reports.base import FigureDef

_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Section:
    """A section of the report pages: its heading and its place (lower ``order`` first)."""

    name: str
    order: float


_SECTIONS: dict[str, Section] = {}
_FIGURES: dict[str, tuple[int, FigureDef]] = {}  # key -> (declaration number, figure)
_SEQ = [0]
_DISCOVERED = [False]


def section(name: str, order: float) -> str:
    """Declare a section (idempotent); returns ``name`` for the figures' ``section=``."""
    old = _SECTIONS.get(name)
    if old is not None and old.order != order:
        raise ValueError(f"section {name!r} declared twice, with order {old.order} and {order}")
    _SECTIONS[name] = Section(name, order)
    return name


def register(*figures: FigureDef) -> tuple[FigureDef, ...]:
    """Add ready figures to the catalogue (a second declaration of a key replaces the first:
    reloading a module must not fail).  Returns ``figures``."""
    for fig in figures:
        if not fig.key or fig.key != fig.key.strip() or not fig.key.replace("-", "").isalnum():
            raise ValueError(f"figure key {fig.key!r}: use lower-case letters, digits and '-'")
        _SEQ[0] += 1
        seq = _FIGURES[fig.key][0] if fig.key in _FIGURES else _SEQ[0]
        _FIGURES[fig.key] = (seq, fig)
    return figures


def figure(
    key: str,
    *,
    section: str,
    title: str,
    caption: str,
    sources: Sequence[str],
    per_model: bool = False,
    order: float = 0,
) -> Callable[[_F], _F]:
    """Declare the decorated function as the ``build`` of figure ``key``.

    ``build(marts)`` returns an Altair chart or a :class:`~qkwh.reports.base.Drawn` (or raises
    :class:`~qkwh.reports.base.NoData` with a reason); with ``per_model`` it is
    ``build(marts, model_id)``, called once per selected model, and the figure's id is
    ``<key>-<model file name>``.  ``sources`` names the marts it reads (for the figure index).
    """

    def declare(build: _F) -> _F:
        register(FigureDef(key, section, title, caption, tuple(sources), build, per_model, order))
        return build

    return declare


def unregister(*keys: str) -> None:
    for key in keys:
        _FIGURES.pop(key, None)


@contextlib.contextmanager
def registered(*figures: FigureDef) -> Iterator[None]:
    """Within the block, the catalogue also holds ``figures`` and whatever the block declares
    (figures and sections); afterwards it is as before (for tests)."""
    discover()
    figs, secs = dict(_FIGURES), dict(_SECTIONS)
    try:
        register(*figures)
        yield
    finally:
        _FIGURES.clear()
        _FIGURES.update(figs)
        _SECTIONS.clear()
        _SECTIONS.update(secs)


@contextlib.contextmanager
def only(*figures: FigureDef) -> Iterator[None]:
    """Within the block, the catalogue holds exactly ``figures`` (for tests)."""
    with registered():
        _FIGURES.clear()
        register(*figures)
        yield


def discover() -> None:
    """Import every module of ``qkwh.reports`` once (their declarations fill the catalogue)."""
    if _DISCOVERED[0]:
        return
    import qkwh.reports as pkg

    for mod in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{pkg.__name__}.{mod.name}")
    _DISCOVERED[0] = True


def sections() -> tuple[str, ...]:
    """Every declared section, in page order."""
    discover()
    return tuple(s.name for s in sorted(_SECTIONS.values(), key=lambda s: (s.order, s.name)))


def catalogue() -> tuple[FigureDef, ...]:
    """Every declared figure, in page order (section order, then ``order``, then declaration)."""
    discover()
    missing = sorted({f.section for _, f in _FIGURES.values()} - set(_SECTIONS))
    if missing:
        raise QkwhError(
            f"figures name undeclared section(s) {', '.join(map(repr, missing))}: declare each "
            "with qkwh.reports.catalogue.section(name, order=...)"
        )
    rank = {s: i for i, s in enumerate(sections())}
    ordered = sorted(_FIGURES.values(), key=lambda p: (rank[p[1].section], p[1].order, p[0]))
    return tuple(f for _, f in ordered)


def select(wanted: Sequence[str] | None) -> tuple[FigureDef, ...]:
    """The figures named by keys (``pca-taxonomy``), key prefixes (``train``) or sections
    (``Plasticity``); every figure when ``wanted`` is empty."""
    every = catalogue()
    if not wanted:
        return every
    picked: list[FigureDef] = []
    for w in wanted:
        hits = [
            f
            for f in every
            if w.lower() in (f.key, f.section.lower()) or f.key.startswith(w.lower() + "-")
        ]
        if not hits:
            raise QkwhError(
                f"no figure {w!r}; figures: {', '.join(f.key for f in every)}; "
                f"sections: {', '.join(sections())}"
            )
        picked += [f for f in hits if f not in picked]
    return tuple(f for f in every if f in picked)


def replaced(key: str, **changes: Any) -> FigureDef:
    """A copy of figure ``key`` with ``changes`` (e.g. another ``build``), not registered."""
    for f in catalogue():
        if f.key == key:
            return replace(f, **changes)
    raise KeyError(key)
