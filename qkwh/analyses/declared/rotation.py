"""Planar rotation model (docs/metrics/rotation.md): parameters and output tables."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from qkwh.analyses.declaration import HEAD_METRICS, Analysis, Column, ModelMetric, Table

BMode = Literal["eig", "centroid"]
Pairing = Literal["independent", "same_example_nearest", "row_order"]


@dataclass(frozen=True)
class RotationParams:
    """Planar rotation model (docs/metrics/rotation.md)."""

    b_mode: BMode = field(
        default="eig", metadata={"doc": "eig (seeds) | centroid (thesis); both axes are stored"}
    )
    pairing: Pairing = field(
        default="independent", metadata={"doc": "independent | same_example_nearest | row_order"}
    )
    t_active: float = field(
        default=0.3,
        metadata={
            "ge": 0,
            "le": 1,
            "doc": "angle_r_circ_pm threshold of an active complement pair",
        },
    )
    max_pairs: int = field(default=30, metadata={"gt": 0, "doc": "complement SVD pairs examined"})
    omega_grid: int = field(
        default=512, metadata={"gt": 0, "doc": "size of the log-spaced omega grid"}
    )


def _c(
    name: str,
    type_: str,
    unit: str,
    description: str,
    *,
    head_metric: bool = False,
    null_as: str | None = None,
) -> Column:
    return Column(name, type_, unit, description, head_metric=head_metric, null_as=null_as)


_HEAD_MEANS: tuple[tuple[str, str, str], ...] = (
    ("position_r", "1", "position correlation of the rotation angle"),
    ("abs_r_q_a", "1", "|position correlation| of the queries on axis a"),
    ("abs_r_k_a", "1", "|position correlation| of the keys on axis a"),
    ("abs_alpha_q", "1", "|rotation slope| of the queries"),
    ("abs_alpha_k", "1", "|rotation slope| of the keys"),
    ("alpha_q", "1", "rotation slope of the queries"),
    ("alpha_k", "1", "rotation slope of the keys"),
    ("mu_q_a", "vector units", "query mean on axis a"),
    ("mu_k_a", "vector units", "key mean on axis a"),
    ("bias_strength", "vector units", "bias strength mu_q_a * mu_k_a"),
    ("separation_strength", "vector units", "query / key separation strength"),
    ("var_frac_a", "1", "variance share of axis a"),
    ("var_frac_b", "1", "variance share of axis b"),
    ("plane_var_fraction", "1", "variance share of the rotation plane"),
    ("content_var_b", "vector units", "content variance on axis b"),
    ("content_var_b_frac", "1", "content share of the variance on axis b"),
    ("n_active_pairs", "pairs", "active rotation pairs"),
    ("active_var_frac", "1", "variance share of the active pairs"),
)
_COMPARED = {"bias_strength", "abs_r_k_a", "plane_var_fraction"}


def _rotation_metrics() -> tuple[ModelMetric, ...]:
    """Rotation model metrics (docs/metrics/aggregation.md#rotation-and-pca-summaries; degenerate
    heads carry NULL metrics and drop out)."""
    out = [
        ModelMetric(
            n,
            source=HEAD_METRICS,
            unit=u,
            description=d + ", mean over heads",
            documents=True,
            compared=n in _COMPARED,
        )
        for n, u, d in _HEAD_MEANS
    ]
    for name, expr, what in (
        (
            "frac_bias_positive",
            "case when bias_strength > 0 then 1.0 when bias_strength is not null then 0.0 end",
            "fraction of heads with bias_strength > 0",
        ),
        (
            "frac_mu_q_a_positive",
            "case when mu_q_a > 0 then 1.0 when mu_q_a is not null then 0.0 end",
            "fraction of heads with mu_q_a > 0",
        ),
        (
            "frac_var_b_gt_a",
            "case when var_frac_b > var_frac_a then 1.0 "
            "when var_frac_b is not null and var_frac_a is not null then 0.0 end",
            "fraction of heads with var_frac_b > var_frac_a",
        ),
    ):
        out.append(
            ModelMetric(name, expr=expr, source=HEAD_METRICS, description=what, documents=True)
        )
    out += [
        ModelMetric(
            "bias_strength_median",
            expr="bias_strength",
            agg="median",
            source=HEAD_METRICS,
            unit="vector units",
            description="median over heads of bias_strength",
        ),
        ModelMetric(
            "slope_ratio_kq_median",
            expr="slope_ratio_kq",
            agg="median",
            source=HEAD_METRICS,
            description="median over heads of the key / query slope ratio",
        ),
        ModelMetric(
            "max_residual_pos_r",
            expr="residual_pos_r",
            agg="max",
            source=HEAD_METRICS,
            description="largest residual position correlation of a head",
        ),
        ModelMetric(
            "bias_strength_ctx",
            agg="derived",
            rule="bias_strength_ctx",
            unit="vector units x tokens",
            description="mean bias_strength times the model's context length",
        ),
    ]
    return tuple(out)


ANALYSIS = Analysis(
    name="rotation",
    run="qkwh.analyses.rotation:run",
    params=RotationParams,
    shared=("moments",),
    metrics=_rotation_metrics(),
    title=(
        "Planar rotation model: the position axis a, the query/key separation axis b and the "
        "complement's RoPE planes"
    ),
    doc="metrics/rotation.md",
    tables=(
        Table(
            "rotation_heads",
            grain="one row per head",
            description="Planar rotation {a, b} metrics per head; NaN for a degenerate head.",
            columns=(
                _c("n_q", "INTEGER", "rows", "query rows used (after the row cap)"),
                _c("n_k", "INTEGER", "rows", "key rows used (after the row cap)"),
                _c("d", "INTEGER", "dimensions", "vector length (head dimension)"),
                _c(
                    "degenerate",
                    "BOOLEAN",
                    "",
                    "no position signal to fit: the metrics are NaN",
                    head_metric=True,
                    null_as="false",
                ),
                _c("b_mode", "VARCHAR", "", "which b the b-metrics use: 'eig' or 'centroid'"),
                _c("pairing", "VARCHAR", "", "how delta = q - k was paired"),
                _c(
                    "position_r",
                    "DOUBLE",
                    "1",
                    "|Pearson r| of the pooled a-projections with position",
                    head_metric=True,
                ),
                _c(
                    "r_q_a",
                    "DOUBLE",
                    "1",
                    "Pearson r of the query a-projection with position (signed)",
                    head_metric=True,
                ),
                _c(
                    "r_k_a",
                    "DOUBLE",
                    "1",
                    "Pearson r of the key a-projection with position (signed)",
                    head_metric=True,
                ),
                _c(
                    "alpha_q",
                    "DOUBLE",
                    "vector units/token",
                    "least-squares slope of q.a on position",
                    head_metric=True,
                ),
                _c(
                    "alpha_k",
                    "DOUBLE",
                    "vector units/token",
                    "least-squares slope of k.a on position",
                    head_metric=True,
                ),
                _c("intercept_q_a", "DOUBLE", "vector units", "fitted q.a at position 0"),
                _c("intercept_k_a", "DOUBLE", "vector units", "fitted k.a at position 0"),
                _c(
                    "mu_q_a",
                    "DOUBLE",
                    "vector units",
                    "mean of the raw projection q.a",
                    head_metric=True,
                ),
                _c(
                    "mu_k_a",
                    "DOUBLE",
                    "vector units",
                    "mean of the raw projection k.a",
                    head_metric=True,
                ),
                _c(
                    "mu_q_b",
                    "DOUBLE",
                    "vector units",
                    "mean of the raw projection q.b",
                    head_metric=True,
                ),
                _c(
                    "mu_k_b",
                    "DOUBLE",
                    "vector units",
                    "mean of the raw projection k.b",
                    head_metric=True,
                ),
                _c(
                    "bias_strength",
                    "DOUBLE",
                    "vector units^2/token",
                    "mu_q_a * alpha_k",
                    head_metric=True,
                ),
                _c(
                    "bias_strength_ctx",
                    "DOUBLE",
                    "vector units^2",
                    "bias_strength * L_ctx",
                    head_metric=True,
                ),
                _c(
                    "slope_ratio_kq",
                    "DOUBLE",
                    "1",
                    "|alpha_k| / |alpha_q| (NULL when alpha_q = 0)",
                    head_metric=True,
                ),
                _c(
                    "separation_strength",
                    "DOUBLE",
                    "1",
                    "share of the query-key difference's second moment along b",
                    head_metric=True,
                ),
                _c(
                    "var_frac_a",
                    "DOUBLE",
                    "1",
                    "Var(a.x) / tr Cov(X) on the pool",
                    head_metric=True,
                ),
                _c(
                    "var_frac_b",
                    "DOUBLE",
                    "1",
                    "Var(b.x) / tr Cov(X) on the pool",
                    head_metric=True,
                ),
                _c(
                    "plane_var_fraction", "DOUBLE", "1", "var_frac_a + var_frac_b", head_metric=True
                ),
                _c(
                    "content_var_b",
                    "DOUBLE",
                    "vector units^2",
                    "within-class spread along b: (Var(q.b) + Var(k.b)) / 2",
                    head_metric=True,
                ),
                _c(
                    "content_var_b_frac",
                    "DOUBLE",
                    "1",
                    "content_var_b / tr Cov(X)",
                    head_metric=True,
                ),
                _c(
                    "residual_pos_r",
                    "DOUBLE",
                    "1",
                    "largest |Pearson r| with position over b and the complement (about 1e-15: a check)",
                    head_metric=True,
                ),
                _c(
                    "omega",
                    "DOUBLE",
                    "rad/token",
                    "rate of the best sinusoid fit of the drift coordinate",
                ),
                _c("omega_r_squared", "DOUBLE", "1", "R^2 of that sinusoid fit"),
                _c(
                    "n_active_pairs",
                    "INTEGER",
                    "pairs",
                    "complement pairs that rotate with position",
                    head_metric=True,
                ),
                _c(
                    "active_var_frac",
                    "DOUBLE",
                    "1",
                    "variance share of the active complement pairs",
                    head_metric=True,
                ),
                _c("cos_b_bc", "DOUBLE", "1", "|b . b_centroid|"),
            ),
        ),
        Table(
            "rotation_pairs",
            key=("pair",),
            field="pairs",
            grain="one row per head and complement pair",
            description="Complement RoPE rotation planes, one row per head and pair.",
            columns=(
                _c("pair", "INTEGER", "", "complement pair i: the directions w_2i and w_2i+1"),
                _c(
                    "sv_var_share",
                    "DOUBLE",
                    "1",
                    "the pair's share of the total complement variance",
                ),
                _c("angle_r", "DOUBLE", "1", "Pearson r of the pair's angle with position"),
                _c(
                    "angle_r_circ",
                    "DOUBLE",
                    "1",
                    "how steadily the plane rotates at one rate (max over the omega grid)",
                ),
                _c("omega_pair", "DOUBLE", "rad/token", "the rate attaining angle_r_circ"),
                _c(
                    "angle_r_circ_pm",
                    "DOUBLE",
                    "1",
                    "angle_r_circ maximised over +omega and -omega",
                ),
                _c(
                    "omega_pair_pm",
                    "DOUBLE",
                    "rad/token",
                    "the signed rate attaining angle_r_circ_pm",
                ),
                _c(
                    "qk_acc",
                    "DOUBLE",
                    "1",
                    "in-sample accuracy of a linear discriminant of queries vs keys in the plane",
                ),
                _c("active", "BOOLEAN", "", "angle_r_circ_pm >= rotation.t_active"),
            ),
        ),
        Table(
            "rotation_axes",
            key=("axis",),
            field="axes",
            staged=False,
            grain="one row per head and axis",
            description="The axes a, b, b_centroid, the pooled mean and the complement directions, for the collages.",
            columns=(
                _c(
                    "axis",
                    "VARCHAR",
                    "",
                    "'a', 'b', 'b_centroid', 'mean' or a complement direction 'w0', 'w1', ...",
                ),
                _c(
                    "vec",
                    "FLOAT[]",
                    "vector units",
                    "the vector (FLOAT[] so models of any d share the table)",
                ),
            ),
        ),
    ),
)
