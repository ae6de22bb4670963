"""Combined Q/K PCA (docs/metrics/pca.md): parameters and output tables."""

from __future__ import annotations

from dataclasses import dataclass, field

from qkwh.analyses.declaration import HEAD_METRICS, Analysis, Column, ModelMetric, Table


@dataclass(frozen=True)
class PCAParams:
    """Combined Q/K PCA (docs/metrics/pca.md).

    The taxonomy thresholds belong to the dbt project.
    """

    n_components: int = field(default=10, metadata={"gt": 0, "doc": "PCA components kept"})
    sign_threshold: float = field(
        default=0.05, metadata={"ge": 0, "le": 1, "doc": "|r_q| below this anchors the sign on r_k"}
    )


_HEAD_MEANS: tuple[tuple[str, str], ...] = (
    ("pos_var_q_thesis", "positional variance share of the queries (thesis definition)"),
    ("pos_var_k_thesis", "positional variance share of the keys (thesis definition)"),
    ("pc0_share_pos_q", "share of PC0 in the queries' positional variance"),
    ("pc0_share_pos_k", "share of PC0 in the keys' positional variance"),
    ("pos_var_q_exact", "exact positional variance share of the queries"),
    ("pos_var_k_exact", "exact positional variance share of the keys"),
    ("qk_sep_pc0", "query / key separation along PC0"),
    ("fisher_pc0", "Fisher ratio of queries vs keys along PC0"),
    ("qk_acc_pc01", "query / key classification accuracy on PC0 and PC1"),
)


def _pca_metrics() -> tuple[ModelMetric, ...]:
    """PCA model metrics (docs/metrics/aggregation.md#rotation-and-pca-summaries): head scalars
    and per-component values averaged over heads, and the taxonomy fractions."""
    out = [
        ModelMetric(n, source=HEAD_METRICS, description=d + ", mean over heads", documents=True)
        for n, d in _HEAD_MEANS
    ]
    out.append(
        ModelMetric(
            "frac_{class}",
            expr="case when taxonomy = '{class}' then 1.0 when taxonomy is not null then 0.0 end",
            source=HEAD_METRICS,
            group="taxonomy",
            per_taxonomy_class=True,
            description="fraction of the model's heads of the taxonomy class",
        )
    )
    for k in range(10):
        for name, col, what in (
            ("ev", "explained_variance_ratio", "explained variance ratio"),
            ("r_q", "r_q", "position correlation of the queries"),
            ("r_k", "r_k", "position correlation of the keys"),
        ):
            out.append(
                ModelMetric(
                    f"{name}_{k}",
                    expr=col,
                    source="pca_components",
                    where=f"pc = {k}",
                    description=f"{what} of principal component {k}, mean over heads",
                )
            )
    out.append(
        ModelMetric(
            "abs_r_k_0",
            expr="abs(r_k)",
            source="pca_components",
            where="pc = 0",
            description="|position correlation| of the keys on PC0, mean over heads",
        )
    )
    return tuple(out)


def _c(name: str, type_: str, unit: str, description: str, *, head_metric: bool = False) -> Column:
    return Column(name, type_, unit, description, head_metric=head_metric)


_ROWS = (
    _c("n_q", "INTEGER", "rows", "query rows used (after the row cap)"),
    _c("n_k", "INTEGER", "rows", "key rows used (after the row cap)"),
    _c("d", "INTEGER", "dimensions", "vector length (head dimension)"),
)

