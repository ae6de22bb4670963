"""The analysis registry: one declaration per analysis, read by everything that runs or stores one.

An :class:`Analysis` names the analysis, its pure function, its parameter class and its output
tables.  From these declarations

* the run config (:class:`qkwh.params.RunConfig`) knows which parameter sections exist, their
  defaults and how to validate them (YAML sections and ``--param name.key=value``);
* ``qkwh compute`` knows what to run per head (:func:`qkwh.compute.work.run_analyses`), which
  tables to write, delete and resume (:mod:`qkwh.compute.writer`, :mod:`qkwh.store`) and which
  source files enter the code version (:func:`qkwh.compute.units.code_version`);
* :mod:`qkwh.udf` builds one SQL function per analysis, ``qkwh_<name>(head)``;
* the CLI lists the analyses of ``qkwh compute --analyses``.

Adding an analysis is one :func:`register` call (the built-in ones are declared at the bottom of
this module).  Its function has the signature ``run(head, params, *, seed, shared)``:

* ``head`` -- a :class:`~qkwh.analyses.types.HeadData` (the same builder feeds the bulk path and
  the SQL functions);
* ``params`` -- an instance of the declared parameter class (a frozen dataclass; an empty one
  when the analysis has no parameters);
* ``seed`` -- the run's base seed;
* ``shared`` -- the per-head precomputations the analysis declared in ``Analysis.shared``
  (names of :data:`PRECOMPUTE`), each computed once per head for every analysis that uses it;

and it returns an :class:`~qkwh.analyses.types.AnalysisResult` whose tables are among the
declared ones.  Tables of the built-in analyses are defined in ``warehouse/schema.sql``; a table
declared with ``columns`` is created from the declaration (``qkwh/sql/analysis_table.sql``)
whenever the warehouse is opened for writing.

Pure data and dispatch: no I/O and no DuckDB here.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qkwh.analyses.types import AnalysisResult, HeadData
from qkwh.params import PCAParams, PlasticityParams, RotationParams

#: the columns of the head key every result table starts with, and the run's parameter set
HEAD_KEY: tuple[str, ...] = ("model_id", "layer", "q_head", "k_head")
CONFIG_COLUMN = "config_id"
#: tables and views of the warehouse that no analysis may claim (catalog and bookkeeping)
RESERVED_TABLES = frozenset({"models", "files", "heads", "ingest_findings", "run_config", "head_runs",
                             "current_config", "vectors"})

_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")


@dataclass(frozen=True)
class Table:
    """One output table of an analysis.

    ``key``: the columns that identify a row within a head (besides model_id, layer, q_head);
    ``()`` means one row per head.  ``columns``: ``(name, SQL type)`` of every column besides
    the head key and ``config_id``, for a table the registry creates; leave it empty for a table
    defined in ``warehouse/schema.sql``.  ``field``: the name of the list field that carries this
    table's rows in the analysis' SQL function (default: the table name); the one-row-per-head
    table's columns are the function's top-level fields instead.
    """

    name: str
    key: tuple[str, ...] = ()
    columns: tuple[tuple[str, str], ...] = ()
    field: str | None = None

    @property
    def per_head(self) -> bool:
        return not self.key

    @property
    def udf_field(self) -> str:
        return self.field or self.name


@dataclass(frozen=True)
class Analysis:
    """The declaration of one analysis (see the module docstring for the function's contract)."""

    name: str
    run: Callable[..., AnalysisResult]
    params: type
    tables: tuple[Table, ...]
    shared: tuple[str, ...] = ()  # per-head precomputations it reads (keys of PRECOMPUTE)
    code: tuple[str, ...] = ()  # extra source files (absolute paths) hashed into its code version

    @property
    def table_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tables)

    @property
    def udf_name(self) -> str:
        return f"qkwh_{self.name}"

    def default_params(self) -> Any:
        return self.params()

    def code_files(self) -> tuple[Path, ...]:
        """The source of its function's module plus the declared extra files."""
        files = [Path(p) for p in self.code]
        src = inspect.getsourcefile(self.run)
        if src:
            files.insert(0, Path(src))
        return tuple(dict.fromkeys(p.resolve() for p in files))

    def check(self) -> None:
        """Refuse a declaration the rest of qkwh could not use (raises ``ValueError``)."""
        if not _NAME.match(self.name):
            raise ValueError(f"analysis name {self.name!r}: use lower-case letters, digits and '_'")
        if not (dataclasses.is_dataclass(self.params) and isinstance(self.params, type)):
            raise ValueError(f"analysis {self.name}: params must be a dataclass type")
        if not self.tables:
            raise ValueError(f"analysis {self.name}: declares no output table")
        if sum(t.per_head for t in self.tables) > 1:
            raise ValueError(f"analysis {self.name}: at most one table may have one row per head")
        unknown = [s for s in self.shared if s not in PRECOMPUTE]
        if unknown:
            raise ValueError(f"analysis {self.name}: unknown shared precomputation(s) {unknown}; "
                             f"known: {', '.join(PRECOMPUTE)}")
        fields = [t.udf_field for t in self.tables if not t.per_head]
        if len(set(fields)) != len(fields):
            raise ValueError(f"analysis {self.name}: two tables share the SQL field name")
        reserved = set(HEAD_KEY) | {CONFIG_COLUMN}
        for t in self.tables:
            if not _NAME.match(t.name):
                raise ValueError(f"analysis {self.name}: table name {t.name!r}: use lower-case letters, digits, '_'")
            if t.name in RESERVED_TABLES:
                raise ValueError(f"analysis {self.name}: table {t.name} is one of qkwh's own")
            names = [c for c, _ in t.columns]
            if reserved & set(names):
                raise ValueError(f"table {t.name}: columns {sorted(reserved & set(names))} are added by qkwh")
            if t.columns and not set(t.key) <= set(names):
                raise ValueError(f"table {t.name}: key column(s) {sorted(set(t.key) - set(names))} not declared")
            for c, sql_type in t.columns:
                if not _NAME.match(c.lower()) or not re.fullmatch(r"[A-Z][A-Z0-9_]*(\[\])?", sql_type):
                    raise ValueError(f"table {t.name}: bad column declaration {c!r} {sql_type!r}")


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


