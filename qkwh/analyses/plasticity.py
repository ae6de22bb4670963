"""Attention plasticity of one head (docs/metrics/plasticity.md).

Pipeline for one :class:`~qkwh.analyses.types.HeadData` (all arithmetic in float64; "step N"
refers to the steps of that page):

1. orientation (step 1): flip head dims so that the mean of the per-key-bucket key means is >= 0;
2. per-dimension OLS ``X = alpha + beta t + R`` on the oriented queries and the diagnostics of
   step 2 (R², scalar position predictability, residual normality) plus component weights;
3. Householder reflection ``x -> x - 2 (x.v) v`` mapping ``beta_hat`` to ``e_1`` (step 3), applied
   to queries and keys: coordinate 0 is positional, coordinates 1..d-1 are semantic;
4. per query bucket ``j`` a Gaussian query model ``N(w_j, Sigma'_j)`` (step 4), with
   ``w_j = [alpha_pos + beta_pos tau_j, mu_j]`` and ``Sigma'_j = diag(sigma2_pos) (+) Sigma_j``;
5. admissible key pairs: two distinct eligible keys of one example (step 5); plasticity of a
   pair ``PP = 4 Phi(z) Phi(-z)``, ``z = m / sqrt(v)`` (step 6); bucket value ``AP_j`` = mean PP
   over ``P`` sampled pairs (``pairs="sampled"``) or over *all* admissible pairs
   (``pairs="exhaustive"``, per-example Gram matrices, step 5); with ``empirical=True`` the
   same pairs are also scored with the bucket's real queries (the empirical estimator):
   ``PP_emp = 4 p (1-p) n/(n-1)``, p = share of queries with ``q.k1 > q.k2``;
6. outputs: ``plasticity_heads`` (1 row), ``plasticity_buckets`` (1 row per query bucket),
   ``plasticity_heatmap`` (accumulators per (q_bucket, dx_bin, dm_bin)), ``plasticity_components``
   (1 row per head dim).

The pieces are small pure functions (documented with shapes) in three modules, re-exported here
so that tests and SQL UDFs can reuse them from one place:

* :mod:`qkwh.analyses.plasticity_model`: the closed-form query model (orientation, position
  regression, Householder alignment, per-bucket Gaussian model, closed-form pair plasticity);
* :mod:`qkwh.analyses.plasticity_pairs`: admissible pairs (counting, sampling, enumeration) and
  the bucket estimators over them (sampled, exhaustive, empirical), with the heatmap accumulators;
* :mod:`qkwh.analyses.normality`: skewness, kurtosis and exact KS p-values of the residuals.

Head-level aggregates of the buckets (ap_overall, deciles, first/last 20 %, ap_drop, and their
empirical counterparts) are derived by the dbt project, the one place they are computed.

Choices made where the method description leaves a detail open are marked ``[RES]`` in the
docstrings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from qkwh.analyses.declared.plasticity import PlasticityParams
from qkwh.analyses.moments import (
    QueryMoments,
    cap_rows,  # re-exported: the cap is the caller's job
    query_moments,
)
from qkwh.analyses.normality import (  # noqa: F401 (_kstwo_sf_one: tests)
    _kstwo_sf_one,
    ks_norm_pvalues,
    ks_summary,
    standardised_moments,
)
from qkwh.analyses.plasticity_model import (
    HOUSEHOLDER_TOL,
    PositionalModel,
    QueryModel,
    Regression,
    _upper_cholesky,  # noqa: F401 (tests)
    apply_householder,
    component_weights,
    fit_position_regression,
    householder_vector,
    orientation_signs,
    pair_plasticity,
    query_model,
    query_model_from_moments,
    reflect_symmetric,
    scalar_position_predictability,
)
from qkwh.analyses.plasticity_pairs import (
    GRAM_BLOCK,
    HEAT_DENSE_MAX,
    BucketEstimate,
    EmpiricalEstimate,
    HeatmapAccumulator,
    admissible_pair_counts,
    empirical_pair_plasticity,
    enumerate_pairs,
    exhaustive_bucket,
    net_wins,
    sample_pairs,
    sampled_bucket,
)
from qkwh.analyses.types import AnalysisResult, HeadData
from qkwh.params import pair_seed

# private helpers the tests exercise directly (_kstwo_sf_one, _upper_cholesky above)
_ks_summary = ks_summary
# block sizes passed to the bucket estimators at each call (tests shrink them to force blocking)
_GRAM_BLOCK = GRAM_BLOCK
_HEAT_DENSE_MAX = HEAT_DENSE_MAX
__all__ = [  # with re-exports
    "BucketEstimate",
    "EmpiricalEstimate",
    "HeatmapAccumulator",
    "PositionalModel",
    "QueryModel",
    "Regression",
    "admissible_pair_counts",
    "analyse",
    "apply_householder",
    "cap_rows",
    "component_weights",
    "empirical_pair_plasticity",
    "enumerate_pairs",
    "exhaustive_bucket",
    "fit_position_regression",
    "householder_vector",
    "KeyLayout",
    "key_layout",
    "ks_norm_pvalues",
    "net_wins",
    "orientation_signs",
    "pair_plasticity",
    "query_model",
    "sample_pairs",
    "scalar_position_predictability",
    "standardised_moments",
]


HEADS, BUCKETS, HEATMAP, COMPONENTS = (
    "plasticity_heads",
    "plasticity_buckets",
    "plasticity_heatmap",
    "plasticity_components",
)

_DIAG_COLUMNS = (
    "q_R2_pos",
    "q_beta_norm",
    "q_R2_scalar",
    "q_mae_baseline",
    "q_mae_proj",
    "q_mae_ratio",
    "q_resid0_skew",
    "q_resid0_kurt",
    "q_resid0_ks_p",
    "q_noise_med_abs_skew",
    "q_noise_med_abs_kurt",
    "q_noise_med_ks_p",
    "q_noise_frac_ks_p_lt_alpha",
)

#: Columns this module writes, per table (the schema's minus the head key and config_id).
COLUMNS: dict[str, tuple[str, ...]] = {
    HEADS: (
        "n_q",
        "n_k",
        "d",
        *_DIAG_COLUMNS,
        "alpha_pos",
        "beta_pos",
        "sigma2_pos",
        "seed_used",
        "context_length",
        "cov_mode",
        "eligibility",
        "pairs",
        "empirical",
    ),
    BUCKETS: (
        "q_bucket",
        "bucket_position",
        "bucket_midpoint",
        "bucket_frac",
        "n_queries",
        "n_eligible_keys",
        "n_admissible_pairs",
        "n_pairs",
        "ap_bucket",
        "ap_bucket_se",
        "mean_abs_z",
        "ap_bucket_empirical",
        "ap_bucket_empirical_se",
        "gauss_gap_se",
        "mode",
    ),
    HEATMAP: ("q_bucket", "dx_bin", "dm_bin", "n", "sum_pp", "sum_pp2"),
    COMPONENTS: ("component", "component_r2", "component_weight"),
}


# ---------------------------------------------------------------------------------------------
# The analysis
# ---------------------------------------------------------------------------------------------
def _validate(head: HeadData) -> tuple[np.ndarray, np.ndarray]:
    q = np.asarray(head.q)
    k = np.asarray(head.k)
    if q.ndim != 2:
        raise ValueError(f"plasticity: q must be a 2-D (n_q, d) array; got shape {q.shape}")
    if k.ndim == 1 and k.size == 0:
        k = k.reshape(0, q.shape[1])
    if k.ndim != 2:
        raise ValueError(f"plasticity: k must be a 2-D (n_k, d) array; got shape {k.shape}")
    if k.shape[1] != q.shape[1]:
        raise ValueError(
            f"plasticity: head dimension mismatch: q has d={q.shape[1]} but k has d={k.shape[1]}"
        )
    if q.shape[1] < 1:
        raise ValueError("plasticity: head dimension d must be >= 1")
    for name, arr, n in (
        ("q_pos", head.q_pos, q.shape[0]),
        ("q_example", head.q_example, q.shape[0]),
        ("q_bucket", head.q_bucket, q.shape[0]),
        ("k_pos", head.k_pos, k.shape[0]),
        ("k_example", head.k_example, k.shape[0]),
        ("k_bucket", head.k_bucket, k.shape[0]),
    ):
        if np.shape(arr) != (n,):
            raise ValueError(
                f"plasticity: {name} must have shape ({n},) to match the vectors; got {np.shape(arr)}"
            )
    if not head.bucket_size or head.bucket_size <= 0:
        raise ValueError(f"plasticity: bucket_size must be positive; got {head.bucket_size!r}")
    if not head.context_length or head.context_length <= 0:
        raise ValueError(
            f"plasticity: context_length must be positive; got {head.context_length!r}"
        )
    if head.sliding_window is not None and head.sliding_window <= 0:
        raise ValueError(
            f"plasticity: sliding_window must be positive or None; got {head.sliding_window!r}"
        )
    return q, k


@dataclass(frozen=True)
class KeyLayout:
    """The keys of one head as plasticity reads them (arrays read-only).

    Sorted by (example, position); they depend on the key rows alone, so the heads of one GQA
    group share them (``qkwh compute`` builds them once per k file).

    Attributes
    ----------
    example_ids : (E,) the distinct example ids;  example : (n_k,) each key's index into them
    position : (n_k,) float64;  bucket : (n_k,) int64
    k64 : (n_k, d) the key vectors in this order, as float64 (the values as read: a float32
        input converts exactly)
    signs : (d,) the orientation signs of step 1 (:func:`orientation_signs`), +-1.0
    """

    example_ids: np.ndarray
    example: np.ndarray
    position: np.ndarray
    bucket: np.ndarray
    k64: np.ndarray
    signs: np.ndarray


def key_layout(
    k: np.ndarray, k_pos: np.ndarray, k_example: np.ndarray, k_bucket: np.ndarray
) -> KeyLayout:
    """The :class:`KeyLayout` of key rows ``k`` (n_k, d) with positions, examples and buckets (n_k,)."""
    k_ex_ids, k_ex = np.unique(np.asarray(k_example), return_inverse=True)
    k_ex = k_ex.reshape(-1)
    korder = np.lexsort((np.asarray(k_pos), k_ex))
    k_ex = k_ex[korder]
    position = np.asarray(k_pos, dtype=np.float64)[korder]
    bucket = np.asarray(k_bucket, dtype=np.int64)[korder]
    k64 = np.take(np.asarray(k), korder, axis=0).astype(np.float64)
    signs = orientation_signs(k64, bucket)
    out = KeyLayout(k_ex_ids, k_ex, position, bucket, k64, signs)
    for a in (out.example_ids, out.example, out.position, out.bucket, out.k64, out.signs):
        a.flags.writeable = False  # shared between heads: never modified in place
    return out


def head_key_layout(head: HeadData) -> KeyLayout:
    """:func:`key_layout` of ``head``'s keys, after the same checks as :func:`analyse`."""
    _, k = _validate(head)
    return key_layout(k, head.k_pos, head.k_example, head.k_bucket)


