"""Attention plasticity (docs/metrics/plasticity.md): parameters and output tables."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from qkwh.analyses.declaration import HEAD_METRICS, Analysis, Column, ModelMetric, Table

CovMode = Literal["full", "diag", "global_diag"]
Eligibility = Literal["position", "strict_bucket"]
PairsMode = Literal["sampled", "exhaustive"]


@dataclass(frozen=True)
class PlasticityParams:
    """Attention plasticity (docs/metrics/plasticity.md)."""

    num_pairs_per_bucket: int = field(
        default=1024, metadata={"gt": 0, "doc": "P per (head, q-bucket)"}
    )
    cov_mode: CovMode = field(default="full", metadata={"doc": "full | diag | global_diag"})
    eligibility: Eligibility = field(
        default="position", metadata={"doc": "position (s < tau_j) | strict_bucket (c < j)"}
    )
    pairs: PairsMode = field(
        default="sampled",
        metadata={"doc": "sampled | exhaustive (exact expectation, no sampling noise)"},
    )
    normality_max_dims: int = field(
        default=64, metadata={"gt": 0, "doc": "dimensions the normality tests look at"}
    )
    p_alpha: float = field(
        default=0.01, metadata={"gt": 0, "lt": 1, "doc": "significance level of those tests"}
    )
    eps: float = field(
        default=1e-12, metadata={"ge": 0, "doc": "ridge added to per-bucket covariances"}
    )
    var_floor: float = field(
        default=1e-12, metadata={"ge": 0, "doc": "floor of the pair variance v"}
    )
    orientation: bool = field(
        default=True, metadata={"doc": "orient the key-mean sign before counting"}
    )
    empirical: bool = field(
        default=False,
        metadata={"doc": "also count plasticity with the bucket's real queries (no Gaussian)"},
    )


#: the two plasticity estimators: (name, column suffix of their head and model metrics)
ESTIMATORS: tuple[tuple[str, str], ...] = (("gaussian", ""), ("empirical", "_empirical"))
#: the model metrics the plasticity profile rule derives from a model's deciles (per estimator)
PROFILE_DERIVED: tuple[str, ...] = (
    "quintile_0",
    "quintile_1",
    "quintile_2",
    "quintile_3",
    "quintile_4",
    "ap_first_20pct",
    "ap_last_20pct",
    "ap_drop",
    "decile_4_5_mean",
    "decile_6_7_mean",
    "mid_context_recovery",
)
#: compared between models and datasets (and in ``qkwh compare``)
_COMPARED = {
    "ap_overall",
    "ap_first_20pct",
    "ap_last_20pct",
    "ap_drop",
    "ap_overall_empirical",
    "ap_drop_empirical",
}


def _profile_metrics() -> tuple[ModelMetric, ...]:
    """The model plasticity profile (docs/metrics/aggregation.md#model-plasticity-profile): per
    estimator, ap_overall and the deciles as means over heads, then the quintiles, first / last
    20 %, drop and the NoPE-study decile means derived from the model deciles; the regression
    scalars; the Gaussian-minus-empirical gaps."""
    out: list[ModelMetric] = []
    for estimator, sfx in ESTIMATORS:
        what = f" ({estimator} estimator)"
        out.append(
            ModelMetric(
                f"ap_overall{sfx}",
                source=HEAD_METRICS,
                description="n-weighted attention plasticity of a head, mean over heads" + what,
                documents=True,
                compared=f"ap_overall{sfx}" in _COMPARED,
                facets=(("profile", 1),),
            )
        )
        for k in range(10):
            out.append(
                ModelMetric(
                    f"decile_{k}{sfx}",
                    source=HEAD_METRICS,
                    description=f"plasticity of the head's decile {k} of context, mean over heads "
                    "with a value there" + what,
                    documents=True,
                    facets=(("profile", 1),),
                )
            )
    out += [
        ModelMetric(
            "q_beta_norm",
            source=HEAD_METRICS,
            unit="vector units",
            description="norm of the query position-regression slope, mean over heads",
            documents=True,
        ),
        ModelMetric(
            "q_R2_pos",
            source=HEAD_METRICS,
            description="R^2 of the query position regression, mean over heads",
            documents=True,
        ),
    ]
    for estimator, sfx in ESTIMATORS:
        for base in PROFILE_DERIVED:
            name = f"{base}{sfx}"
            out.append(
                ModelMetric(
                    name,
                    agg="derived",
                    rule="plasticity_profile",
                    description=f"{base} of the model's decile profile ({estimator} estimator)",
                    documents=True,
                    compared=name in _COMPARED,
                )
            )
    for name, what in (("gauss_gap", "ap_overall"), ("gauss_gap_drop", "ap_drop")):
        out.append(
            ModelMetric(
                name,
                agg="derived",
                rule="gauss_gap",
                group="gauss_gap",
                description=f"Gaussian minus empirical {what} of the model",
                documents=True,
                compared=True,
            )
        )
    return tuple(out)


def _c(name: str, type_: str, unit: str, description: str, *, head_metric: bool = False) -> Column:
    return Column(name, type_, unit, description, head_metric=head_metric)


ANALYSIS = Analysis(
    name="plasticity",
    run="qkwh.analyses.plasticity:run",
    params=PlasticityParams,
    shared=("query_moments", "key_layout"),
    metrics=_profile_metrics(),
    title="Attention plasticity: how often a query bucket's attention order of two keys can flip",
    doc="metrics/plasticity.md",
    tables=(
        Table(
            "plasticity_heads",
            grain="one row per head",
            description="Query diagnostics and the positional model per head; head-level plasticity "
            "(ap_overall, deciles, ap_drop) is derived by dbt from plasticity_buckets.",
            columns=(
                _c("n_q", "INTEGER", "rows", "query rows used (after the row cap)"),
                _c("n_k", "INTEGER", "rows", "key rows used (after the row cap)"),
                _c("d", "INTEGER", "dimensions", "vector length (head dimension)"),
                _c(
                    "q_R2_pos",
                    "DOUBLE",
                    "1",
                    "mean over dimensions of the R^2 of the query on position",
                    head_metric=True,
                ),
                _c(
                    "q_beta_norm",
                    "DOUBLE",
                    "vector units/token",
                    "norm of the per-token query slopes beta",
                    head_metric=True,
                ),
                _c(
                    "q_R2_scalar",
                    "DOUBLE",
                    "1",
                    "R^2 of log2(t + 1) predicted from the positional coordinate",
                ),
                _c(
                    "q_mae_baseline",
                    "DOUBLE",
                    "log2 tokens",
                    "mean absolute error of always predicting the mean",
                ),
                _c(
                    "q_mae_proj",
                    "DOUBLE",
                    "log2 tokens",
                    "mean absolute error of that straight-line fit",
                ),
                _c(
                    "q_mae_ratio",
                    "DOUBLE",
                    "1",
                    "q_mae_proj / q_mae_baseline (1 when the baseline error is 0)",
                ),
                _c(
                    "q_resid0_skew",
                    "DOUBLE",
                    "1",
                    "skewness of the positional coordinate's standardised residual",
                ),
                _c("q_resid0_kurt", "DOUBLE", "1", "excess kurtosis of that residual"),
                _c(
                    "q_resid0_ks_p",
                    "DOUBLE",
                    "1",
                    "Kolmogorov-Smirnov p-value of that residual against N(0, 1)",
                ),
                _c(
                    "q_noise_med_abs_skew",
                    "DOUBLE",
                    "1",
                    "median |skewness| of the other standardised coordinates",
                ),
                _c(
                    "q_noise_med_abs_kurt",
                    "DOUBLE",
                    "1",
                    "median |excess kurtosis| of the other standardised coordinates",
                ),
                _c(
                    "q_noise_med_ks_p",
                    "DOUBLE",
                    "1",
                    "median KS p-value over normality_max_dims coordinates",
                ),
                _c(
                    "q_noise_frac_ks_p_lt_alpha",
                    "DOUBLE",
                    "1",
                    "share of those p-values below p_alpha",
                ),
                _c("alpha_pos", "DOUBLE", "vector units", "intercept of the positional model"),
                _c("beta_pos", "DOUBLE", "vector units/token", "slope of the positional model"),
                _c(
                    "sigma2_pos",
                    "DOUBLE",
                    "vector units^2",
                    "residual variance of the positional model",
                ),
                _c("seed_used", "BIGINT", "", "seed of the head's pair sampler"),
                _c("context_length", "INTEGER", "tokens", "L_ctx of the model"),
                _c("cov_mode", "VARCHAR", "", "plasticity.cov_mode used"),
                _c("eligibility", "VARCHAR", "", "plasticity.eligibility used"),
                _c(
                    "pairs",
                    "VARCHAR",
                    "",
                    "plasticity.pairs used: 'sampled' or 'exhaustive'",
                    head_metric=True,
                ),
                _c(
                    "empirical",
                    "BOOLEAN",
                    "",
                    "the real-query (empirical) estimator was computed too",
                ),
            ),
        ),
        Table(
            "plasticity_buckets",
            key=("q_bucket",),
            field="buckets",
            grain="one row per head and query bucket",
            description="Attention plasticity per head and query bucket.",
            columns=(
                _c("q_bucket", "INTEGER", "", "query bucket j"),
                _c(
                    "bucket_position",
                    "DOUBLE",
                    "tokens",
                    "tau_j: mean query position of the bucket",
                ),
                _c("bucket_midpoint", "DOUBLE", "tokens", "(j + 0.5) * bucket_size"),
                _c("bucket_frac", "DOUBLE", "1", "tau_j / L_ctx"),
                _c("n_queries", "INTEGER", "rows", "queries in the bucket"),
                _c(
                    "n_eligible_keys",
                    "BIGINT",
                    "rows",
                    "keys eligible for the bucket, summed over examples",
                ),
                _c("n_admissible_pairs", "BIGINT", "pairs", "admissible key pairs A"),
                _c(
                    "n_pairs",
                    "INTEGER",
                    "pairs",
                    "pairs evaluated (all admissible when exhaustive)",
                ),
                _c(
                    "ap_bucket",
                    "DOUBLE",
                    "1",
                    "AP_j: mean pair plasticity over the evaluated pairs",
                ),
                _c("ap_bucket_se", "DOUBLE", "1", "standard error of the sampled estimator"),
                _c("mean_abs_z", "DOUBLE", "1", "mean |z| over the pairs (diagnostic)"),
                _c(
                    "ap_bucket_empirical",
                    "DOUBLE",
                    "1",
                    "same pairs, counted with the bucket's real queries (NULL unless enabled)",
                ),
                _c("ap_bucket_empirical_se", "DOUBLE", "1", "its standard error (as ap_bucket_se)"),
                _c(
                    "gauss_gap_se",
                    "DOUBLE",
                    "1",
                    "standard error of ap_bucket - ap_bucket_empirical (paired)",
                ),
                _c("mode", "VARCHAR", "", "'<pairs>/<cov_mode>/<eligibility>'"),
            ),
        ),
        Table(
            "plasticity_heatmap",
            key=("q_bucket", "dx_bin", "dm_bin"),
            field="heatmap",
            grain="one row per head, query bucket and (dx_bin, dm_bin) cell",
            description="Pair-plasticity heatmap accumulators per head, query bucket and distance bins.",
            columns=(
                _c("q_bucket", "INTEGER", "", "query bucket j"),
                _c("dx_bin", "INTEGER", "bucket sizes", "floor(|s1 - s2| / W), W = bucket size"),
                _c("dm_bin", "INTEGER", "bucket sizes", "floor((tau_j - (s1 + s2) / 2) / W)"),
                _c("n", "BIGINT", "pairs", "pairs in the cell"),
                _c("sum_pp", "DOUBLE", "1", "sum of their pair plasticity"),
                _c("sum_pp2", "DOUBLE", "1", "sum of its square"),
            ),
        ),
        Table(
            "plasticity_components",
            key=("component",),
            field="components",
            grain="one row per head and head dimension",
            description="Positional component weights of the query regression per head dimension.",
            columns=(
                _c("component", "INTEGER", "", "head dimension, in the original layout"),
                _c(
                    "component_r2", "DOUBLE", "1", "R^2 of the dimension on position (queries only)"
                ),
                _c(
                    "component_weight",
                    "DOUBLE",
                    "1",
                    "max(R^2, 0) normalised to sum 1 over the head",
                ),
            ),
        ),
    ),
)
