"""What an analysis declaration is made of: :class:`Analysis`, :class:`Table`, :class:`Column`,
:class:`ModelMetric`.

Pure data: no numpy, no DuckDB, no import of compute, store or the CLI.  The declarations of the
built-in analyses are in :mod:`qkwh.analyses.declared`; :mod:`qkwh.analyses.registry` holds the
registered ones, and every other part of qkwh reads them from there.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: the columns of the head key every result table starts with, and the run's parameter set
HEAD_KEY: tuple[str, ...] = ("model_id", "layer", "q_head", "k_head")
CONFIG_COLUMN = "config_id"
#: tables and views of the warehouse that no analysis may claim (catalog and bookkeeping)
RESERVED_TABLES = frozenset(
    {
        "models",
        "files",
        "heads",
        "ingest_findings",
        "rope_frequencies",
        "run_config",
        "head_runs",
        "current_config",
        "mart_builds",
        "vectors",
    }
)
#: the per-head precomputations an analysis may ask for in ``Analysis.shared`` (built by
#: :mod:`qkwh.analyses.precompute`, once per head for every analysis that asks)
SHARED: tuple[str, ...] = (
    "query_moments",
    "key_moments",
    "moments",
    "key_layout",
    "key_examples",
)

_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
_TYPE = re.compile(r"[A-Z][A-Z0-9_]*(\[\])?\Z")
_FLOATS = ("DOUBLE", "FLOAT", "REAL")


@dataclass(frozen=True)
class Column:
    """One column of an output table (besides the head key and ``config_id``).

    ``type``: its DuckDB type; ``unit``: ``"1"`` for dimensionless numbers, ``"tokens"``,
    ``"vector units"`` (the units of the stored q/k components), ... or ``""`` for labels and
    flags; ``description``: one line.  ``head_metric``: the dbt mart ``head_metrics`` carries it
    as a head-level scalar.  ``null_as``: the SQL literal the dbt staging view puts in place of
    NULL (default: NULL stays NULL).  ``range``: (min, max) every non-NULL value lies in, checked
    by a dbt test on the staging view; ``not_null``: a dbt test that no value is NULL.
    """

    name: str
    type: str
    unit: str = ""
    description: str = ""
    head_metric: bool = False
    null_as: str | None = None
    range: tuple[float, float] | None = None
    not_null: bool = False

    @property
    def is_float(self) -> bool:
        return self.type in _FLOATS


def _as_column(c: Column | tuple[str, str]) -> Column:
    return c if isinstance(c, Column) else Column(*c)


@dataclass(frozen=True)
class Table:
    """One output table of an analysis.

    ``key``: the columns that identify a row within a head (besides the head and ``config_id``);
    ``()`` means one row per head.  ``columns``: every column besides the head key and
    ``config_id``, in table order (the key columns first; ``(name, type)`` pairs are accepted and
    read as undescribed columns).  ``grain``: what one row is, in words.  ``field``: the name of
    the list field that carries this table's rows in the analysis' SQL function (default: the
    table name); the one-row-per-head table's columns are the function's top-level fields.
    ``staged``: dbt gets a staging view ``stg_<name>`` of it (False for tables of vectors, which
    the reports read directly).
    """

    name: str
    key: tuple[str, ...] = ()
    columns: tuple[Column, ...] = ()
    field: str | None = None
    grain: str = ""
    description: str = ""
    staged: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", tuple(_as_column(c) for c in self.columns))
        object.__setattr__(self, "key", tuple(self.key))

    @property
    def per_head(self) -> bool:
        return not self.key

    @property
    def udf_field(self) -> str:
        return self.field or self.name

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def full_key(self) -> tuple[str, ...]:
        """The columns that identify a row: the head, ``config_id``, then :attr:`key`."""
        return (*HEAD_KEY[:3], CONFIG_COLUMN, *self.key)


#: how a model-level metric is made of its head-level values (docs/metrics/aggregation.md):
#: ``mean`` over the model's heads with a value (0/1 indicators make fractions), ``median``,
#: ``max``, or ``derived``: computed from other model metrics of the same bootstrap replicate by a
#: named rule of the dbt project (``rule``: e.g. ``plasticity_profile``, the decile -> quintile ->
#: first / last 20 % -> drop chain)
AGGREGATIONS: tuple[str, ...] = ("mean", "median", "max", "derived")
#: the derivation rules the dbt project implements for ``agg="derived"`` metrics
DERIVED_RULES: tuple[str, ...] = (
    "plasticity_profile",
    "gauss_gap",
    "bias_strength_ctx",
    "rope_profile",
)
#: the dbt relation the built-in head-level expressions read (one row per analysed head)
HEAD_METRICS = "head_metrics"


@dataclass(frozen=True)
class ModelMetric:
    """One model-level metric: a head-level value aggregated over a model's heads, with a
    layer-cluster bootstrap interval in ``model_metric_ci``.

    ``name``: the metric (a ``model_metric_ci.metric`` value); ``expr``: the SQL expression of its
    head-level value over the columns of ``source`` (default: the metric's own name; ignored for
    ``agg="derived"``); ``agg``: one of :data:`AGGREGATIONS`; ``source``: the dbt relation with
    one row per head that ``expr`` reads, ``""`` = the staging view of the analysis's one-row-
    per-head table, or the name of one of its tables (its staging view ``stg_<table>``), or any
    model of the dbt project (e.g. ``head_metrics``); ``where``: an SQL condition on ``source``
    that picks the metric's rows (e.g. ``pc = 0``); ``rule``: for ``agg="derived"``, the
    derivation rule (one of :data:`DERIVED_RULES`); ``unit``, ``description``: as
    :class:`Column`; ``group``: the metric group of ``model_metric_ci.metric_group`` (default: the
    analysis name); ``compared``: compared between models (``model_comparisons``) and datasets
    (``dataset_comparisons``) and in ``qkwh compare``; ``documents``: gets a document-level term
    (``se_documents``) from the document jackknife; ``facets``: extra string attributes the dbt models read (e.g. a RoPE
    metric's band and variant).  ``per_taxonomy_class``: one metric per class of the dbt var
    ``taxonomy_classes``; ``{class}`` in ``name`` and ``expr`` is replaced by the class.
    """

    name: str
    expr: str = ""
    agg: str = "mean"
    source: str = ""
    where: str = ""
    rule: str = ""
    unit: str = "1"
    description: str = ""
    group: str = ""
    compared: bool = False
    documents: bool = False
    facets: tuple[tuple[str, str | int], ...] = ()
    per_taxonomy_class: bool = False

    @property
    def expression(self) -> str:
        return self.expr or self.name

    def check(self, analysis: str) -> None:
        name = self.name.replace("{class}", "class") if self.per_taxonomy_class else self.name
        if not _NAME.match(name.lower()):
            raise ValueError(
                f"analysis {analysis}: metric name {self.name!r}: use letters, digits, '_'"
            )
        if self.agg not in AGGREGATIONS:
            raise ValueError(
                f"analysis {analysis}: metric {self.name}: agg {self.agg!r} is not one of "
                f"{', '.join(AGGREGATIONS)}"
            )
        if (self.agg == "derived") != bool(self.rule):
            raise ValueError(
                f"analysis {analysis}: metric {self.name}: a derived metric names its rule "
                f"(one of {', '.join(DERIVED_RULES)}), and only a derived one"
            )
        if self.rule and self.rule not in DERIVED_RULES:
            raise ValueError(
                f"analysis {analysis}: metric {self.name}: unknown rule {self.rule!r}; "
                f"known: {', '.join(DERIVED_RULES)}"
            )
        if "'" in self.name or "{{" in self.expression or "{{" in self.where:
            raise ValueError(
                f"analysis {analysis}: metric {self.name}: no quotes or Jinja in names"
            )


@dataclass(frozen=True)
class Analysis:
    """The declaration of one analysis.

    ``run``: its pure function ``run(head, params, *, seed, shared)``, as ``"module:function"``
    (so the declaration imports nothing; compute resolves it) or as the callable itself;
    ``params``: its parameter class, a frozen dataclass whose defaults are the analysis's
    defaults; ``tables``: its output tables (at most one with one row per head); ``shared``:
    the per-head precomputations it reads (names of :data:`SHARED`); ``code``: extra source
    files (absolute paths) hashed into its code version; ``title``: one line for the docs;
    ``doc``: its page under ``docs/metrics/`` (empty when it has none); ``uses``: other
    analyses whose parameters it reads (registered before it). Their sections enter its
    parameter fingerprint and its ``run_config`` row, and its function receives them as
    ``run(head, params, *, seed, shared, uses)`` with ``uses`` = {name: parameter object}
    (the keyword is passed only to an analysis that declares ``uses``); ``default``: computed
    when a run names no analyses (False: opt-in, run only when asked for by name);
    ``metrics``: its model-level metrics (:class:`ModelMetric`), aggregated over heads with
    bootstrap intervals in ``model_metric_ci`` (``python -m qkwh.generate`` writes them into the
    dbt metric catalogue).
    """

    name: str
    run: str | Callable[..., Any]
    params: type
    tables: tuple[Table, ...]
    shared: tuple[str, ...] = ()
    code: tuple[str, ...] = ()
    title: str = ""
    doc: str = ""
    uses: tuple[str, ...] = ()
    default: bool = True
    metrics: tuple[ModelMetric, ...] = ()

    @property
    def table_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tables)

    @property
    def udf_name(self) -> str:
        return f"qkwh_{self.name}"

    @property
    def head_table(self) -> Table | None:
        """The table with one row per head (None when it has none)."""
        return next((t for t in self.tables if t.per_head), None)

    @property
    def head_metrics(self) -> tuple[str, ...]:
        """Columns of its tables that the mart ``head_metrics`` carries as head-level scalars."""
        return tuple(c.name for t in self.tables for c in t.columns if c.head_metric)

    def metric_source(self, metric: ModelMetric) -> str:
        """The dbt relation ``metric``'s expression reads (see :class:`ModelMetric`)."""
        if not metric.source:
            head = self.head_table
            if head is None:
                raise ValueError(
                    f"analysis {self.name}: metric {metric.name} names no source and the "
                    "analysis has no one-row-per-head table"
                )
            return f"stg_{head.name}"
        if metric.source in self.table_names:
            return f"stg_{metric.source}"
        return metric.source

    def default_params(self) -> Any:
        return self.params()

    def check(self) -> None:
        """Refuse a declaration the rest of qkwh could not use (raises ``ValueError``)."""
        if not _NAME.match(self.name):
            raise ValueError(f"analysis name {self.name!r}: use lower-case letters, digits and '_'")
        if not (dataclasses.is_dataclass(self.params) and isinstance(self.params, type)):
            raise ValueError(f"analysis {self.name}: params must be a dataclass type")
        if not (callable(self.run) or (isinstance(self.run, str) and ":" in self.run)):
            raise ValueError(f"analysis {self.name}: run must be a function or 'module:function'")
        if not self.tables:
            raise ValueError(f"analysis {self.name}: declares no output table")
        if sum(t.per_head for t in self.tables) > 1:
            raise ValueError(f"analysis {self.name}: at most one table may have one row per head")
        unknown = [s for s in self.shared if s not in SHARED]
        if unknown:
            raise ValueError(
                f"analysis {self.name}: unknown shared precomputation(s) {unknown}; "
                f"known: {', '.join(SHARED)}"
            )
        if self.name in self.uses or len(set(self.uses)) != len(self.uses):
            raise ValueError(f"analysis {self.name}: uses must name other analyses, once each")
        metric_names = [m.name for m in self.metrics]
        if len(set(metric_names)) != len(metric_names):
            raise ValueError(f"analysis {self.name}: a model-level metric is declared twice")
        for m in self.metrics:
            m.check(self.name)
            if m.agg != "derived":
                self.metric_source(m)
        fields = [t.udf_field for t in self.tables if not t.per_head]
        if len(set(fields)) != len(fields):
            raise ValueError(f"analysis {self.name}: two tables share the SQL field name")
        reserved = set(HEAD_KEY) | {CONFIG_COLUMN}
        for t in self.tables:
            if not _NAME.match(t.name):
                raise ValueError(
                    f"analysis {self.name}: table name {t.name!r}: use lower-case letters, digits, '_'"
                )
            if t.name in RESERVED_TABLES:
                raise ValueError(f"analysis {self.name}: table {t.name} is one of qkwh's own")
            if not t.columns:
                raise ValueError(f"table {t.name}: declares no column")
            names = t.column_names
            if reserved & set(names):
                raise ValueError(
                    f"table {t.name}: columns {sorted(reserved & set(names))} are added by qkwh"
                )
            if len(set(names)) != len(names):
                raise ValueError(f"table {t.name}: a column is declared twice")
            if not set(t.key) <= set(names):
                raise ValueError(
                    f"table {t.name}: key column(s) {sorted(set(t.key) - set(names))} not declared"
                )
            for c in t.columns:
                if not _NAME.match(c.name.lower()) or not _TYPE.match(c.type):
                    raise ValueError(
                        f"table {t.name}: bad column declaration {c.name!r} {c.type!r}"
                    )
                if c.null_as is not None and not re.fullmatch(
                    r"true|false|-?[0-9.]+|'[a-z_]*'", c.null_as
                ):
                    raise ValueError(
                        f"table {t.name}: column {c.name}: null_as must be a plain SQL literal"
                    )