def _q_diagnostics(
    t: np.ndarray,
    Qc: np.ndarray,
    reg: Regression,
    beta_norm: float,
    params: PlasticityParams,
    seed: int,
) -> dict[str, float]:
    """The q_* columns of step 2 from the *centred* rotated queries ``Qc`` (n x d, n >= 2).

    Rotated coordinate 0 is ``beta_hat . x`` (the scalar projection); the semantic coordinates
    1..d-1 have zero slope, so centring them equals taking their regression residuals.
    """
    n, d = Qc.shape
    out: dict[str, float] = {}
    out["q_R2_pos"] = float(np.nanmean(reg.r2)) if np.isfinite(reg.r2).any() else math.nan
    out["q_beta_norm"] = beta_norm
    proj = Qc[:, 0] if beta_norm >= HOUSEHOLDER_TOL else np.zeros(n)
    (out["q_R2_scalar"], out["q_mae_baseline"], out["q_mae_proj"], out["q_mae_ratio"]) = (
        scalar_position_predictability(t, proj)
    )
    # rotated coordinate 0: residual of OLS on t, standardised (ddof=1)
    x0 = Qc[:, 0]
    tc = t - t.mean()
    stt = float(tc @ tc)
    b0 = float(tc @ x0) / stt if stt > 0 else 0.0
    res = x0 - x0.mean() - b0 * tc
    sd = math.sqrt(float(res @ res) / (n - 1))
    z0 = (res / sd if sd > 0 else res)[:, None]
    sk, ku = standardised_moments(z0, n)
    out["q_resid0_skew"], out["q_resid0_kurt"] = float(sk[0]), float(ku[0])
    out["q_resid0_ks_p"] = float(ks_norm_pvalues(z0)[0]) if sd > 0 else math.nan
    # semantic coordinates 1..d-1 (columns of Qc have mean 0), standardised per dim (ddof=1,
    # sd 0 -> 1); skewness/kurtosis are scale-free, so only the KS columns are standardised
    if d > 1:
        sk, ku = standardised_moments(Qc, n)
        sk, ku = sk[1:], ku[1:]
        out["q_noise_med_abs_skew"] = (
            float(np.nanmedian(np.abs(sk))) if np.isfinite(sk).any() else math.nan
        )
        out["q_noise_med_abs_kurt"] = (
            float(np.nanmedian(np.abs(ku))) if np.isfinite(ku).any() else math.nan
        )
        n_dims = min(int(params.normality_max_dims), d - 1)
        dims = 1 + np.random.default_rng(seed).choice(d - 1, n_dims, replace=False)
        Zt = Qc.T[dims]  # (n_dims, n)
        sds = np.sqrt(np.einsum("ij,ij->i", Zt, Zt) / (n - 1))
        Zt /= np.where(sds > 0, sds, 1.0)[:, None]
        out["q_noise_med_ks_p"], out["q_noise_frac_ks_p_lt_alpha"] = ks_summary(Zt, params.p_alpha)
    else:
        for c in (
            "q_noise_med_abs_skew",
            "q_noise_med_abs_kurt",
            "q_noise_med_ks_p",
            "q_noise_frac_ks_p_lt_alpha",
        ):
            out[c] = math.nan
    return out


