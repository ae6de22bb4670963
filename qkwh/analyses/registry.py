"""The analysis registry: the single source of what an analysis is.

Every part of qkwh reads the declarations registered here (:class:`Analysis`: name, function,
parameters, tables with their columns, units and descriptions, head-level scalars):

* the run config (:class:`qkwh.params.RunConfig`): its sections, defaults and the one check;
* the warehouse DDL of every analysis table (:func:`qkwh.store.analysis_table_ddl`);
* ``qkwh compute``: what to run per head, which tables to write, delete and resume, and which
  source files enter the code version (:mod:`qkwh.compute`);
* the SQL functions ``qkwh_<name>(head)`` (:mod:`qkwh.udf`);
* the CLI (``compute --analyses``, ``status``, ``models``);
* the generated dbt sources and staging views and the column tables of ``docs/tables.md``
  (:mod:`qkwh.generate`).

The built-in analyses are declared one module each in :mod:`qkwh.analyses.declared` and listed
in :data:`BUILTIN`; code of your own can :func:`register` one at run time.  Pure data: this
module imports no numpy, DuckDB, compute, store or CLI.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from qkwh.analyses.declaration import (  # noqa: F401 (re-exported: the registry's vocabulary)
    CONFIG_COLUMN,
    HEAD_KEY,
    RESERVED_TABLES,
    SHARED,
    Analysis,
    Column,
    ModelMetric,
    Table,
)

#: the modules of :mod:`qkwh.analyses.declared` registered at import, in this order (the order
#: of run-config sections, status columns and dispatch)
BUILTIN: tuple[str, ...] = ("pca", "rotation", "plasticity", "rope", "uncertainty", "reach")

_REGISTRY: dict[str, Analysis] = {}


def register(analysis: Analysis, *, replace: bool = False) -> Analysis:
    """Add ``analysis`` (its tables must not belong to another analysis)."""
    analysis.check()
    if analysis.name in _REGISTRY and not replace:
        raise ValueError(f"analysis {analysis.name!r} is already registered")
    missing = [u for u in analysis.uses if u not in _REGISTRY or u == analysis.name]
    if missing:
        raise ValueError(
            f"analysis {analysis.name}: uses {missing}, which must be registered before it"
        )
    taken = {
        t: a.name for a in _REGISTRY.values() if a.name != analysis.name for t in a.table_names
    }
    clash = [t for t in analysis.table_names if t in taken]
    if clash:
        raise ValueError(f"analysis {analysis.name}: table(s) {clash} belong to {taken[clash[0]]}")
    metric_owner = {
        m.name: a.name for a in _REGISTRY.values() if a.name != analysis.name for m in a.metrics
    }
    clash = [m.name for m in analysis.metrics if m.name in metric_owner]
    if clash:
        raise ValueError(
            f"analysis {analysis.name}: metric(s) {clash} belong to {metric_owner[clash[0]]}"
        )
    _REGISTRY[analysis.name] = analysis
    return analysis


def unregister(name: str) -> None:
    """Remove a registered analysis (its tables and rows stay in any warehouse)."""
    _REGISTRY.pop(name, None)


def names() -> tuple[str, ...]:
    """Registered analysis names, in registration order."""
    return tuple(_REGISTRY)


def default_names() -> tuple[str, ...]:
    """The analyses a run computes when it names none (every registered one not declared opt-in)."""
    return tuple(n for n, a in _REGISTRY.items() if a.default)


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


def tables() -> tuple[Table, ...]:
    """The declarations of every output table of every registered analysis."""
    return tuple(t for a in _REGISTRY.values() for t in a.tables)


def table(name: str) -> Table:
    """The declaration of the output table ``name`` (``KeyError`` when no analysis has it)."""
    for t in tables():
        if t.name == name:
            return t
    raise KeyError(f"no registered analysis writes a table {name!r}")


def model_metrics() -> tuple[tuple[Analysis, ModelMetric], ...]:
    """Every declared model-level metric with its analysis, in registration order."""
    return tuple((a, m) for a in _REGISTRY.values() for m in a.metrics)


def default_params() -> Mapping[str, Any]:
    """analysis -> its default parameters."""
    return {a.name: a.default_params() for a in _REGISTRY.values()}


for _module in BUILTIN:
    register(importlib.import_module(f"qkwh.analyses.declared.{_module}").ANALYSIS)
