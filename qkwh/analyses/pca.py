"""Combined Q/K PCA of one head (docs/metrics/pca.md).

One head in, two tables out:

* ``pca_components`` — one row per principal component ``pc = 0 .. n_pc-1`` with
  ``explained_variance_ratio, r_q, r_k, p_q, p_k, sign_flipped, anchor, mean_q, mean_k, var_q, var_k``;
* ``pca_heads`` — one row with ``n_q, n_k, d, ev0, ev1, r_q0, r_k0,
  pos_var_q_thesis, pos_var_k_thesis, pc0_share_pos_q, pc0_share_pos_k, pos_var_q_exact,
  pos_var_k_exact, qk_sep_pc0, fisher_pc0, qk_acc_pc01``.

The head key and ``config_id`` are added by the caller.  All d x d work comes from
:class:`~qkwh.analyses.stats.HeadMoments` (shared with the rotation analysis); the only per-row
work is the (z_0, z_1) projection for the 2-D LDA accuracy.

Units: PC scores z are in the units of the stored vectors (pre-softmax q/k components);
positions in tokens; correlations, ratios and accuracies are dimensionless.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy import linalg

from qkwh.analyses import stats
from qkwh.analyses.declared.pca import PCAParams
from qkwh.analyses.types import AnalysisResult, HeadData

__all__ = ["analyse"]


def _nan_result(mom: stats.HeadMoments, n_pc: int) -> AnalysisResult:
    """All-NaN rows for a head with (numerically) zero total variance."""
    nan = np.full(n_pc, np.nan)
    res = AnalysisResult()
    res.add(
        "pca_components",
        {
            "pc": np.arange(n_pc, dtype=np.int64),
            "explained_variance_ratio": nan,
            "r_q": nan,
            "r_k": nan,
            "p_q": nan,
            "p_k": nan,
            "sign_flipped": np.zeros(n_pc, dtype=bool),
            "anchor": np.full(n_pc, None, dtype=object),
            "mean_q": nan,
            "mean_k": nan,
            "var_q": nan,
            "var_k": nan,
        },
    )
    res.add("pca_heads", _heads_row(mom, **dict.fromkeys(_HEAD_FLOATS, np.nan)))
    return res


_HEAD_FLOATS = (
    "ev0",
    "ev1",
    "r_q0",
    "r_k0",
    "pos_var_q_thesis",
    "pos_var_k_thesis",
    "pc0_share_pos_q",
    "pc0_share_pos_k",
    "pos_var_q_exact",
    "pos_var_k_exact",
    "qk_sep_pc0",
    "fisher_pc0",
    "qk_acc_pc01",
)


def _heads_row(mom: stats.HeadMoments, **values: object) -> dict[str, np.ndarray]:
    row: dict[str, np.ndarray] = {
        "n_q": np.array([mom.n_q], dtype=np.int64),
        "n_k": np.array([mom.n_k], dtype=np.int64),
        "d": np.array([mom.d], dtype=np.int64),
    }
    for name in _HEAD_FLOATS:
        row[name] = np.array([values[name]], dtype=np.float64)
    return row


def _safe_div(num: float, den: float) -> float:
    return float(num / den) if den != 0 and np.isfinite(den) else float("nan")


def analyse(
    head: HeadData, params: PCAParams = PCAParams(), *, moments: stats.HeadMoments | None = None
) -> AnalysisResult:
    """Combined Q/K PCA of one head (docs/metrics/pca.md#method).

    The head taxonomy is derived from r_q0 / r_k0 by the dbt project (``head_metrics``), not here.

    Algorithm (sklearn ``PCA(n_components)`` semantics on the pooled, unweighted X = [Q; K]):
    eigen-decomposition of C = (X - x̄)ᵀ(X - x̄)/(N - 1) (d x d ``eigh``); n_pc = min(n_components,
    N, d); ``explained_variance_ratio = λ_i / tr C``; components first oriented "largest-magnitude
    loading positive", then sign-canonicalised with σ_i = sign(r_q,i) if |r_q,i| >=
    ``params.sign_threshold`` else sign(r_k,i) (σ = +1 when the anchor is 0).  Scores
    z^Q = (Q - x̄) v_i, z^K = (K - x̄) v_i share the pooled mean.

    Correlations/variances of the scores are evaluated from the class moments
    (Cov(z^Q_i, t) = v_iᵀ Σ(q - μ_Q)(t - t̄) / (n_q - 1), Var = v_iᵀ Σ_Q v_i), which is algebraically
    identical to Pearson on the projected rows.

    Parameters
    ----------
    head : the head (q: (n_q, d), k: (n_k, d); positions in tokens); n_q, n_k >= 3
    params : :class:`~qkwh.analyses.declared.pca.PCAParams`
    moments : precomputed :func:`stats.head_moments(head) <qkwh.analyses.stats.head_moments>`

    Returns
    -------
    AnalysisResult with tables ``pca_components`` (n_pc rows) and ``pca_heads`` (1 row).
    A head with zero total variance (constant vectors) yields NaN statistics.
    A head whose positions are all equal yields r = 0 (zero-variance rule: a correlation with a
    constant side is 0) and p = NaN.

    Raises
    ------
    ValueError : malformed input or fewer than 3 query / key rows.
    """
    mom = moments if moments is not None else stats.head_moments(head)
    n, d, n_q, n_k = mom.n, mom.d, mom.n_q, mom.n_k
    n_pc = int(min(params.n_components, n, d))

    cov = mom.scatter / (n - 1)
    total = float(np.trace(cov))
    if bool(stats.is_zero_variance(total, mom.msq)):
        return _nan_result(mom, n_pc)
    # top n_pc eigenpairs only (LAPACK syevr); the total variance is the trace
    lam, vecs = linalg.eigh(cov, subset_by_index=[d - n_pc, d - 1], driver="evr")
    lam = np.maximum(lam[::-1], 0.0)
    v0, _ = stats.orient_largest_positive(vecs[:, ::-1])
    evr = lam / total

    # Pearson of the scores with position, from the class moments
    sq_q = np.einsum("ij,ik,kj->j", v0, mom.scatter_q, v0)  # Σ (z^Q - mean)^2, (n_pc,)
    sq_k = np.einsum("ij,ik,kj->j", v0, mom.scatter_k, v0)
    r_q_raw = stats.pearson_from_moments(
        v0.T @ mom.cross_qt,
        sq_q,
        mom.stt,
        x_mean_square=mom.msq_q,
        y_mean_square=float(mom.t @ mom.t) / n_q,
        n=n_q,
        if_constant=0.0,
    )
    r_k_raw = stats.pearson_from_moments(
        v0.T @ mom.cross_ks,
        sq_k,
        mom.sss,
        x_mean_square=mom.msq_k,
        y_mean_square=float(mom.s @ mom.s) / n_k,
        n=n_k,
        if_constant=0.0,
    )
    use_q = np.abs(r_q_raw) >= params.sign_threshold
    anchor_r = np.where(use_q, r_q_raw, r_k_raw)
    sigma = np.where(anchor_r < 0, -1.0, 1.0)
    v = v0 * sigma
    r_q, r_k = r_q_raw * sigma, r_k_raw * sigma
    zero_t = bool(stats.is_zero_variance(mom.stt / n_q, float(mom.t @ mom.t) / n_q))
    zero_s = bool(stats.is_zero_variance(mom.sss / n_k, float(mom.s @ mom.s) / n_k))
    p_q = np.where(
        zero_t | stats.is_zero_variance(sq_q / n_q, mom.msq_q),
        np.nan,
        stats.pearson_pvalue(r_q, n_q),
    )
    p_k = np.where(
        zero_s | stats.is_zero_variance(sq_k / n_k, mom.msq_k),
        np.nan,
        stats.pearson_pvalue(r_k, n_k),
    )

    xbar = mom.mean
    mean_q = (mom.mu_q - xbar) @ v
    mean_k = (mom.mu_k - xbar) @ v
    var_q = sq_q / (n_q - 1)
    var_k = sq_k / (n_k - 1)

    res = AnalysisResult()
    res.add(
        "pca_components",
        {
            "pc": np.arange(n_pc, dtype=np.int64),
            "explained_variance_ratio": evr,
            "r_q": r_q,
            "r_k": r_k,
            "p_q": p_q,
            "p_k": p_k,
            "sign_flipped": sigma < 0,
            "anchor": np.where(use_q, "q", "k").astype(object),
            "mean_q": mean_q,
            "mean_k": mean_k,
            "var_q": var_q,
            "var_k": var_k,
        },
    )

    # per-head summaries
    pos_var_q = float(np.sum(evr * r_q**2))
    pos_var_k = float(np.sum(evr * r_k**2))
    pos_exact_q = _pos_var_exact(mom.cross_qt, mom.stt, mom.scatter_q, zero_t, mom.msq_q, n_q)
    pos_exact_k = _pos_var_exact(mom.cross_ks, mom.sss, mom.scatter_k, zero_s, mom.msq_k, n_k)
    dmean0 = float(mean_q[0] - mean_k[0])
    acc = _lda_accuracy_pc01(mom, v[:, : min(2, n_pc)], xbar)
    res.add(
        "pca_heads",
        _heads_row(
            mom,
            ev0=evr[0],
            ev1=evr[1] if n_pc > 1 else np.nan,
            r_q0=r_q[0],
            r_k0=r_k[0],
            pos_var_q_thesis=pos_var_q,
            pos_var_k_thesis=pos_var_k,
            pc0_share_pos_q=_safe_div(evr[0] * r_q[0] ** 2, pos_var_q),
            pc0_share_pos_k=_safe_div(evr[0] * r_k[0] ** 2, pos_var_k),
            pos_var_q_exact=pos_exact_q,
            pos_var_k_exact=pos_exact_k,
            qk_sep_pc0=abs(dmean0),
            fisher_pc0=_safe_div(dmean0**2, float(var_q[0] + var_k[0])),
            qk_acc_pc01=acc,
        ),
    )
    # the canonicalised components and the pooled mean, for PC0/PC1 collages (z = (x - mean)·pc)
    res.add(
        "pca_axes",
        {
            "axis": np.array(["mean", *(f"pc{i}" for i in range(n_pc))], dtype=object),
            "vec": np.vstack([xbar, v.T]),
        },
    )
    return res


def _lda_accuracy_pc01(mom: stats.HeadMoments, v: np.ndarray, xbar: np.ndarray) -> float:
    """In-sample 2-D LDA accuracy on (z_0, z_1) (see :func:`stats.lda_direction`).

    Class means Vᵀ(μ - x̄) and the pooled within-class covariance Vᵀ(S_Q + S_K)V/N come from the
    moments; the discriminant z·w + w0 = (x - x̄)·(V w) + w0 then needs one matrix-vector
    product per class instead of projecting every row on both components.
    """
    m_q, m_k = (mom.mu_q - xbar) @ v, (mom.mu_k - xbar) @ v
    s_w = v.T @ (mom.scatter_q + mom.scatter_k) @ v / mom.n
    w, w0 = stats.lda_direction(m_q[None], m_k[None], s_w[None], mom.n_q, mom.n_k, scale=mom.msq)
    if np.isnan(w0[0]):
        return float("nan")
    u = v @ w[0]
    score_q = mom.qc @ u + (float(m_q @ w[0]) + w0[0])
    score_k = mom.kc @ u + (float(m_k @ w[0]) + w0[0])
    return (np.count_nonzero(score_q > 0) + np.count_nonzero(score_k <= 0)) / mom.n


def _pos_var_exact(
    cross: np.ndarray, spp: float, scatter: np.ndarray, zero_pos: bool, msq: float, n: int
) -> float:
    """‖Cov(x, p)‖² / (Var(p) · tr Σ_x): fraction of a class's variance linear in position.

    Basis-free (``pos_var_*_exact`` in docs/metrics/pca.md); ddof cancels.  0 when positions or vectors
    have zero variance (the Pearson zero-variance rule), so it stays in [0, 1].
    """
    tr = float(np.trace(scatter))
    if zero_pos or bool(stats.is_zero_variance(tr / n, msq)):
        return 0.0
    return float(cross @ cross) / (spp * tr)


def run(
    head: HeadData, params: PCAParams, *, seed: int, shared: Mapping[str, Any]
) -> AnalysisResult:
    """The registered function (``qkwh.analyses.declared.pca``): :func:`analyse` with the shared
    per-head precomputations."""
    return analyse(head, params, moments=shared.get("moments"))