ANALYSIS = Analysis(
    name="pca",
    run="qkwh.analyses.pca:run",
    params=PCAParams,
    shared=("moments",),
    metrics=_pca_metrics(),
    title="Combined Q/K PCA: principal components of the pooled queries and keys, and how they follow position",
    doc="metrics/pca.md",
    tables=(
        Table(
            "pca_heads",
            grain="one row per head",
            description="Combined Q/K PCA per head; the taxonomy class is derived by dbt (head_taxonomy).",
            columns=(
                *_ROWS,
                _c("ev0", "DOUBLE", "1", "explained variance ratio of PC0", head_metric=True),
                _c("ev1", "DOUBLE", "1", "explained variance ratio of PC1", head_metric=True),
                _c(
                    "r_q0",
                    "DOUBLE",
                    "1",
                    "canonicalised Pearson r of query PC0 scores with position (taxonomy input)",
                    head_metric=True,
                ),
                _c(
                    "r_k0",
                    "DOUBLE",
                    "1",
                    "Pearson r of key PC0 scores with position (taxonomy input)",
                    head_metric=True,
                ),
                _c(
                    "pos_var_q_thesis",
                    "DOUBLE",
                    "1",
                    "sum over components of ev_i * r_q,i^2: the original study's positional-variance figure",
                    head_metric=True,
                ),
                _c(
                    "pos_var_k_thesis",
                    "DOUBLE",
                    "1",
                    "the same with the key correlations r_k,i",
                    head_metric=True,
                ),
                _c(
                    "pc0_share_pos_q",
                    "DOUBLE",
                    "1",
                    "share of pos_var_q_thesis carried by PC0",
                    head_metric=True,
                ),
                _c(
                    "pc0_share_pos_k",
                    "DOUBLE",
                    "1",
                    "share of pos_var_k_thesis carried by PC0",
                    head_metric=True,
                ),
                _c(
                    "pos_var_q_exact",
                    "DOUBLE",
                    "1",
                    "fraction of total query variance linear in position (basis-free)",
                    head_metric=True,
                ),
                _c(
                    "pos_var_k_exact",
                    "DOUBLE",
                    "1",
                    "fraction of total key variance linear in position (basis-free)",
                    head_metric=True,
                ),
                _c(
                    "qk_sep_pc0",
                    "DOUBLE",
                    "vector units",
                    "|mean_q - mean_k| along PC0: distance between the query and key centroids",
                    head_metric=True,
                ),
                _c(
                    "fisher_pc0",
                    "DOUBLE",
                    "1",
                    "(mean_q - mean_k)^2 / (var_q + var_k) along PC0",
                    head_metric=True,
                ),
                _c(
                    "qk_acc_pc01",
                    "DOUBLE",
                    "1",
                    "in-sample accuracy of a linear discriminant separating queries from keys on (PC0, PC1)",
                    head_metric=True,
                ),
            ),
        ),
        Table(
            "pca_components",
            key=("pc",),
            field="components",
            grain="one row per head and principal component",
            description="Combined Q/K PCA, one row per head and principal component.",
            columns=(
                _c("pc", "INTEGER", "", "principal component, 0 .. n_components - 1"),
                _c(
                    "explained_variance_ratio",
                    "DOUBLE",
                    "1",
                    "eigenvalue / trace of the pooled Q+K covariance",
                ),
                _c(
                    "r_q",
                    "DOUBLE",
                    "1",
                    "canonicalised Pearson r of the query scores with position",
                ),
                _c("r_k", "DOUBLE", "1", "canonicalised Pearson r of the key scores with position"),
                _c("p_q", "DOUBLE", "1", "two-sided p-value of r_q"),
                _c("p_k", "DOUBLE", "1", "two-sided p-value of r_k"),
                _c(
                    "sign_flipped",
                    "BOOLEAN",
                    "",
                    "the component's sign was flipped by the canonicalisation",
                ),
                _c("anchor", "VARCHAR", "", "which correlation anchored the sign: 'q' or 'k'"),
                _c("mean_q", "DOUBLE", "vector units", "mean of the query scores"),
                _c("mean_k", "DOUBLE", "vector units", "mean of the key scores"),
                _c(
                    "var_q",
                    "DOUBLE",
                    "vector units^2",
                    "variance of the query scores (denominator n - 1)",
                ),
                _c(
                    "var_k",
                    "DOUBLE",
                    "vector units^2",
                    "variance of the key scores (denominator n - 1)",
                ),
            ),
        ),
        Table(
            "pca_axes",
            key=("axis",),
            field="axes",
            staged=False,
            grain="one row per head and axis",
            description="The pooled mean and the canonicalised principal axes, for the PC0/PC1 plots.",
            columns=(
                _c(
                    "axis",
                    "VARCHAR",
                    "",
                    "'mean' (the pooled mean) or 'pc0' .. 'pc9' (the components)",
                ),
                _c(
                    "vec",
                    "FLOAT[]",
                    "vector units",
                    "the vector (scores are z_i = (x - mean) . pc_i; FLOAT[] so models of any d share the table)",
                ),
            ),
        ),
    ),
)
