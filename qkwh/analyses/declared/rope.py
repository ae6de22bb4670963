"""RoPE frequency bands (docs/metrics/rope.md): parameters and output tables."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from qkwh.analyses.declaration import Analysis, Column, ModelMetric, Table
from qkwh.analyses.declared.plasticity import ESTIMATORS

Layout = Literal["half", "interleaved"]
Variants = Literal["only", "only,without"]


@dataclass(frozen=True)
class RopeParams:
    """RoPE frequency bands (docs/metrics/rope.md).

    The planes and frequencies of each model layer come from the warehouse's ``rope_frequencies``
    catalog (resolved at ingest; a model without them is left out of this analysis).  ``layout``
    is the plane layout assumed when the capture did not record one (frequencies from the
    model's config or ``rope_theta``); a layout recorded at capture always wins.
    """

    layout: Layout = field(
        default="half",
        metadata={
            "doc": "half (rotate_half: dims i, i + d_rot/2) | interleaved (dims 2i, 2i + 1); "
            "used when the capture did not record the layout"
        },
    )
    variants: Variants = field(
        default="only",
        metadata={
            "doc": "band plasticity on the band's dims (only), and also on all other dims (without)"
        },
    )


def _c(name: str, type_: str, unit: str, description: str) -> Column:
    return Column(name, type_, unit, description)


#: the frequency bands (display order) and the two variants of band plasticity
BANDS: tuple[str, ...] = ("high", "mid", "low", "unrotated")
VARIANTS: tuple[str, ...] = ("only", "without")
_MEANS: tuple[str, ...] = ("ap_overall", *(f"decile_{k}" for k in range(10)))
_DERIVED: tuple[str, ...] = (
    "quintile_0",
    "quintile_1",
    "quintile_2",
    "quintile_3",
    "quintile_4",
    "ap_first_20pct",
    "ap_last_20pct",
    "ap_drop",
)


def _rope_metrics() -> tuple[ModelMetric, ...]:
    """RoPE band metrics (docs/metrics/rope.md): band plasticity named
    rope_<base>_<band>_<variant><estimator suffix> (means over heads of the band's ap_overall and
    deciles, the rest derived from the replicate's model deciles), then the band energy shares."""
    out: list[ModelMetric] = []
    for estimator, sfx in ESTIMATORS:
        for band in BANDS:
            for variant in VARIANTS:
                tail = f"_{band}_{variant}{sfx}"
                for base in _MEANS + _DERIVED:
                    mean = base in _MEANS
                    out.append(
                        ModelMetric(
                            f"rope_{base}{tail}",
                            expr=base if mean else "",
                            agg="mean" if mean else "derived",
                            rule="" if mean else "rope_profile",
                            source="int_rope_band_head_plasticity" if mean else "",
                            where=f"band = '{band}' and variant = '{variant}' "
                            f"and estimator = '{estimator}'"
                            if mean
                            else "",
                            description=f"{base} of the plasticity re-fitted on the {band} band's "
                            f"dims ({variant}; {estimator} estimator)",
                            compared=base == "ap_drop" and variant == "only" and not sfx,
                            facets=(
                                ("base", base),
                                ("band", band),
                                ("variant", variant),
                                ("estimator", estimator),
                                ("support_metric", f"rope_ap_overall{tail}"),
                            ),
                        )
                    )
    for band in BANDS:
        for side, what in (("q", "query"), ("k", "key")):
            out.append(
                ModelMetric(
                    f"rope_{side}_energy_share_{band}",
                    expr=f"{side}_energy_share",
                    source="int_rope_band_head_energy",
                    where=f"band = '{band}'",
                    description=f"share of the {what} energy in the {band} band, mean over heads",
                    facets=(("band", band), ("column", f"{side}_energy_share")),
                )
            )
    return tuple(out)


ANALYSIS = Analysis(
    name="rope",
    run="qkwh.analyses.rope:run",
    params=RopeParams,
    uses=("plasticity",),
    shared=("query_moments", "key_layout"),
    metrics=_rope_metrics(),
    title="RoPE frequency bands: energy, logit and plasticity per rotary plane and band",
    doc="metrics/rope.md",
    default=False,
    tables=(
        Table(
            "rope_planes",
            key=("plane",),
            field="planes",
            grain="one row per head and RoPE plane",
            description="Query/key energy and logit contribution of each rotary plane "
            "(raw vectors, no centring).",
            columns=(
                _c(
                    "plane",
                    "INTEGER",
                    "",
                    "plane number; rotated planes first, then unrotated dims",
                ),
                _c("dim_a", "INTEGER", "", "first head dimension of the plane"),
                _c("dim_b", "INTEGER", "", "second head dimension (NULL for an unrotated dim)"),
                _c("inv_freq", "DOUBLE", "radians/token", "rotation frequency (0 when unrotated)"),
                _c("wavelength", "DOUBLE", "tokens", "2*pi / inv_freq (+inf when unrotated)"),
                _c("band", "VARCHAR", "", "'high' | 'mid' | 'low' | 'unrotated'"),
                _c("q_energy", "DOUBLE", "vector units^2", "mean of q_a^2 + q_b^2 over queries"),
                _c("k_energy", "DOUBLE", "vector units^2", "mean of k_a^2 + k_b^2 over keys"),
                _c("q_energy_share", "DOUBLE", "1", "q_energy over the sum over all planes"),
                _c("k_energy_share", "DOUBLE", "1", "k_energy over the sum over all planes"),
                _c(
                    "logit_mean",
                    "DOUBLE",
                    "vector units^2",
                    "mean of q_a k_a + q_b k_b over causal same-example pairs",
                ),
                _c("logit_sd", "DOUBLE", "vector units^2", "its sample sd (ddof = 1)"),
            ),
        ),
        Table(
            "rope_band_plasticity",
            key=("band", "variant", "q_bucket"),
            field="band_plasticity",
            grain="one row per head, band, variant and query bucket",
            description="Plasticity per query bucket re-fitted on a band's dims (only) or on all "
            "other dims (without), with the head's own plasticity pairs.",
            columns=(
                _c("band", "VARCHAR", "", "'high' | 'mid' | 'low' | 'unrotated'"),
                _c("variant", "VARCHAR", "", "'only' (the band's dims) | 'without' (all others)"),
                _c("q_bucket", "INTEGER", "", "query bucket j"),
                _c("bucket_position", "DOUBLE", "tokens", "tau_j: mean query position"),
                _c("bucket_midpoint", "DOUBLE", "tokens", "(j + 0.5) * bucket_size"),
                _c("bucket_frac", "DOUBLE", "1", "tau_j / L_ctx"),
                _c("n_queries", "INTEGER", "rows", "queries in the bucket"),
                _c("n_eligible_keys", "BIGINT", "rows", "keys eligible for the bucket"),
                _c("n_admissible_pairs", "BIGINT", "pairs", "admissible key pairs A"),
                _c(
                    "n_pairs",
                    "INTEGER",
                    "pairs",
                    "pairs evaluated (all admissible when exhaustive)",
                ),
                _c("ap_bucket", "DOUBLE", "1", "AP_j on these dims"),
                _c("ap_bucket_se", "DOUBLE", "1", "standard error of the sampled estimator"),
                _c("mean_abs_z", "DOUBLE", "1", "mean |z| over the pairs (diagnostic)"),
                _c(
                    "ap_bucket_empirical",
                    "DOUBLE",
                    "1",
                    "same pairs, counted with the real queries (NULL unless plasticity.empirical)",
                ),
                _c("ap_bucket_empirical_se", "DOUBLE", "1", "its standard error"),
                _c(
                    "gauss_gap_se",
                    "DOUBLE",
                    "1",
                    "standard error of ap_bucket - ap_bucket_empirical",
                ),
                _c("mode", "VARCHAR", "", "'<pairs>/<cov_mode>/<eligibility>'"),
            ),
        ),
        Table(
            "rope_band_logits",
            key=("band", "distance_bin"),
            field="band_logits",
            grain="one row per head, band and distance bin",
            description="The band's logit contribution over causal same-example pairs, by distance.",
            columns=(
                _c("band", "VARCHAR", "", "'high' | 'mid' | 'low' | 'unrotated'"),
                _c(
                    "distance_bin",
                    "INTEGER",
                    "bucket sizes",
                    "floor((query position - key position) / bucket_size)",
                ),
                _c(
                    "n_pairs",
                    "BIGINT",
                    "pairs",
                    "causal same-example (query, key) pairs in the bin",
                ),
                _c("logit_sum", "DOUBLE", "vector units^2", "sum of the band's logit contribution"),
                _c("logit_sum_sq", "DOUBLE", "vector units^4", "sum of its square"),
                _c("logit_mean", "DOUBLE", "vector units^2", "logit_sum / n_pairs"),
                _c(
                    "logit_sd",
                    "DOUBLE",
                    "vector units^2",
                    "sample sd (ddof = 1; NULL below 2 pairs)",
                ),
            ),
        ),
    ),
)