def _nan_diagnostics() -> dict[str, float]:
    return dict.fromkeys(_DIAG_COLUMNS, math.nan)


def analyse(
    head: HeadData,
    params: PlasticityParams,
    *,
    seed: int,
    moments: QueryMoments | None = None,
    keys: KeyLayout | None = None,
    diagnostics: bool = True,
) -> AnalysisResult:
    """Attention plasticity of one head -> the four ``plasticity_*`` tables (docs/metrics/plasticity.md).

    head : Q (n_q x d), K (n_k x d) and row metadata; ``head.bucket_size`` is the heatmap width
        W and the midpoint unit, ``head.context_length`` is L_ctx, ``head.sliding_window`` (tokens
        or None) restricts eligible keys to ``tau_j - s <= window``.
    params : :class:`~qkwh.analyses.declared.plasticity.PlasticityParams` (cov_mode, eligibility, pairs, P, ...).
    seed : the run's base seed; normality dims use ``default_rng(seed)``, pairs use
        ``default_rng(pair_seed(seed, layer, q_head))`` consumed bucket by bucket in increasing j.
    moments : the head's :func:`~qkwh.analyses.moments.query_moments` when already computed
        (shared with PCA and rotation); built here otherwise.
    keys : the head's :func:`key_layout` when already computed (shared by the heads of a GQA
        group); built here otherwise.
    diagnostics : False leaves the q_* diagnostics of ``plasticity_heads`` NaN (the RoPE band
        analysis reads the buckets only); nothing else depends on them.

    Degenerate input never raises: no keys, n_q < 2, buckets with n_j < 2 or no admissible pair
    produce rows with NaN plasticity.  Inconsistent shapes raise ``ValueError`` naming the array.
    The ``max_tokens_per_head`` cap is the caller's job (:func:`cap_rows`).

    Cost (n_q = n_k = 8000, d = 128, 16 buckets, P = 1024, one BLAS thread): O(n d) passes for
    orientation / regression / reflection, O(n_j d²) per bucket covariance (+ Cholesky), one
    triangular multiply per bucket for the P pair variances, one float32 sort for the 64 KS
    columns; no Python loop over pairs or rows.  Exhaustive mode adds O(sum_e G_e d²) per bucket.
    """
    if params.cov_mode not in ("full", "diag", "global_diag"):
        raise ValueError(
            f"plasticity.cov_mode must be one of full, diag, global_diag; got {params.cov_mode!r}"
        )
    if params.eligibility not in ("position", "strict_bucket"):
        raise ValueError(
            f"plasticity.eligibility must be one of position, strict_bucket; got {params.eligibility!r}"
        )
    if params.pairs not in ("sampled", "exhaustive"):
        raise ValueError(
            f"plasticity.pairs must be one of sampled, exhaustive; got {params.pairs!r}"
        )
    q_in, k_in = _validate(head)
    n_q, d = q_in.shape
    n_k = k_in.shape[0]
    P = int(params.num_pairs_per_bucket)
    W = float(head.bucket_size)
    L = float(head.context_length)
    used_seed = pair_seed(seed, head.layer, head.q_head)
    mode_tag = f"{params.pairs}/{params.cov_mode}/{params.eligibility}"

    # queries sorted by bucket (stable): every bucket is a contiguous block; all statistics
    # are row-order free, so this only changes floating summation order (deterministically).
    # The head's query moments (shared with PCA and rotation) hold them that way, centred, with
    # each bucket's mean and scatter matrix.
    qm = moments if moments is not None else query_moments(q_in, head.q_pos, head.q_bucket)
    qorder = qm.order
    t = qm.t

    # -- keys: sort by (example, position); orientation from key bucket means ---------------
    kl = keys if keys is not None else key_layout(k_in, head.k_pos, head.k_example, head.k_bucket)
    k_ex_ids, k_ex, k_pos, k_bkt = kl.example_ids, kl.example, kl.position, kl.bucket
    # the empirical estimator scores raw vectors: q.k is unchanged by orientation and reflection
    k_raw = kl.k64 if params.empirical else None
    signs = kl.signs if params.orientation else np.ones(d)
    K = kl.k64 * signs  # this head's copy: reflected in place below

    # -- regression on oriented queries, Householder, diagnostics -------------------------------
    # Qc = oriented queries minus their mean; rotated in place below (H(x - xbar) = Hx - H xbar)
    # the empirical estimator scores raw queries
    q_sorted = np.take(np.asarray(q_in), qorder, axis=0) if params.empirical else None
    # oriented queries minus their mean: sign flips are exact, so this is (q * signs) - mean
    # of (q * signs) to the last bit
    Qc = qm.qc * signs
    if n_q >= 1:
        qbar = qm.mu * signs
        reg = fit_position_regression(t, Qc, centred=True)
        reg = Regression(reg.alpha + qbar, reg.beta, reg.r2, reg.ss_res, reg.ss_tot)
        beta_norm = float(np.linalg.norm(reg.beta))
        v = householder_vector(reg.beta)
        qbar_rot = apply_householder(qbar[None, :], v)[0]
    else:
        nan = np.full(d, np.nan)
        reg = Regression(nan, nan, nan, nan, nan)
        beta_norm, v, qbar_rot = math.nan, None, nan
    apply_householder(Qc, v, inplace=True)
    apply_householder(K, v, inplace=True)
    Kr = K
    diag = (
        _q_diagnostics(t, Qc, reg, beta_norm, params, seed)
        if n_q >= 2 and diagnostics
        else _nan_diagnostics()
    )
    if n_q >= 1:
        pos_model = PositionalModel.fit(t, Qc[:, 0] + qbar_rot[0], beta_norm)
    else:
        pos_model = PositionalModel(math.nan, math.nan, math.nan)
    global_fit = global_resid_var = None
    if params.cov_mode == "global_diag" and n_q >= 2:
        g = fit_position_regression(t, Qc, centred=True)
        global_fit = Regression(g.alpha + qbar_rot, g.beta, g.r2, g.ss_res, g.ss_tot)
        global_resid_var = g.ss_res / (n_q - 1)

    # -- buckets ------------------------------------------------------------------------------
    rng = np.random.default_rng(used_seed)
    buckets, bstart, bcount = qm.buckets, qm.start, qm.count
    nb = len(buckets)
    # per-bucket rotated moments from the shared ones: mean H D m_b, scatter H D S_b D H
    # (D = diag(signs), H the reflection; O(d²) per bucket instead of a pass over its rows)
    flip = np.outer(signs, signs)
    b_tau = np.full(nb, np.nan)
    b_elig = np.zeros(nb, dtype=np.int64)
    b_adm = np.zeros(nb, dtype=np.int64)
    b_npairs = np.zeros(nb, dtype=np.int64)
    b_ap = np.full(nb, np.nan)
    b_se = np.full(nb, np.nan)
    b_z = np.full(nb, np.nan)
    b_emp = np.full(nb, np.nan)
    b_emp_se = np.full(nb, np.nan)
    b_gap_se = np.full(nb, np.nan)
    heat_rows: list[tuple[int, tuple[np.ndarray, ...]]] = []
    model_ok = n_k > 0 and np.isfinite(pos_model.sigma2_pos) and np.isfinite(pos_model.alpha_pos)
    window = head.sliding_window
    buffers = (
        (np.empty((P, d)), np.empty((P, d))) if params.pairs == "sampled" and n_k > 1 else None
    )
    for bi, j in enumerate(buckets):
        rows = slice(int(bstart[bi]), int(bstart[bi] + bcount[bi]))
        tau = float(t[rows].mean())
        b_tau[bi] = tau
        if params.eligibility == "position":
            mask = k_pos < tau
        else:
            mask = k_bkt < j
        if window is not None:
            mask &= (tau - k_pos) <= float(window)
        elig = np.flatnonzero(mask)
        counts = np.bincount(k_ex[elig], minlength=len(k_ex_ids)).astype(np.int64)
        total = int(admissible_pair_counts(counts).sum())
        b_elig[bi] = len(elig)
        b_adm[bi] = total
        if bcount[bi] < 2 or total == 0 or not model_ok:
            continue
        if qm.bucket_scatter is None or params.cov_mode == "global_diag":
            model = query_model(
                Qc[rows],
                tau,
                pos_model,
                params.cov_mode,
                params.eps,
                global_fit=global_fit,
                global_resid_var=global_resid_var,
                offset=qbar_rot,
            )
        else:
            mean_rot = apply_householder((qm.bucket_mean[bi] * signs)[None, :], v)[0]
            model = query_model_from_moments(
                mean_rot,
                reflect_symmetric(qm.bucket_scatter[bi] * flip, v),
                int(bcount[bi]),
                tau,
                pos_model,
                params.cov_mode,
                params.eps,
                offset=qbar_rot,
            )
        kw: dict[str, Any] = dict(
            bucket_width=W,
            num_pairs=P,
            var_floor=params.var_floor,
            queries=q_sorted[rows] if params.empirical else None,  # type: ignore[index]
            keys_raw=k_raw,
            gram_block=_GRAM_BLOCK,
            heat_dense_max=_HEAT_DENSE_MAX,
        )
        if params.pairs == "exhaustive":
            est = exhaustive_bucket(Kr, k_pos, counts, model, rows=elig, **kw)
        else:
            est = sampled_bucket(rng, Kr, k_pos, elig, counts, model, buffers=buffers, **kw)
        b_npairs[bi] = est.n_pairs
        b_ap[bi], b_se[bi], b_z[bi] = est.ap, est.se, est.mean_abs_z
        if est.empirical is not None:
            b_emp[bi], b_emp_se[bi], b_gap_se[bi] = (
                est.empirical.ap,
                est.empirical.se,
                est.empirical.gap_se,
            )
        if est.heat is not None:
            heat_rows.append((int(j), est.heat.rows()))

    result = AnalysisResult()
    # -- plasticity_buckets ------------------------------------------------------------------
    result.add(
        BUCKETS,
        {
            "q_bucket": buckets.astype(np.int64),
            "bucket_position": b_tau,
            "bucket_midpoint": (buckets + 0.5) * W,
            "bucket_frac": b_tau / L,
            "n_queries": bcount.astype(np.int64),
            "n_eligible_keys": b_elig,
            "n_admissible_pairs": b_adm,
            "n_pairs": b_npairs,
            "ap_bucket": b_ap,
            "ap_bucket_se": b_se,
            "mean_abs_z": b_z,
            "ap_bucket_empirical": b_emp,
            "ap_bucket_empirical_se": b_emp_se,
            "gauss_gap_se": b_gap_se,
            "mode": np.array([mode_tag] * nb, dtype=object),
        },
    )
    # -- plasticity_heatmap --------------------------------------------------------------------
    if heat_rows:
        parts = [(np.full(len(r[0]), j, dtype=np.int64), *r) for j, r in heat_rows]
        cols = [np.concatenate(c) for c in zip(*parts)]
    else:
        cols = [np.zeros(0, np.int64)] * 4 + [np.zeros(0), np.zeros(0)]
    result.add(HEATMAP, dict(zip(COLUMNS[HEATMAP], cols)))
    # -- plasticity_components -----------------------------------------------------------------
    r2 = np.asarray(reg.r2, dtype=np.float64) if n_q >= 2 else np.full(d, np.nan)
    result.add(
        COMPONENTS,
        {
            "component": np.arange(d, dtype=np.int64),
            "component_r2": r2,
            "component_weight": component_weights(r2) if n_q >= 2 else np.full(d, np.nan),
        },
    )
    # -- plasticity_heads ----------------------------------------------------------------------
    row: dict[str, object] = {"n_q": n_q, "n_k": n_k, "d": d, **diag}
    row.update(
        alpha_pos=pos_model.alpha_pos,
        beta_pos=pos_model.beta_pos,
        sigma2_pos=pos_model.sigma2_pos,
        seed_used=used_seed,
        context_length=int(head.context_length),
        cov_mode=params.cov_mode,
        eligibility=params.eligibility,
        pairs=params.pairs,
        empirical=bool(params.empirical),
    )
    heads = {}
    for c in COLUMNS[HEADS]:
        val = row[c]
        heads[c] = np.array([val], dtype=object if isinstance(val, str) else None)
    result.add(HEADS, heads)
    return result


def run(
    head: HeadData, params: PlasticityParams, *, seed: int, shared: Mapping[str, Any]
) -> AnalysisResult:
    """The registered function (``qkwh.analyses.declared.plasticity``): :func:`analyse` with the shared
    per-head precomputations."""
    return analyse(
        head, params, seed=seed, moments=shared.get("query_moments"), keys=shared.get("key_layout")
    )
