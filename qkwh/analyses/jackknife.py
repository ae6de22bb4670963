"""Document-group jackknife of one head (docs/metrics/jackknife.md): the analysis ``uncertainty``.

The examples of a head are split into G document groups by ``example_id mod G``.  For each group
g the analyses this one ``uses`` (PCA, rotation, plasticity) are rerun by their own registered
functions, with the run's parameters and seed, on the head without the group's rows (queries and
keys alike), and two tables keep what the marts aggregate:

* ``plasticity_buckets_jackknife``: per query bucket and group, plasticity's ``n_queries``,
  ``bucket_position``, ``ap_bucket``, ``ap_bucket_empirical`` and ``n_pairs`` without the group;
* ``head_jackknife``: per group, every numeric head-level scalar of the used analyses that the
  ``head_metrics`` mart carries (the columns their declarations mark ``head_metric``).

A group with no rows in the head is one row per table (``q_bucket = -1`` / ``metric = 'no_rows'``)
with NULL values.  A group whose removal leaves too little for an analysis (its function raises)
gets NULL values for that analysis's outputs; the head does not fail.  Nothing is stored per pair.

Pure numpy: the groups are removed from the rows the head was given (after the run's row cap).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from qkwh.analyses import precompute, registry
from qkwh.analyses.declaration import Analysis
from qkwh.analyses.declared.uncertainty import (
    NO_ROWS_BUCKET,
    NO_ROWS_METRIC,
    UncertaintyParams,
)
from qkwh.analyses.types import AnalysisResult, HeadData

BUCKETS = "plasticity_buckets_jackknife"
METRICS = "head_jackknife"
#: the plasticity_buckets columns carried over, as they are
BUCKET_COLUMNS = ("n_queries", "bucket_position", "ap_bucket", "ap_bucket_empirical", "n_pairs")
_NUMERIC = ("DOUBLE", "FLOAT", "REAL", "INTEGER", "BIGINT", "SMALLINT", "TINYINT", "HUGEINT")


def document_group(example_id: np.ndarray, groups: int) -> np.ndarray:
    """The document group of each example id: ``example_id mod groups`` (ids are >= 0)."""
    return np.mod(np.asarray(example_id, dtype=np.int64), int(groups))


def without_group(head: HeadData, group: int, groups: int) -> HeadData:
    """``head`` without the query and key rows of document group ``group`` (row order kept)."""
    keep_q = document_group(head.q_example, groups) != group
    keep_k = document_group(head.k_example, groups) != group
    return head.select(keep_q, keep_k)


def metric_columns(analysis: Analysis) -> tuple[str, ...]:
    """The numeric head-level scalars of ``analysis`` that ``head_metrics`` carries."""
    table = analysis.head_table
    if table is None:
        return ()
    return tuple(c.name for c in table.columns if c.head_metric and c.type in _NUMERIC)


def rerun(
    head: HeadData,
    analyses: tuple[Analysis, ...],
    params: Mapping[str, Any],
    *,
    seed: int,
) -> dict[str, AnalysisResult | None]:
    """Each of ``analyses`` on ``head`` by its own function (None where it raises), with the
    shared precomputations it declares built by compute's own builders (the key-side ones once)."""
    keys = precompute.KeyCache()  # the key-side precomputations, built once for all of them
    out: dict[str, AnalysisResult | None] = {}
    for a in analyses:
        try:
            shared = precompute.precompute(head, (a,), keys=keys)
            extra = {"uses": {u: params[u] for u in a.uses}} if a.uses else {}
            out[a.name] = precompute.run_function(a)(
                head, params[a.name], seed=seed, shared=shared, **extra
            )
        except (ValueError, ArithmeticError):  # numpy's LinAlgError is a ValueError
            out[a.name] = None  # too little data left for this analysis
    return out


def analyse(
    head: HeadData,
    params: UncertaintyParams,
    *,
    seed: int,
    uses: Mapping[str, Any],
) -> AnalysisResult:
    """Leave-one-document-group-out values of ``head`` -> the two jackknife tables."""
    groups = int(params.document_groups)
    if groups < 2:
        raise ValueError(f"uncertainty.document_groups must be >= 2; got {groups}")
    used = tuple(registry.get(name) for name in uses)
    plasticity = next((a for a in used if a.name == "plasticity"), None)
    buckets_table = "plasticity_buckets"
    metrics = [(a, metric_columns(a)) for a in used]
    present = set(document_group(head.q_example, groups).tolist()) | set(
        document_group(head.k_example, groups).tolist()
    )

    b_rows: dict[str, list[Any]] = {c: [] for c in ("q_bucket", "doc_group", *BUCKET_COLUMNS)}
    m_rows: dict[str, list[Any]] = {"doc_group": [], "metric": [], "value": []}

    def no_bucket_values(g: int) -> None:
        b_rows["q_bucket"].append(NO_ROWS_BUCKET)
        b_rows["doc_group"].append(g)
        for c in BUCKET_COLUMNS:
            b_rows[c].append(None)

    for g in range(groups):
        if g not in present:
            if plasticity is not None:
                no_bucket_values(g)
            m_rows["doc_group"].append(g)
            m_rows["metric"].append(NO_ROWS_METRIC)
            m_rows["value"].append(None)
            continue
        results = rerun(without_group(head, g, groups), used, uses, seed=seed)
        if plasticity is not None:
            res = results.get(plasticity.name)
            if res is None or buckets_table not in res.tables:
                no_bucket_values(g)
            else:
                rows = res.tables[buckets_table]
                n = len(rows["q_bucket"])
                b_rows["q_bucket"].extend(int(j) for j in rows["q_bucket"])
                b_rows["doc_group"].extend([g] * n)
                for c in BUCKET_COLUMNS:
                    b_rows[c].extend(rows[c].tolist())
        for a, names in metrics:
            res = results.get(a.name)
            head_rows = (
                None if res is None or a.head_table is None else res.tables.get(a.head_table.name)
            )
            for name in names:
                m_rows["doc_group"].append(g)
                m_rows["metric"].append(name)
                m_rows["value"].append(None if head_rows is None else float(head_rows[name][0]))

    result = AnalysisResult()
    if plasticity is not None:
        result.add(BUCKETS, {c: np.array(v, dtype=object) for c, v in b_rows.items()})
    result.add(METRICS, {c: np.array(v, dtype=object) for c, v in m_rows.items()})
    return result


def run(
    head: HeadData,
    params: UncertaintyParams,
    *,
    seed: int,
    shared: Mapping[str, Any],
    uses: Mapping[str, Any],
) -> AnalysisResult:
    """The registered function (``qkwh.analyses.declared.uncertainty``)."""
    return analyse(head, params, seed=seed, uses=uses)
