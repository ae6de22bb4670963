"""The compute side of the analysis declarations: shared per-head precomputations and dispatch.

The declarations themselves (name, parameters, tables, columns) are data in
:mod:`qkwh.analyses.registry`.  Here:

* :data:`PRECOMPUTE` -- the per-head precomputations an analysis may ask for in
  ``Analysis.shared`` (the names of :data:`qkwh.analyses.declaration.SHARED`), each built once per
  head for every analysis that uses it (:func:`precompute`), the key-side ones once per GQA group
  (:class:`KeyCache`);
* :func:`run_function` -- the analysis's function, resolved from its ``"module:function"``;
* :func:`code_files` -- the source files hashed into its code version.

An analysis function has the signature ``run(head, params, *, seed, shared)``:

* ``head`` -- a :class:`~qkwh.analyses.types.HeadData` (the same builder feeds the bulk path and
  the SQL functions);
* ``params`` -- an instance of the declared parameter class;
* ``seed`` -- the run's base seed;
* ``shared`` -- the precomputations it declared, by name;

and it returns an :class:`~qkwh.analyses.types.AnalysisResult` whose tables are among the
declared ones.  No I/O and no DuckDB here.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from qkwh.analyses.declaration import SHARED, Analysis
from qkwh.analyses.types import AnalysisResult, HeadData

# ---------------------------------------------------------------------------------------------
# per-head precomputation shared by several analyses
# ---------------------------------------------------------------------------------------------


def _query_moments(head: HeadData, shared: Mapping[str, Any]) -> Any:
    """The queries in bucket order with per-bucket moments (:func:`qkwh.analyses.stats.query_moments`)."""
    from qkwh.analyses import stats

    return stats.query_moments(head.q, head.q_pos, head.q_bucket)


def _key_moments(head: HeadData, shared: Mapping[str, Any]) -> Any:
    """The key rows as float64, centred, with their moments (:func:`qkwh.analyses.stats.key_moments`),
    after the checks of the head moments built on them (a head they cannot serve fails here, with
    the same message)."""
    from qkwh.analyses import stats

    stats.validate_head(head)
    return stats.key_moments(head.k, head.k_pos)


def _moments(head: HeadData, shared: Mapping[str, Any]) -> Any:
    """Float64 copies and first/second moments of the head (:func:`qkwh.analyses.stats.head_moments`),
    built on the shared query and key moments."""
    from qkwh.analyses import stats

    return stats.head_moments(head, query=shared["query_moments"], keys=shared["key_moments"])


def _key_layout(head: HeadData, shared: Mapping[str, Any]) -> Any:
    """The keys sorted by example and position, with their orientation signs
    (:func:`qkwh.analyses.plasticity.key_layout`)."""
    from qkwh.analyses import plasticity

    return plasticity.head_key_layout(head)


def _key_examples(head: HeadData, shared: Mapping[str, Any]) -> Any:
    """The key rows as float64 grouped by example, each example's rows in file order
    (:func:`qkwh.analyses.reach.key_examples`)."""
    from qkwh.analyses import reach

    return reach.key_examples(head)


#: name -> builder(head, shared so far): computed once per head when any analysis to run declares
#: it in ``Analysis.shared`` (or needs it through :data:`PRECOMPUTE_NEEDS`), in this order, then
#: handed to each of them in ``shared[name]``
PRECOMPUTE: dict[str, Callable[[HeadData, Mapping[str, Any]], Any]] = {
    "query_moments": _query_moments,  # used by plasticity, and by "moments"
    "key_moments": _key_moments,  # used by "moments"
    "moments": _moments,  # used by PCA and rotation
    "key_layout": _key_layout,  # used by plasticity
    "key_examples": _key_examples,  # used by reach
}
#: name -> the precomputations its builder reads (each listed before it in PRECOMPUTE)
PRECOMPUTE_NEEDS: dict[str, tuple[str, ...]] = {"moments": ("query_moments", "key_moments")}
#: the precomputations built from the head's key rows alone (``k``, ``k_pos``, ``k_example``,
#: ``k_bucket``): heads built on the same key arrays (the query heads of one GQA group, read from
#: one k file) share them too, through a :class:`KeyCache`.  What their builders return depends
#: on the key rows alone (they may check the whole head first, and read no precomputation
#: outside this set).
KEY_SCOPE: frozenset[str] = frozenset({"key_moments", "key_layout", "key_examples"})


class KeyCache:
    """The :data:`KEY_SCOPE` precomputations of the last head, for the next head with the same keys.

    A caller that analyses several heads built on the very same key arrays (the query heads of one
    GQA group, built from one read of the k file) hands one cache to :func:`precompute` for each of
    them: the key precomputations are then built for the first head only.  "The same" means the
    same array objects; the cache holds them, so they cannot be freed and their identity reused
    while it lives.  A head with other key arrays empties it.
    """

    def __init__(self) -> None:
        self._rows: tuple[Any, ...] | None = None
        self._built: dict[str, Any] = {}

    def get(self, head: HeadData, name: str, shared: Mapping[str, Any]) -> Any:
        """The precomputation ``name`` of ``head``: the cached one if built on the same key arrays,
        else ``PRECOMPUTE[name](head, shared)``."""
        rows = (head.k, head.k_pos, head.k_example, head.k_bucket)
        if self._rows is None or any(a is not b for a, b in zip(self._rows, rows)):
            self._rows, self._built = rows, {}
        if name not in self._built:
            self._built[name] = PRECOMPUTE[name](head, shared)
        return self._built[name]


def precompute(
    head: HeadData, analyses: tuple[Analysis, ...], *, keys: KeyCache | None = None
) -> dict[str, Any]:
    """The shared precomputations that ``analyses`` declared, each built once for ``head``.

    ``keys``: where the :data:`KEY_SCOPE` precomputations come from when given (see
    :class:`KeyCache`); without it every precomputation is built for this head.
    """
    wanted = {name for a in analyses for name in a.shared}
    for name in reversed(PRECOMPUTE):  # what a builder needs comes before it in PRECOMPUTE
        if name in wanted:
            wanted.update(PRECOMPUTE_NEEDS.get(name, ()))
    shared: dict[str, Any] = {}
    for name, build in PRECOMPUTE.items():
        if name not in wanted:
            continue
        if keys is not None and name in KEY_SCOPE:
            shared[name] = keys.get(head, name, shared)
        else:
            shared[name] = build(head, shared)
    return shared


if tuple(PRECOMPUTE) != SHARED:  # pragma: no cover - the declarations name what is built here
    raise ImportError("qkwh.analyses.declaration.SHARED must list the keys of PRECOMPUTE")


@functools.cache
def _resolve(ref: str) -> Callable[..., AnalysisResult]:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def run_function(analysis: Analysis) -> Callable[..., AnalysisResult]:
    """The function of ``analysis`` (imported on first use when declared as ``"module:function"``)."""
    return _resolve(analysis.run) if isinstance(analysis.run, str) else analysis.run


def _source_file(analysis: Analysis) -> str | None:
    """The source file of the analysis's function.  A ``"module:function"`` reference is located
    without importing the module (importing it would pull in its dependencies, SciPy's among them,
    on every command that only fingerprints the analyses, such as a compute with nothing to do)."""
    if isinstance(analysis.run, str):
        module = analysis.run.partition(":")[0]
        # the package's own modules: each defines the function it names (the package's
        # analysis code is hashed whole anyway); elsewhere the function may be re-exported
        if module.startswith("qkwh.") and module not in sys.modules:
            spec = importlib.util.find_spec(module)
            if spec is not None and spec.origin and spec.origin.endswith(".py"):
                return spec.origin
    return inspect.getsourcefile(run_function(analysis))


def code_files(analysis: Analysis) -> tuple[Path, ...]:
    """The source of its function's module plus its declared extra files."""
    files = [Path(p) for p in analysis.code]
    src = _source_file(analysis)
    if src:
        files.insert(0, Path(src))
    return tuple(dict.fromkeys(p.resolve() for p in files))