#: name -> builder(head, shared so far): computed once per head when any analysis to run declares
#: it in ``Analysis.shared`` (or needs it through :data:`PRECOMPUTE_NEEDS`), in this order, then
#: handed to each of them in ``shared[name]``
PRECOMPUTE: dict[str, Callable[[HeadData, Mapping[str, Any]], Any]] = {
    "query_moments": _query_moments,  # used by plasticity, and by "moments"
    "key_moments": _key_moments,  # used by "moments"
    "moments": _moments,  # used by PCA and rotation
    "key_layout": _key_layout,  # used by plasticity
}
#: name -> the precomputations its builder reads (each listed before it in PRECOMPUTE)
PRECOMPUTE_NEEDS: dict[str, tuple[str, ...]] = {"moments": ("query_moments", "key_moments")}
#: the precomputations built from the head's key rows alone (``k``, ``k_pos``, ``k_example``,
#: ``k_bucket``): heads built on the same key arrays (the query heads of one GQA group, read from
#: one k file) share them too, through a :class:`KeyCache`.  What their builders return depends
#: on the key rows alone (they may check the whole head first, and read no precomputation
#: outside this set).
KEY_SCOPE: frozenset[str] = frozenset({"key_moments", "key_layout"})


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


def precompute(head: HeadData, analyses: tuple[Analysis, ...], *, keys: KeyCache | None = None) -> dict[str, Any]:
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


# ---------------------------------------------------------------------------------------------
# the registry
# ---------------------------------------------------------------------------------------------

_REGISTRY: dict[str, Analysis] = {}


