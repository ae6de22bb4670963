"""Softmax reach (docs/metrics/reach.md): parameters and output tables."""

from __future__ import annotations

from dataclasses import dataclass, field

from qkwh.analyses.declaration import Analysis, Column, ModelMetric, Table


@dataclass(frozen=True)
class ReachParams:
    """Softmax reach (docs/metrics/reach.md).

    The keep probability of every key position comes from the capture's sampler facts (the
    dataset metadata: sampler, bucket size, base rate, ``keep_first``) and the score scaling
    from the capture's saver state; a model without sampler facts is left out of this analysis.
    """

    edge_fraction: float = field(
        default=0.2,
        metadata={
            "gt": 0,
            "le": 0.5,
            "doc": "reach_first/last: queries below edge * L_ctx and at or above (1 - edge) * L_ctx",
        },
    )


def _c(name: str, type_: str, unit: str, description: str) -> Column:
    return Column(name, type_, unit, description)


ANALYSIS = Analysis(
    name="reach",
    run="qkwh.analyses.reach:run",
    shared=("key_examples",),
    params=ReachParams,
    title="Softmax reach: where each head's attention mass goes, by distance",
    doc="metrics/reach.md",
    default=True,
    metrics=(
        ModelMetric("reach", description="softmax reach, mean over heads", compared=True),
        ModelMetric(
            "reach_drop",
            description="reach of the first minus the last 20 % of the context, mean over heads",
            compared=True,
        ),
        ModelMetric("local_mass", description="mass in distance bin 0, mean over heads"),
        ModelMetric("far_mass", description="mass at distance >= L_ctx / 2, mean over heads"),
        ModelMetric(
            "sink_mass",
            description="mass on the first keep_first positions, mean over heads with a value",
        ),
        ModelMetric(
            "globality_gap",
            source="int_reach_head_plasticity",
            description="fraction of heads with ap_overall >= the model's median and reach <= "
            "its median (pairwise plastic, softmax local)",
        ),
    ),
    tables=(
        Table(
            "reach_buckets",
            key=("q_bucket", "distance_bin"),
            field="buckets",
            grain="one row per head, query bucket and distance bin",
            description="Softmax mass per distance bin, averaged over the bucket's queries "
            "(Horvitz-Thompson over the sampled keys), beside uniform attention and the exact "
            "mass recorded at capture.",
            columns=(
                _c("q_bucket", "INTEGER", "", "query bucket"),
                _c(
                    "distance_bin",
                    "INTEGER",
                    "bucket sizes",
                    "r = floor((query position - key position) / bucket_size)",
                ),
                _c("n_queries", "INTEGER", "rows", "queries of the bucket used (not skipped)"),
                _c("mass", "DOUBLE", "1", "mean estimated softmax mass in bin r"),
                _c(
                    "uniform_mass",
                    "DOUBLE",
                    "1",
                    "mean share of the admissible positions in bin r (uniform attention)",
                ),
                _c("lift", "DOUBLE", "1", "mass / uniform_mass"),
                _c(
                    "mass_exact",
                    "DOUBLE",
                    "1",
                    "mean exact mass in bin r over the same queries (NULL without exact columns)",
                ),
            ),
        ),
        Table(
            "reach_heads",
            grain="one row per head",
            description="How far the head's softmax reaches, its local, far and sink mass, "
            "and the exact counterparts recorded at capture.",
            columns=(
                _c("reach", "DOUBLE", "1", "mean of distance_i / uniform_i over the used queries"),
                _c("reach_first_20pct", "DOUBLE", "1", "reach over queries below 0.2 * L_ctx"),
                _c("reach_last_20pct", "DOUBLE", "1", "reach over queries at or above 0.8 * L_ctx"),
                _c("reach_drop", "DOUBLE", "1", "reach_first_20pct - reach_last_20pct"),
                _c("local_mass", "DOUBLE", "1", "mean mass in distance bin 0"),
                _c(
                    "far_mass",
                    "DOUBLE",
                    "1",
                    "mean mass at distance >= L_ctx / 2 over queries at or past L_ctx / 2",
                ),
                _c(
                    "sink_mass",
                    "DOUBLE",
                    "1",
                    "mean mass on positions < keep_first (NULL when keep_first = 0)",
                ),
                _c("mean_ess", "DOUBLE", "keys", "mean Kish effective number of keys"),
                _c("n_queries_used", "INTEGER", "rows", "queries with a kept admissible key"),
                _c(
                    "n_queries_skipped",
                    "INTEGER",
                    "rows",
                    "queries at position 0 or without a kept admissible key",
                ),
                _c(
                    "scaling_source",
                    "VARCHAR",
                    "",
                    "'capture' (recorded scaling) | 'default' (1/sqrt(d), the scaling is unknown)",
                ),
                _c(
                    "reach_exact",
                    "DOUBLE",
                    "1",
                    "reach from the exact attention over the same queries (NULL without)",
                ),
                _c("sink_mass_exact", "DOUBLE", "1", "exact mass on positions < 4 (NULL without)"),
                _c(
                    "entropy_exact", "DOUBLE", "nats", "mean exact attention entropy (NULL without)"
                ),
            ),
        ),
    ),
)
