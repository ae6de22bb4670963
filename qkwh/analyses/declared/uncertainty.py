"""Document-group jackknife (docs/metrics/jackknife.md): parameters and output tables."""

from __future__ import annotations

from dataclasses import dataclass, field

from qkwh.analyses.declaration import Analysis, Column, Table


@dataclass(frozen=True)
class UncertaintyParams:
    """Document-group jackknife (docs/metrics/jackknife.md)."""

    document_groups: int = field(
        default=10,
        metadata={"ge": 2, "doc": "G: example e is in document group e mod G"},
    )


#: the ``q_bucket`` of the one ``plasticity_buckets_jackknife`` row, and the ``metric`` of the
#: one ``head_jackknife`` row, that stand for a whole document group with no rows in the head
NO_ROWS_BUCKET = -1
NO_ROWS_METRIC = "no_rows"

ANALYSIS = Analysis(
    name="uncertainty",
    run="qkwh.analyses.jackknife:run",
    params=UncertaintyParams,
    uses=("pca", "rotation", "plasticity"),
    default=False,
    title="Document-group jackknife: the per-head analyses recomputed without each group of examples",
    doc="metrics/jackknife.md",
    tables=(
        Table(
            "plasticity_buckets_jackknife",
            key=("q_bucket", "doc_group"),
            field="buckets",
            grain="one row per head, query bucket and document group",
            description="Attention plasticity per query bucket, recomputed without one document "
            "group (queries and keys alike); a group with no rows in the head is one row with "
            "q_bucket = -1 and NULL values.",
            columns=(
                Column("q_bucket", "INTEGER", "", "query bucket j (-1: the group has no rows)"),
                Column("doc_group", "INTEGER", "", "document group g left out (example_id mod G)"),
                Column("n_queries", "INTEGER", "rows", "queries in the bucket without the group"),
                Column(
                    "bucket_position",
                    "DOUBLE",
                    "tokens",
                    "tau_j: mean query position of the bucket without the group",
                ),
                Column(
                    "ap_bucket",
                    "DOUBLE",
                    "1",
                    "AP_j without the group (the run's plasticity.pairs estimator)",
                ),
                Column(
                    "ap_bucket_empirical",
                    "DOUBLE",
                    "1",
                    "the real-query estimator without the group (NULL unless plasticity.empirical)",
                ),
                Column("n_pairs", "INTEGER", "pairs", "pairs evaluated without the group"),
            ),
        ),
        Table(
            "head_jackknife",
            key=("doc_group", "metric"),
            field="metrics",
            grain="one row per head, document group and head-level metric",
            description="The head-level scalars of head_metrics (PCA, rotation, plasticity), "
            "recomputed without one document group; a group with no rows in the head is one row "
            "with metric = 'no_rows' and a NULL value.",
            columns=(
                Column("doc_group", "INTEGER", "", "document group g left out (example_id mod G)"),
                Column("metric", "VARCHAR", "", "the head_metrics column (e.g. 'ev0', 'r_k_a')"),
                Column("value", "DOUBLE", "as the metric", "its value without the group"),
            ),
        ),
    ),
)