def register(analysis: Analysis, *, replace: bool = False) -> Analysis:
    """Add ``analysis`` (its tables must not belong to another analysis)."""
    analysis.check()
    if analysis.name in _REGISTRY and not replace:
        raise ValueError(f"analysis {analysis.name!r} is already registered")
    taken = {t: a.name for a in _REGISTRY.values() if a.name != analysis.name for t in a.table_names}
    clash = [t for t in analysis.table_names if t in taken]
    if clash:
        raise ValueError(f"analysis {analysis.name}: table(s) {clash} belong to {taken[clash[0]]}")
    _REGISTRY[analysis.name] = analysis
    return analysis


def unregister(name: str) -> None:
    """Remove a registered analysis (its tables and rows stay in any warehouse)."""
    _REGISTRY.pop(name, None)


def names() -> tuple[str, ...]:
    """Registered analysis names, in registration order."""
    return tuple(_REGISTRY)


def analyses() -> tuple[Analysis, ...]:
    return tuple(_REGISTRY.values())


def get(name: str) -> Analysis:
    """The declaration of ``name``; ``KeyError`` with the known names otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown analysis {name!r}; choose from {', '.join(_REGISTRY)}") from None


def analysis_tables() -> dict[str, tuple[str, ...]]:
    """analysis -> the names of its output tables."""
    return {a.name: a.table_names for a in _REGISTRY.values()}


def result_tables() -> tuple[str, ...]:
    """Every output table of every registered analysis."""
    return tuple(t for a in _REGISTRY.values() for t in a.table_names)


def declared_tables() -> tuple[Table, ...]:
    """Tables the registry creates (declared with columns), as opposed to warehouse/schema.sql."""
    return tuple(t for a in _REGISTRY.values() for t in a.tables if t.columns)


def default_params() -> Mapping[str, Any]:
    """analysis -> its default parameters."""
    return {a.name: a.default_params() for a in _REGISTRY.values()}


# ---------------------------------------------------------------------------------------------
# the built-in analyses (docs/metrics/); their modules are imported when first run, so reading
# the registry (the store, the CLI) does not load numpy's and scipy's linear algebra
# ---------------------------------------------------------------------------------------------


def _run_pca(head: HeadData, params: PCAParams, *, seed: int, shared: Mapping[str, Any]) -> AnalysisResult:
    from qkwh.analyses import pca

    return pca.analyse(head, params, moments=shared.get("moments"))


def _run_rotation(head: HeadData, params: RotationParams, *, seed: int, shared: Mapping[str, Any]) -> AnalysisResult:
    from qkwh.analyses import rotation

    return rotation.analyse(head, params, moments=shared.get("moments"))


def _run_plasticity(head: HeadData, params: PlasticityParams, *, seed: int,
                    shared: Mapping[str, Any]) -> AnalysisResult:
    from qkwh.analyses import plasticity

    return plasticity.analyse(head, params, seed=seed, moments=shared.get("query_moments"),
                              keys=shared.get("key_layout"))


register(Analysis(
    name="pca", run=_run_pca, params=PCAParams, shared=("moments",),
    tables=(Table("pca_heads"), Table("pca_components", key=("pc",), field="components"),
            Table("pca_axes", key=("axis",), field="axes")),
))
register(Analysis(
    name="rotation", run=_run_rotation, params=RotationParams, shared=("moments",),
    tables=(Table("rotation_heads"), Table("rotation_pairs", key=("pair",), field="pairs"),
            Table("rotation_axes", key=("axis",), field="axes")),
))
register(Analysis(
    name="plasticity", run=_run_plasticity, params=PlasticityParams, shared=("query_moments", "key_layout"),
    tables=(Table("plasticity_heads"), Table("plasticity_buckets", key=("q_bucket",), field="buckets"),
            Table("plasticity_heatmap", key=("q_bucket", "dx_bin", "dm_bin"), field="heatmap"),
            Table("plasticity_components", key=("component",), field="components")),
))
