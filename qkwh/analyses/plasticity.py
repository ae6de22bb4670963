"""Attention plasticity of one head (spec §2.3, §2.3.8b).

Pipeline for one :class:`~qkwh.analyses.types.HeadData` (all arithmetic in float64):

1. orientation (§2.3.1): flip head dims so that the mean of the per-key-bucket key means is >= 0;
2. per-dimension OLS ``X = alpha + beta t + R`` on the oriented queries and the diagnostics of
   §2.3.2 (R², scalar position predictability, residual normality) plus component weights;
3. Householder reflection ``x -> x - 2 (x.v) v`` mapping ``beta_hat`` to ``e_1`` (§2.3.3), applied
   to queries and keys: coordinate 0 is positional, coordinates 1..d-1 are semantic;
4. per query bucket ``j`` a Gaussian query model ``N(w_j, Sigma'_j)`` (§2.3.4), with
   ``w_j = [alpha_pos + beta_pos tau_j, mu_j]`` and ``Sigma'_j = diag(sigma2_pos) (+) Sigma_j``;
5. admissible key pairs: two distinct eligible keys of one example (§2.3.5); plasticity of a
   pair ``PP = 4 Phi(z) Phi(-z)``, ``z = m / sqrt(v)`` (§2.3.6); bucket value ``AP_j`` = mean PP
   over ``P`` sampled pairs (``pairs="sampled"``) or over *all* admissible pairs
   (``pairs="exhaustive"``, per-example Gram matrices, §2.3.8b); with ``empirical=True`` the
   same pairs are also scored with the bucket's real queries (§2.3.10): ``PP_emp = 4 p (1-p)
   n/(n-1)``, p = share of queries with ``q.k1 > q.k2``;
6. outputs: ``plasticity_heads`` (1 row), ``plasticity_buckets`` (1 row per query bucket),
   ``plasticity_heatmap`` (accumulators per (q_bucket, dx_bin, dm_bin)), ``plasticity_components``
   (1 row per head dim).

The pieces are small pure functions (documented with shapes) so that tests and SQL UDFs can reuse
them: :func:`cap_rows`, :func:`orientation_signs`, :func:`fit_position_regression`,
:func:`householder_vector`, :func:`apply_householder`, :func:`component_weights`,
:func:`scalar_position_predictability`, :func:`ks_norm_pvalues`, :func:`query_model`,
:func:`pair_plasticity`, :func:`admissible_pair_counts`, :func:`sample_pairs`,
:func:`enumerate_pairs`, :func:`exhaustive_bucket`, :func:`net_wins`,
:func:`empirical_pair_plasticity`.

Head-level aggregates of the buckets (ap_overall, deciles, first/last 20 %, ap_drop, and their
empirical counterparts) are derived by the dbt project, the one place they are computed.

Resolutions of points the spec leaves open are marked ``[RES]`` in the docstrings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as _st
from scipy.linalg import blas as _blas
from scipy.linalg import lapack as _lapack
from scipy.special import gammaln, ndtr

from qkwh.analyses.stats import cap_rows  # re-exported: the cap is the caller's job
from qkwh.analyses.types import AnalysisResult, HeadData
from qkwh.params import PlasticityParams, pair_seed

__all__ = [
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
    "ks_norm_pvalues",
    "net_wins",
    "orientation_signs",
    "pair_plasticity",
    "query_model",
    "sample_pairs",
    "scalar_position_predictability",
    "standardised_moments",
]

HOUSEHOLDER_TOL = 1e-12  # ||beta|| or ||beta_hat - e1|| below this -> H = I (§2.3.3)
SS_TOT_FLOOR = 1e-12  # R² = 1 - SS_res / max(SS_tot, floor) (§2.3.2)
_GRAM_BLOCK = 1 << 20  # max float64 entries of one batched Gram block in exhaustive mode
_HEAT_DENSE_MAX = 1 << 18  # larger (dx_bin, dm_bin) grids are accumulated sparsely

HEADS, BUCKETS, HEATMAP, COMPONENTS = (
    "plasticity_heads",
    "plasticity_buckets",
    "plasticity_heatmap",
    "plasticity_components",
)

_DIAG_COLUMNS = (
    "q_R2_pos", "q_beta_norm",
    "q_R2_scalar", "q_mae_baseline", "q_mae_proj", "q_mae_ratio",
    "q_resid0_skew", "q_resid0_kurt", "q_resid0_ks_p",
    "q_noise_med_abs_skew", "q_noise_med_abs_kurt",
    "q_noise_med_ks_p", "q_noise_frac_ks_p_lt_alpha",
)

#: Columns this module writes, per table (the schema's minus the head key and config_id).
COLUMNS: dict[str, tuple[str, ...]] = {
    HEADS: (
        "n_q", "n_k", "d",
        *_DIAG_COLUMNS,
        "alpha_pos", "beta_pos", "sigma2_pos", "seed_used",
        "context_length",
        "cov_mode", "eligibility", "pairs", "empirical",
    ),
    BUCKETS: (
        "q_bucket", "bucket_position", "bucket_midpoint", "bucket_frac",
        "n_queries", "n_eligible_keys", "n_admissible_pairs", "n_pairs",
        "ap_bucket", "ap_bucket_se", "mean_abs_z",
        "ap_bucket_empirical", "ap_bucket_empirical_se", "gauss_gap_se", "mode",
    ),
    HEATMAP: ("q_bucket", "dx_bin", "dm_bin", "n", "sum_pp", "sum_pp2"),
    COMPONENTS: ("component", "component_r2", "component_weight"),
}


# ---------------------------------------------------------------------------------------------
# §2.3.1 orientation, §2.3.2 regression and diagnostics
# ---------------------------------------------------------------------------------------------
def orientation_signs(k: np.ndarray, k_bucket: np.ndarray) -> np.ndarray:
    """Per-dimension signs ``s`` (shape ``(d,)``, values +-1.0) of §2.3.1.

    ``s = sign(mean over key buckets of the per-bucket key means)``, zeros -> +1.  Every key
    bucket counts once (unweighted over buckets): the statistic is ``sum_i k_i / (B n_{c_i})``,
    one GEMV.  No keys -> all +1.
    """
    k = np.asarray(k)
    d = k.shape[1]
    if k.shape[0] == 0:
        return np.ones(d)
    _, inv, counts = np.unique(np.asarray(k_bucket), return_inverse=True, return_counts=True)
    weights = 1.0 / (len(counts) * counts[inv.reshape(-1)].astype(np.float64))
    m = weights @ k
    return np.where(m < 0, -1.0, 1.0)


@dataclass(frozen=True)
class Regression:
    """Per-dimension OLS ``X[:, c] = alpha[c] + beta[c] t + R`` (all arrays shape ``(d,)``).

    ``ss_res``/``ss_tot`` are the residual and total sums of squares; ``r2`` is
    ``1 - ss_res / max(ss_tot, 1e-12)`` clipped above at 1 (§2.3.2).
    """

    alpha: np.ndarray
    beta: np.ndarray
    r2: np.ndarray
    ss_res: np.ndarray
    ss_tot: np.ndarray


def fit_position_regression(t: np.ndarray, X: np.ndarray, *, centred: bool = False) -> Regression:
    """OLS of every column of ``X`` (n x d) on positions ``t`` (n,), §2.3.2.

    All slopes are zero when ``Var(t) = 0``.  Needs ``n >= 1``.  ``ss_res`` is
    ``max(ss_tot - beta² S_tt, 0)`` (the OLS identity; no n x d residual matrix).  With
    ``centred=True`` the columns of ``X`` are taken to have mean 0 already (alpha is then the
    intercept of the centred data, ``-beta t_bar``).
    """
    t = np.asarray(t, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64)
    tbar = t.mean()
    tc = t - tbar
    stt = float(tc @ tc)
    if centred:
        xbar = np.zeros(X.shape[1])
        Xc = X
    else:
        xbar = X.mean(axis=0)
        Xc = X - xbar
    beta = (tc @ Xc) / stt if stt > 0 else np.zeros(X.shape[1])
    alpha = xbar - beta * tbar
    ss_tot = np.einsum("ij,ij->j", Xc, Xc)
    ss_res = np.maximum(ss_tot - beta * beta * stt, 0.0)
    r2 = np.minimum(1.0 - ss_res / np.maximum(ss_tot, SS_TOT_FLOOR), 1.0)
    return Regression(alpha=alpha, beta=beta, r2=r2, ss_res=ss_res, ss_tot=ss_tot)


def component_weights(r2: np.ndarray) -> np.ndarray:
    """``w_c = max(R²_c, 0) / sum max(R², 0)``; ``1/d`` everywhere if that sum <= 0 (§2.3.2).

    NaN R² values count as 0.  Shape ``(d,)`` in, ``(d,)`` out.
    """
    r2 = np.asarray(r2, dtype=np.float64)
    pos = np.where(np.isfinite(r2), np.maximum(r2, 0.0), 0.0)
    total = pos.sum()
    if not total > 0:
        return np.full(r2.shape, 1.0 / max(r2.size, 1))
    return pos / total


def scalar_position_predictability(t: np.ndarray, s: np.ndarray) -> tuple[float, float, float, float]:
    """``(q_R2_scalar, q_mae_baseline, q_mae_proj, q_mae_ratio)`` of §2.3.2.

    s : (n,) scalar projection ``X u`` of the oriented queries on ``u = beta/||beta||`` (equal to
    rotated coordinate 0).  OLS ``y = log2(t + 1)`` on ``s``; R² as in
    :func:`fit_position_regression`; MAE of the fit and of predicting ``mean(y)``; ratio =
    proj/baseline (1 if baseline is 0).  [RES] when ``||beta|| = 0`` the caller passes a constant
    ``s``: the fit is the mean, R² = 0, MAE_proj = MAE_baseline, ratio = 1.
    """
    t = np.asarray(t, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    y = np.log2(t + 1.0)
    sc = s - s.mean()
    sss = float(sc @ sc)
    yc = y - y.mean()
    slope = float(sc @ yc) / sss if sss > 0 else 0.0
    res = yc - slope * sc
    ss_tot = float(yc @ yc)
    r2 = min(1.0 - float(res @ res) / max(ss_tot, SS_TOT_FLOOR), 1.0)
    mae_base = float(np.mean(np.abs(yc)))
    mae_proj = float(np.mean(np.abs(res)))
    ratio = mae_proj / mae_base if mae_base > 0 else 1.0
    return r2, mae_base, mae_proj, ratio


def standardised_moments(Xc: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Bias-corrected skewness and excess kurtosis of the columns of centred ``Xc`` (n x k).

    Same values as ``scipy.stats.skew(bias=False)`` / ``kurtosis(fisher=True, bias=False)``
    (adjusted Fisher-Pearson G1 and G2; the uncorrected value when n <= 2 resp. n <= 3), but in
    a few vectorised passes.  Columns whose variance is zero or below rounding level
    (``m2 <= (16 eps)² max(m2)``) -> NaN.
    """
    with np.errstate(all="ignore"):
        c2 = Xc * Xc
        m2 = c2.mean(axis=0)
        m3 = np.einsum("ij,ij->j", c2, Xc) / n
        m4 = np.einsum("ij,ij->j", c2, c2) / n
        zero = m2 <= (16 * np.finfo(np.float64).eps) ** 2 * (m2.max() if m2.size else 0.0)
        g1 = m3 / m2**1.5
        g2 = m4 / m2**2
        if n > 2:
            g1 = math.sqrt((n - 1.0) * n) / (n - 2.0) * g1
        if n > 3:
            g2 = 1.0 / (n - 2) / (n - 3) * ((n * n - 1.0) * g2 - 3.0 * (n - 1) ** 2) + 3.0
    return np.where(zero, np.nan, g1), np.where(zero, np.nan, g2 - 3.0)


def _ks_statistics(Zt: np.ndarray, *, overwrite: bool = False) -> np.ndarray:
    """Two-sided one-sample KS statistic vs N(0,1) of each *row* of ``Zt`` (k x n) -> (k,).

    ``D = max_i max(i/n - Phi(x_(i)), Phi(x_(i)) - (i-1)/n)`` over the sorted row, exactly as
    ``scipy.stats.kstest(x, "norm")``.  ``overwrite=True`` sorts ``Zt`` in place (saves a copy).
    Rows with non-finite values -> NaN.
    """
    k, n = Zt.shape
    if n == 0:
        return np.full(k, np.nan)
    srt = Zt if overwrite else np.array(Zt, dtype=np.float64)
    srt.sort(axis=1)
    D = _ks_from_sorted(srt)
    D[~np.isfinite(D)] = np.nan
    return D


def _smirnov_large_n(n: int, x: float) -> float:
    """One-sided ``P(D_n+ >= x)`` by the exact Birnbaum-Tingey sum, vectorised in log space.

    ``x sum_{j <= n(1-x)} C(n, j) (1 - x - j/n)^(n-j) (x + j/n)^(j-1)``: all terms are positive,
    so a log-sum-exp keeps ~1e-12 relative accuracy at n ~ 1e4.  Same quantity as
    ``scipy.special.smirnov(n, x)``, which evaluates it term by term (~20 ms at n = 8000).
    """
    j = np.arange(0, int(math.floor(n * (1.0 - x))) + 1, dtype=np.float64)
    a = 1.0 - x - j / n
    keep = a > 0
    j, a = j[keep], a[keep]
    if j.size == 0:
        return 0.0
    logc = gammaln(n + 1.0) - gammaln(j + 1.0) - gammaln(n - j + 1.0)
    terms = logc + (n - j) * np.log(a) + (j - 1.0) * np.log(x + j / n)
    top = terms.max()
    return float(x * math.exp(top) * np.exp(terms - top).sum())


def _kstwo_sf_one(D: float, n: int) -> float:
    """``scipy.stats.kstwo.sf(D, n)`` (the exact p-value of ``kstest``), faster for large n.

    Follows scipy's own case split (Simard & L'Ecuyer): for n > 140 and ``2.2 <= n D² < 370``
    scipy returns ``2 * smirnov(n, D)``, which is evaluated here by :func:`_smirnov_large_n`
    (agrees to ~1e-11 relative); every other case is delegated to scipy.
    """
    if not np.isfinite(D):
        return math.nan
    t = n * D
    nx2 = t * D
    if n > 140 and 1.0 < t < n - 1 and D < 0.5 and nx2 >= 2.2:
        if nx2 >= 370.0:
            return 0.0
        return min(max(2.0 * _smirnov_large_n(n, D), 0.0), 1.0)
    return float(np.clip(_st.kstwo.sf(D, n), 0.0, 1.0))


def _ks_sf(D: np.ndarray, n: int) -> np.ndarray:
    return np.array([_kstwo_sf_one(float(x), int(n)) for x in np.atleast_1d(D)], dtype=np.float64)


def ks_norm_pvalues(Z: np.ndarray) -> np.ndarray:
    """Exact two-sided KS p-values vs N(0,1) of each column of ``Z`` (n x k) -> (k,).

    Same values as ``scipy.stats.kstest(Z[:, c], "norm").pvalue`` (method "exact":
    ``kstwo.sf(D, n)``, see :func:`_kstwo_sf_one`).  ``n < 1`` -> NaN.
    """
    Z = np.asarray(Z, dtype=np.float64)
    if Z.shape[0] < 1:
        return np.full(Z.shape[1], np.nan)
    return _ks_sf(_ks_statistics(np.ascontiguousarray(Z.T)), Z.shape[0])


_PHI_MAX = 0.3989422804014327  # max of the standard normal density: Phi is _PHI_MAX-Lipschitz


def _ks_from_sorted(srt: np.ndarray) -> np.ndarray:
    """KS statistic vs N(0,1) of rows already sorted ascending (any float dtype) -> (k,) float64."""
    n = srt.shape[1]
    cdf = ndtr(srt, dtype=np.float64)
    dplus = (np.arange(1.0, n + 1.0) / n - cdf).max(axis=1)  # same arithmetic as scipy
    dminus = (cdf - np.arange(0.0, n) / n).max(axis=1)
    return np.maximum(dplus, dminus)


def _ks_summary(Zt: np.ndarray, p_alpha: float) -> tuple[float, float]:
    """``(median p, fraction p < p_alpha)`` of the exact KS p-values of the rows of ``Zt`` (k x n).

    Same values as computing ``scipy.stats.kstest(row, "norm").pvalue`` for every row, at about
    half the cost:

    * screening: the rows are rounded to float32 and sorted (rounding is monotone, so the sorted
      rounded row is the rounded sorted row).  The KS statistic of the rounded row, D32, differs
      from the exact D by at most ``eps = phi(0) * max|x| * 2^-24`` (+ float64 slack);
    * the p-value ``kstwo.sf(D, n)`` is decreasing in D, so the median p-value is the p-value of
      the middle order statistic(s) of D, and ``p < p_alpha`` holds exactly for the rows above a
      threshold located by bisection over the sorted D32 (a few ``sf`` evaluations);
    * rows whose role is not decided by the bound (D32 within 2 eps of a middle order statistic
      or within eps of the threshold bracket) get their exact D from a float64 sort.
    """
    k, n = Zt.shape
    if k == 0 or n < 1:
        return math.nan, math.nan
    if not np.isfinite(Zt).all():
        return math.nan, math.nan
    z32 = Zt.astype(np.float32)
    z32.sort(axis=1)
    d32 = _ks_from_sorted(z32)
    amax = np.maximum(np.abs(z32[:, 0]), np.abs(z32[:, -1])).astype(np.float64)
    eps = float((_PHI_MAX * amax * 2.0**-24).max()) + 1e-14
    exact: dict[int, float] = {}

    def exact_d(rows: np.ndarray) -> None:
        todo = [int(r) for r in rows if int(r) not in exact]
        if todo:
            srt = np.sort(Zt[todo], axis=1)
            for r, dv in zip(todo, _ks_from_sorted(srt)):
                exact[r] = float(dv)

    sf_cache: dict[float, float] = {}

    def sf(dv: float) -> float:
        if dv not in sf_cache:
            sf_cache[dv] = _kstwo_sf_one(dv, n)
        return sf_cache[dv]

    order = np.argsort(d32, kind="stable")
    ds = d32[order]
    # median: exact order statistics of D at the middle rank(s)
    ranks = [k // 2] if k % 2 else [k // 2 - 1, k // 2]
    lo_m, hi_m = ds[ranks[0]] - 2 * eps, ds[ranks[-1]] + 2 * eps
    amb = np.flatnonzero((d32 >= lo_m) & (d32 <= hi_m))
    exact_d(amb)
    below = int(np.sum(d32 < lo_m))
    amb_sorted = np.sort([exact[int(r)] for r in amb])
    med = float(np.mean([sf(float(amb_sorted[r - below])) for r in ranks]))
    # threshold: first sorted index whose (screening) p-value is < alpha
    if sf(float(ds[0])) < p_alpha:  # typical for real (non-Gaussian) data: every p < alpha
        lo = hi = 0
    elif sf(float(ds[-1])) >= p_alpha:  # typical for Gaussian data: no p < alpha
        lo = hi = k
    else:
        lo, hi = 1, k - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if sf(float(ds[mid])) < p_alpha:
            hi = mid
        else:
            lo = mid + 1
    d_lo = ds[max(lo - 1, 0)]  # sf(d_lo) >= alpha (unless lo == 0)
    d_hi = ds[min(lo, k - 1)]  # sf(d_hi) < alpha (unless lo == k)
    sure_small_p = d32 >= d_hi + eps
    undecided = np.flatnonzero((d32 > d_lo - eps) & (d32 < d_hi + eps))
    exact_d(undecided)
    count = int(np.sum(sure_small_p)) + sum(sf(exact[int(r)]) < p_alpha for r in undecided)
    return med, count / k


# ---------------------------------------------------------------------------------------------
# §2.3.3 Householder alignment
# ---------------------------------------------------------------------------------------------
def householder_vector(beta: np.ndarray) -> np.ndarray | None:
    """Unit vector ``v`` (d,) with ``H = I - 2 v v^T``, ``H beta_hat = e_1`` (§2.3.3).

    Returns ``None`` (H = I) when ``||beta|| < 1e-12`` or ``||beta_hat - e_1|| < 1e-12``.
    ``beta_hat[0] - 1`` is formed without cancellation (``-sum_{i>0} b_i² / (1 + b_0)``) when
    ``b_0 > 0``.
    """
    beta = np.asarray(beta, dtype=np.float64)
    nb = float(np.linalg.norm(beta))
    if nb < HOUSEHOLDER_TOL:
        return None
    bh = beta / nb
    diff = bh.copy()
    if bh[0] > 0:
        diff[0] = -float(bh[1:] @ bh[1:]) / (1.0 + bh[0])
    else:
        diff[0] = bh[0] - 1.0
    nd = float(np.linalg.norm(diff))
    if nd < HOUSEHOLDER_TOL:
        return None
    return diff / nd


def apply_householder(X: np.ndarray, v: np.ndarray | None, *, inplace: bool = False) -> np.ndarray:
    """Rows reflected: ``x - 2 (x.v) v`` for every row of ``X`` (n x d), float64.

    Equal to ``X @ H`` with ``H = I - 2 v v^T`` (symmetric) at O(n d) cost (one GEMV and one
    BLAS rank-1 update).  ``v=None`` -> unchanged.  ``inplace=True`` overwrites ``X`` (must be a
    C-contiguous float64 array) and returns it; otherwise a new array is returned.
    """
    if inplace:
        if not (isinstance(X, np.ndarray) and X.dtype == np.float64 and X.flags.c_contiguous):
            raise ValueError("apply_householder(inplace=True) needs a C-contiguous float64 array")
    else:
        X = np.array(X, dtype=np.float64, order="C", copy=True)
    if v is None or X.shape[0] == 0:
        return X
    v = np.ascontiguousarray(v, dtype=np.float64)
    c = X @ v
    # X^T is Fortran-contiguous: a := a - 2 v c^T  <=>  X := X - 2 c v^T, in place
    _blas.dger(-2.0, v, c, a=X.T, overwrite_a=1)
    return X


# ---------------------------------------------------------------------------------------------
# §2.3.4 query model, §2.3.6 closed form
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PositionalModel:
    """Global model of the positional coordinate ``q_rot,0 = alpha_pos + beta_pos t + eps``.

    ``sigma2_pos`` is the residual variance with denominator ``n_q - 2`` (NaN if n_q <= 2).
    """

    alpha_pos: float
    beta_pos: float
    sigma2_pos: float

    @classmethod
    def fit(cls, t: np.ndarray, x0: np.ndarray, beta_norm: float) -> "PositionalModel":
        """From positions ``t`` (n,) and rotated coordinate 0 ``x0`` (n,), slope ``||beta||``."""
        n = len(t)
        if n == 0:
            return cls(math.nan, float(beta_norm), math.nan)
        alpha = float(x0.mean() - beta_norm * t.mean())
        r = x0 - alpha - beta_norm * t
        s2 = float(r @ r) / (n - 2) if n > 2 else math.nan
        return cls(alpha, float(beta_norm), s2)


@dataclass(frozen=True)
class QueryModel:
    """Gaussian model of bucket j's rotated queries: ``q ~ N(w, diag(sigma2_pos) (+) cov)``.

    w : (d,) mean; ``w[0] = alpha_pos + beta_pos tau`` (positional), ``w[1:]`` semantic mean.
    cov : (d-1, d-1) semantic covariance (``full``) or (d-1,) variances (``diag``,
        ``global_diag``); both already include the ridge ``eps``.
    sigma2_pos : variance of the positional coordinate.
    chol : optional (d, d) upper-triangular ``U`` with ``Sigma' = U^T U`` (full mode), used to
        halve the cost of the pair variances; ``None`` if not available / not positive definite.
    """

    tau: float
    w: np.ndarray
    cov: np.ndarray
    sigma2_pos: float
    chol: np.ndarray | None = None

    def sigma_prime(self) -> np.ndarray:
        """``Sigma'`` as a (d, d) matrix (full) or its (d,) diagonal (diag modes)."""
        d = len(self.w)
        if self.cov.ndim == 1:
            return np.concatenate(([self.sigma2_pos], self.cov))
        S = np.zeros((d, d))
        S[0, 0] = self.sigma2_pos
        S[1:, 1:] = self.cov
        return S


def _upper_cholesky(S: np.ndarray) -> np.ndarray | None:
    """Upper-triangular U (Fortran order) with ``S = U^T U``, or None if S is not PD."""
    U, info = _lapack.dpotrf(S, lower=0, clean=1)
    return U if info == 0 else None


def query_model(
    q_rot: np.ndarray,
    tau: float,
    pos: PositionalModel,
    cov_mode: str = "full",
    eps: float = 1e-12,
    *,
    global_fit: Regression | None = None,
    global_resid_var: np.ndarray | None = None,
    offset: np.ndarray | None = None,
) -> QueryModel:
    """Query model of one bucket from its rotated queries ``q_rot`` (n_j x d, n_j >= 2), §2.3.4.

    ``offset`` (d,), if given, is the shift that was removed from the rows (lets the caller pass
    globally centred rows without a copy): it is added back to the mean; covariances are
    shift-free.  ``q_rot`` is never modified (and is unused in ``global_diag``).

    * ``full``: ``mu_j`` = mean of ``q_rot[:, 1:]``, ``Sigma_j`` = its covariance (ddof=1) + eps I;
    * ``diag``: same mean, ``diag(Sigma_j)`` (variances ddof=1, + eps);
    * ``global_diag``: mean ``alpha_rot[1:] + beta_rot[1:] tau`` of the global rotated
      regression ``global_fit`` and variances ``global_resid_var[1:]`` (ddof=1) + eps.

    The positional coordinate always uses the global ``pos`` (``w[0] = alpha_pos + beta_pos
    tau``, variance ``sigma2_pos``).
    """
    q_rot = np.asarray(q_rot, dtype=np.float64)
    w0 = pos.alpha_pos + pos.beta_pos * tau
    chol = None
    if cov_mode == "global_diag":
        if global_fit is None or global_resid_var is None:
            raise ValueError("cov_mode='global_diag' needs global_fit and global_resid_var")
        mu = global_fit.alpha[1:] + global_fit.beta[1:] * tau
        cov = np.asarray(global_resid_var[1:], dtype=np.float64) + eps
    elif cov_mode in ("full", "diag"):
        n = q_rot.shape[0]
        if n < 2:
            raise ValueError(f"query_model needs at least 2 queries in the bucket; got {n}")
        mean = q_rot.mean(axis=0)
        c = q_rot - mean
        mu = mean[1:] if offset is None else mean[1:] + offset[1:]
        if cov_mode == "full":
            S = c.T @ c  # (d, d); row/column 0 replaced below
            S /= n - 1
            S[0, :] = 0.0
            S[:, 0] = 0.0
            S[0, 0] = pos.sigma2_pos
            S[np.arange(1, S.shape[0]), np.arange(1, S.shape[0])] += eps
            cov = S[1:, 1:].copy()
            if np.isfinite(pos.sigma2_pos) and pos.sigma2_pos > 0:
                chol = _upper_cholesky(S)
        else:
            cov = np.einsum("ij,ij->j", c[:, 1:], c[:, 1:]) / (n - 1) + eps
    else:
        raise ValueError(f"cov_mode must be one of full, diag, global_diag; got {cov_mode!r}")
    return QueryModel(
        tau=float(tau), w=np.concatenate(([w0], mu)), cov=cov, sigma2_pos=pos.sigma2_pos, chol=chol
    )


def _quad_form(delta: np.ndarray, S: np.ndarray) -> np.ndarray:
    """Rowwise ``delta_i^T S delta_i`` for S (d,d) or its diagonal (d,); one GEMM."""
    if S.ndim == 1:
        return (delta * delta) @ S
    return np.einsum("ij,ij->i", delta @ S, delta)


def pair_plasticity(
    delta: np.ndarray,
    w: np.ndarray,
    sigma2_pos: float,
    cov: np.ndarray,
    var_floor: float = 1e-12,
    *,
    chol: np.ndarray | None = None,
    overwrite_delta: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Closed-form pair plasticity (§2.3.6) -> ``(pp, z)``, both shape (P,).

    delta : (P, d) rotated key differences ``k1 - k2`` (coordinate 0 positional).
    w : (d,) query-model mean; cov : (d-1, d-1) semantic covariance or (d-1,) variances.
    ``m = delta.w``, ``v = delta_0² sigma2_pos + delta_perp^T cov delta_perp`` floored at
    ``var_floor`` when <= 0; ``z = m/sqrt(v)``; ``pp = 4 Phi(z) Phi(-z)`` in [0, 1] (= 4p(1-p),
    p = Pr_q(q.k1 > q.k2)); symmetric in k1 <-> k2.
    chol : optional upper-triangular (d, d) ``U`` with ``U^T U = diag(sigma2_pos) (+) cov``; then
    ``v = ||U delta||²`` (one triangular multiply instead of a GEMM; same value up to rounding).
    overwrite_delta : allow using ``delta`` (C-contiguous float64) as scratch space.
    """
    delta = np.atleast_2d(np.asarray(delta, dtype=np.float64))
    w = np.asarray(w, dtype=np.float64)
    m = delta @ w
    if chol is not None:
        ow = bool(overwrite_delta and delta.flags.c_contiguous)
        B = _blas.dtrmm(1.0, chol, delta.T, side=0, lower=0, overwrite_b=int(ow))  # U delta^T
        v = np.einsum("ij,ij->j", B, B)
    elif overwrite_delta and np.ndim(cov) == 1 and delta.flags.c_contiguous:
        np.square(delta, out=delta)
        v = delta[:, 0] * float(sigma2_pos) + delta[:, 1:] @ np.asarray(cov, dtype=np.float64)
    else:
        model = QueryModel(0.0, w, np.asarray(cov, dtype=np.float64), float(sigma2_pos))
        v = _quad_form(delta, model.sigma_prime())
    return _pp_from_mv(m, v, var_floor)


def _pp_from_mv(m: np.ndarray, v: np.ndarray, var_floor: float) -> tuple[np.ndarray, np.ndarray]:
    v = np.where(v <= 0, var_floor, v)
    z = m / np.sqrt(v)
    return 4.0 * ndtr(z) * ndtr(-z), z


# ---------------------------------------------------------------------------------------------
# §2.3.5 admissible pairs, sampling and enumeration
# ---------------------------------------------------------------------------------------------
def admissible_pair_counts(counts: np.ndarray) -> np.ndarray:
    """``A_e = G_e (G_e - 1) / 2`` for eligible-key counts ``G_e`` (int64 array)."""
    g = np.asarray(counts, dtype=np.int64)
    return g * (g - 1) // 2


def sample_pairs(rng: np.random.Generator, counts: np.ndarray, n_pairs: int) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``n_pairs`` admissible pairs i.i.d. and uniformly over all admissible pairs.

    counts : (E,) eligible keys per example (``G_e``); the eligible keys are laid out example
    by example (example e occupies ``[start_e, start_e + G_e)``, ``start = cumsum(G) - G``).
    Returns ``(i1, i2)`` (int64, (n_pairs,)) into that layout, ``i1 != i2``, same example.

    RNG consumption (exactly three calls): ``r = integers(0, A, n)`` picks pair slots, whose
    example ``e`` is ``searchsorted(cumsum(A_e), r, 'right')`` (probability ``A_e / A``); then
    ``a = integers(0, G_e)`` and ``b = integers(0, G_e - 1)``, ``b += (b >= a)`` -- two distinct
    keys of ``e`` uniformly without replacement.  Needs ``A > 0``.
    """
    g = np.asarray(counts, dtype=np.int64)
    cum_a = np.cumsum(admissible_pair_counts(g))
    total = int(cum_a[-1]) if len(cum_a) else 0
    if total <= 0:
        raise ValueError("sample_pairs needs at least one admissible pair")
    r = rng.integers(0, total, size=int(n_pairs), dtype=np.int64)
    e = np.searchsorted(cum_a, r, side="right")
    ge = g[e]
    a = rng.integers(0, ge, dtype=np.int64)
    b = rng.integers(0, ge - 1, dtype=np.int64)
    b += b >= a
    start = (np.cumsum(g) - g)[e]
    return start + a, start + b


def enumerate_pairs(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every admissible pair once, as ``(i1, i2)`` with ``i1 < i2`` (layout of :func:`sample_pairs`).

    Order: example by example, then ``i1``, then ``i2`` (fully vectorised).  Memory O(A).
    """
    g = np.asarray(counts, dtype=np.int64)
    n = int(g.sum())
    start = np.cumsum(g) - g
    owner = np.repeat(np.arange(len(g)), g)
    local = np.arange(n) - start[owner]
    partners = g[owner] - 1 - local  # keys after i in its example
    i1 = np.repeat(np.arange(n), partners)
    first = np.cumsum(partners) - partners
    i2 = i1 + 1 + (np.arange(len(i1)) - np.repeat(first, partners))
    return i1, i2


# ---------------------------------------------------------------------------------------------
# Bucket estimates and heatmap accumulators
# ---------------------------------------------------------------------------------------------
@dataclass
class HeatmapAccumulator:
    """Accumulators ``n, sum_pp, sum_pp2`` over ``(dx_bin, dm_bin)`` for one q-bucket.

    dx_bin = floor(|s1 - s2| / W), dm_bin = floor((tau - (s1 + s2)/2) / W).  The grid bounds come
    from the eligible key positions ``[s_min, s_max]``, so every pair falls inside.  Dense
    ``bincount`` accumulation; when the grid would exceed ``_HEAT_DENSE_MAX`` cells (W tiny
    relative to the key span) the non-empty cells are merged sparsely instead.
    """

    tau: float
    width: float
    s_min: float
    s_max: float
    n_dx: int = field(init=False)
    dm_lo: int = field(init=False)
    n_dm: int = field(init=False)
    cells: np.ndarray | None = field(init=False)  # sparse mode: sorted occupied cell codes
    n: np.ndarray = field(init=False)
    sum_pp: np.ndarray = field(init=False)
    sum_pp2: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.n_dx = int(math.floor((self.s_max - self.s_min) / self.width)) + 1
        self.dm_lo = int(math.floor((self.tau - self.s_max) / self.width))
        self.n_dm = int(math.floor((self.tau - self.s_min) / self.width)) - self.dm_lo + 1
        size = self.n_dx * self.n_dm
        dense = size <= _HEAT_DENSE_MAX
        self.cells = None if dense else np.zeros(0, dtype=np.int64)
        size = size if dense else 0
        self.n = np.zeros(size, dtype=np.int64)
        self.sum_pp = np.zeros(size)
        self.sum_pp2 = np.zeros(size)

    def add(self, s1: np.ndarray, s2: np.ndarray, pp: np.ndarray) -> None:
        """Accumulate pairs with key positions ``s1, s2`` (float64) and plasticities ``pp``."""
        dx = np.floor(np.abs(s1 - s2) / self.width).astype(np.int64)
        dm = np.floor((self.tau - 0.5 * (s1 + s2)) / self.width).astype(np.int64) - self.dm_lo
        cell = dx * self.n_dm + dm
        if self.cells is None:
            size = self.n.size
            self.n += np.bincount(cell, minlength=size)
            self.sum_pp += np.bincount(cell, weights=pp, minlength=size)
            self.sum_pp2 += np.bincount(cell, weights=pp * pp, minlength=size)
            return
        codes, inv = np.unique(np.concatenate([self.cells, cell]), return_inverse=True)
        ones = np.concatenate([self.n, np.ones(len(cell), dtype=np.int64)])
        self.n = np.bincount(inv, weights=ones, minlength=len(codes)).astype(np.int64)
        self.sum_pp = np.bincount(inv, weights=np.concatenate([self.sum_pp, pp]), minlength=len(codes))
        self.sum_pp2 = np.bincount(inv, weights=np.concatenate([self.sum_pp2, pp * pp]), minlength=len(codes))
        self.cells = codes

    def rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Non-empty cells as ``(dx_bin, dm_bin, n, sum_pp, sum_pp2)``, ordered by (dx, dm)."""
        if self.cells is None:
            nz = np.flatnonzero(self.n)
            codes = nz
        else:
            nz = np.arange(len(self.cells))
            codes = self.cells
        return (
            codes // self.n_dm,
            codes % self.n_dm + self.dm_lo,
            self.n[nz],
            self.sum_pp[nz],
            self.sum_pp2[nz],
        )


@dataclass
class BucketEstimate:
    """Plasticity estimate of one q-bucket.

    n_pairs : pairs evaluated (P when sampling, A when every pair is used);
    ap : mean PP; se : standard error of the *sampled* estimator (see :func:`exhaustive_bucket`);
    mean_abs_z : mean |z|; exact : True when every admissible pair was used once;
    heat : the bucket's heatmap accumulator.
    """

    n_pairs: int
    ap: float
    se: float
    mean_abs_z: float
    exact: bool
    heat: HeatmapAccumulator | None
    empirical: "EmpiricalEstimate | None" = None


# ---------------------------------------------------------------------------------------------
# §2.3.10 empirical (real-query) estimator
# ---------------------------------------------------------------------------------------------
_EMP_CHUNK = 1 << 21  # max score differences held at once (pairs x queries)


def net_wins(diff: np.ndarray) -> np.ndarray:
    """Row-wise ``#(diff > 0) - #(diff < 0)`` of a (P, n) matrix of score differences -> (P,).

    ``diff[i, r] = q_r . k1_i - q_r . k2_i``; a tie (exactly 0) counts for neither side, i.e. 1/2
    to each in the share below.
    """
    return (np.count_nonzero(diff > 0, axis=1) - np.count_nonzero(diff < 0, axis=1)).astype(np.float64)


def empirical_pair_plasticity(wins: np.ndarray, n_queries: int) -> np.ndarray:
    """``PP_emp = 4 p (1 - p) n / (n - 1)`` per pair (§2.3.10) from net wins (P,) -> (P,).

    ``p = share of the n real queries with q.k1 > q.k2`` (ties 1/2) ``= 1/2 + wins / (2n)``, so
    ``4 p (1 - p) = 1 - (wins / n)²``.  The factor ``n / (n - 1)`` makes it unbiased for
    ``4 p (1 - p)`` of the query population (it can exceed 1 slightly).  Needs ``n >= 2``.
    """
    n = float(n_queries)
    x = np.asarray(wins, dtype=np.float64) / n
    return (1.0 - x * x) * (n / (n - 1.0))


@dataclass
class EmpiricalEstimate:
    """Empirical AP_j over a pair set, paired with the Gaussian estimate on the same pairs.

    ap : mean PP_emp; se : its standard error (same rule as the Gaussian ``se``); gap_se :
    standard error of the paired difference ``mean(PP_gauss - PP_emp)``.
    """

    ap: float
    se: float
    gap_se: float


class _EmpiricalSums:
    """Running sums of PP_emp and of the paired gap ``PP_gauss - PP_emp`` over pairs."""

    def __init__(self) -> None:
        self.n = 0
        self.s_e = self.s_e2 = self.s_g = self.s_g2 = 0.0

    def add(self, pp_gauss: np.ndarray, pp_emp: np.ndarray) -> None:
        gap = pp_gauss - pp_emp
        self.n += len(pp_emp)
        self.s_e += float(pp_emp.sum())
        self.s_e2 += float(pp_emp @ pp_emp)
        self.s_g += float(gap.sum())
        self.s_g2 += float(gap @ gap)

    def exhaustive(self, num_pairs: int) -> EmpiricalEstimate:
        """Means over every admissible pair; SE of the sampled estimator with ``num_pairs``
        draws (population sd / sqrt(P)), 0 when every pair fits in one draw set."""
        n = self.n
        ap = self.s_e / n

        def se(s: float, s2: float) -> float:
            if n <= num_pairs:
                return 0.0
            m = s / n
            return math.sqrt(max(s2 / n - m * m, 0.0) / num_pairs)

        return EmpiricalEstimate(ap, se(self.s_e, self.s_e2), se(self.s_g, self.s_g2))


def _sample_se(x: np.ndarray) -> float:
    return float(x.std(ddof=1)) / math.sqrt(len(x)) if len(x) > 1 else math.nan


def _size_grouped_layout(counts: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """Permutation of the example-by-example layout that groups examples of equal size.

    Returns ``(perm, groups)``: ``perm`` (sum of G_e over examples with G_e >= 2,) indexes the
    layout; after applying it, the examples of size ``g`` occupy one contiguous run, so a run is
    a ``(n_g, g, d)`` view.  ``groups`` lists ``(offset, n_g, g)`` in increasing g.
    """
    g = np.asarray(counts, dtype=np.int64)
    start = np.cumsum(g) - g
    ex = np.flatnonzero(g >= 2)
    ex = ex[np.argsort(g[ex], kind="stable")]
    sizes = g[ex]
    n = int(sizes.sum())
    first = np.cumsum(sizes) - sizes
    perm = np.repeat(start[ex] - first, sizes) + np.arange(n)
    groups: list[tuple[int, int, int]] = []
    off = 0
    for size, n_g in zip(*np.unique(sizes, return_counts=True)):
        groups.append((off, int(n_g), int(size)))
        off += int(n_g) * int(size)
    return perm, groups


def _pair_blocks(groups: list[tuple[int, int, int]]):
    """Yield ``(offset, n_b, g, r0, r1, aa, bb)``: blocks covering every admissible pair once.

    A block is ``n_b`` consecutive examples of size ``g`` starting at ``offset`` of the grouped
    layout, restricted to rows ``[r0, r1)``; its pairs are (row ``r0 + aa``, column ``bb``) of
    each example with ``r0 + aa < bb``.  A block holds at most ~``_GRAM_BLOCK`` Gram entries /
    key coordinates (huge examples are split into row ranges).
    """
    for off, n_g, size in groups:
        per_ex = size * max(size, 128)
        if per_ex <= _GRAM_BLOCK:
            chunk, row_step = max(1, _GRAM_BLOCK // per_ex), size
        else:
            chunk, row_step = 1, max(1, _GRAM_BLOCK // size)
        for c0 in range(0, n_g, chunk):
            n_b = min(chunk, n_g - c0)
            for r0 in range(0, size - 1, row_step):
                r1 = min(size, r0 + row_step)
                aa, bb = np.nonzero(np.arange(r0, r1)[:, None] < np.arange(size)[None, :])
                yield off + c0 * size, n_b, size, r0, r1, aa, bb


def exhaustive_bucket(
    keys_rot: np.ndarray,
    key_pos: np.ndarray,
    counts: np.ndarray,
    model: QueryModel,
    *,
    bucket_width: float,
    num_pairs: int,
    var_floor: float = 1e-12,
    rows: np.ndarray | None = None,
    queries: np.ndarray | None = None,
    keys_raw: np.ndarray | None = None,
) -> BucketEstimate:
    """Exact AP_j over every admissible pair (§2.3.8b), with its heatmap accumulators.

    keys_rot : (n_e, d) rotated eligible keys laid out example by example (``counts`` (E,) keys
    per example, as in :func:`sample_pairs`); key_pos : (n_e,) their positions.  With ``rows``
    (n_e,) the layout is ``keys_rot[rows]`` / ``key_pos[rows]`` instead (saves a copy).
    With ``u = K w`` and the Gram matrix ``G = K Sigma' K^T`` of each example, a pair (a, b)
    has ``m = u_a - u_b`` and ``v = G_aa + G_bb - 2 G_ab``: cost O(G_e d² + G_e² d) per example
    instead of O(d²) per pair.  ``G = F F^T`` with ``F = K U^T`` (``Sigma' = U^T U``, one
    triangular multiply) or ``F = K sqrt(Sigma')`` (diagonal modes); examples of equal size are
    grouped and batched into one stacked GEMM over views (no per-block gathers).

    ``se`` is the standard error the *sampled* estimator would have with ``num_pairs`` draws:
    ``sd_pop(PP) / sqrt(num_pairs)`` when ``A > num_pairs``; 0 when ``A <= num_pairs`` (the
    sampled mode then uses every pair once, i.e. this very computation).  [RES] the brief's
    ``/sqrt(min(P, A))`` read literally is non-zero for A <= P; the stated intent (0) is used.

    queries, keys_raw : optional (n_j, d) real queries of the bucket and (n, d) keys laid out
    like ``keys_rot`` but *unrotated* (raw or sign-oriented; dot products with queries in the
    same frame).  Given both (n_j >= 2), the empirical estimate of §2.3.10 over the same pairs
    is returned in ``BucketEstimate.empirical``: one GEMM of the bucket's keys against its
    queries, then for each pair the share of queries scoring k1 above k2.
    """
    total = int(admissible_pair_counts(counts).sum())
    if total == 0:
        return BucketEstimate(0, math.nan, math.nan, math.nan, True, None)
    perm, groups = _size_grouped_layout(counts)
    if rows is not None:
        perm = np.asarray(rows)[perm]
    K = np.take(np.asarray(keys_rot, dtype=np.float64), perm, axis=0)
    pos = np.take(np.asarray(key_pos, dtype=np.float64), perm)
    d = K.shape[1]
    u = K @ model.w
    # Gram factors: G = left @ right^T.  Symmetric (left is right, half the flops) when
    # Sigma' = U^T U is available (full) or diagonal and >= 0; else left = K Sigma', right = K.
    S = model.sigma_prime()
    if model.chol is not None:
        left = _blas.dtrmm(1.0, model.chol, K.T, side=0, lower=0).T  # (U K^T)^T, C-contiguous
        right = left
    elif S.ndim == 1 and (S >= 0).all():
        left = right = K * np.sqrt(S)
    else:
        left, right = (K * S if S.ndim == 1 else K @ S), K
    gdiag = np.einsum("ij,ij->i", left, right)
    heat = HeatmapAccumulator(model.tau, float(bucket_width), float(pos.min()), float(pos.max()))
    s_pp = s_pp2 = s_z = 0.0
    emp = None
    if queries is not None and keys_raw is not None and len(queries) >= 2:
        Qe = np.asarray(queries, dtype=np.float64)
        # scores of every key of the layout against every query: (n_e, n_j), rows contiguous
        scores = np.take(np.asarray(keys_raw), perm, axis=0).astype(np.float64) @ Qe.T
        emp = _EmpiricalSums()
        chunk = max(1, _EMP_CHUNK // len(Qe))
    for off, n_b, g, r0, r1, aa, bb in _pair_blocks(groups):
        stop = off + n_b * g
        rb = right[off:stop].reshape(n_b, g, d)
        lb = (left[off:stop].reshape(n_b, g, d))[:, r0:r1]
        gram = np.matmul(lb, rb.transpose(0, 2, 1)).reshape(n_b, (r1 - r0) * g)
        gab = np.take(gram, aa * g + bb, axis=1).ravel()
        base = (off + g * np.arange(n_b))[:, None]
        i1 = (base + (r0 + aa)).ravel()
        i2 = (base + bb).ravel()
        m = np.take(u, i1) - np.take(u, i2)
        v = np.take(gdiag, i1) + np.take(gdiag, i2) - 2.0 * gab
        pp, z = _pp_from_mv(m, v, var_floor)
        s_pp += float(pp.sum())
        s_pp2 += float(pp @ pp)
        s_z += float(np.abs(z).sum())
        heat.add(np.take(pos, i1), np.take(pos, i2), pp)
        if emp is not None:
            for c0 in range(0, len(i1), chunk):
                c1 = c0 + chunk
                diff = np.take(scores, i1[c0:c1], axis=0) - np.take(scores, i2[c0:c1], axis=0)
                emp.add(pp[c0:c1], empirical_pair_plasticity(net_wins(diff), len(Qe)))
    ap = s_pp / total
    if total <= num_pairs:
        se = 0.0
    else:
        se = math.sqrt(max(s_pp2 / total - ap * ap, 0.0) / num_pairs)
    return BucketEstimate(total, ap, se, s_z / total, True, heat,
                          emp.exhaustive(num_pairs) if emp is not None else None)


def _sampled_bucket(
    rng: np.random.Generator,
    keys_rot: np.ndarray,
    key_pos: np.ndarray,
    elig: np.ndarray,
    counts: np.ndarray,
    model: QueryModel,
    *,
    bucket_width: float,
    num_pairs: int,
    var_floor: float,
    buffers: tuple[np.ndarray, np.ndarray] | None = None,
    queries: np.ndarray | None = None,
    keys_raw: np.ndarray | None = None,
) -> BucketEstimate:
    """Sampled AP_j (§2.3.5): P i.i.d. pairs; exact (no RNG use) when ``A <= P``.

    keys_rot (n_k, d) / key_pos (n_k,) are all keys; ``elig`` (n_e,) indexes the eligible ones in
    the example-by-example layout described by ``counts``.  ``buffers``: two (P, d) float64
    scratch arrays reused across buckets.
    ``se = sd(PP, ddof=1) / sqrt(P)`` over the drawn pairs ([RES] ddof=1).
    ``queries`` / ``keys_raw`` (see :func:`exhaustive_bucket`): the empirical estimate on the
    very pairs drawn here (paired with the Gaussian one).
    """
    total = int(admissible_pair_counts(counts).sum())
    if total <= num_pairs:
        return exhaustive_bucket(
            keys_rot, key_pos, counts, model,
            bucket_width=bucket_width, num_pairs=num_pairs, var_floor=var_floor, rows=elig,
            queries=queries, keys_raw=keys_raw,
        )
    i1, i2 = sample_pairs(rng, counts, num_pairs)
    i1, i2 = elig[i1], elig[i2]
    d = keys_rot.shape[1]
    if buffers is None or buffers[0].shape != (num_pairs, d):
        buffers = (np.empty((num_pairs, d)), np.empty((num_pairs, d)))
    delta, tmp = buffers
    np.take(keys_rot, i1, axis=0, out=delta)
    np.subtract(delta, np.take(keys_rot, i2, axis=0, out=tmp), out=delta)
    pp, z = pair_plasticity(
        delta, model.w, model.sigma2_pos, model.cov, var_floor, chol=model.chol, overwrite_delta=True
    )
    epos = key_pos[elig]
    heat = HeatmapAccumulator(model.tau, float(bucket_width), float(epos.min()), float(epos.max()))
    heat.add(key_pos[i1], key_pos[i2], pp)
    se = _sample_se(pp)
    emp = None
    if queries is not None and keys_raw is not None and len(queries) >= 2:
        Qe = np.asarray(queries, dtype=np.float64)
        wins = np.empty(len(i1))
        step = max(1, _EMP_CHUNK // len(Qe))
        for c0 in range(0, len(i1), step):
            delta = np.take(keys_raw, i1[c0:c0 + step], axis=0).astype(np.float64)
            delta -= np.take(keys_raw, i2[c0:c0 + step], axis=0)  # exact for float32 keys
            wins[c0:c0 + step] = net_wins(delta @ Qe.T)
        pp_e = empirical_pair_plasticity(wins, len(Qe))
        emp = EmpiricalEstimate(float(pp_e.mean()), _sample_se(pp_e), _sample_se(pp - pp_e))
    return BucketEstimate(num_pairs, float(pp.mean()), se, float(np.abs(z).mean()), False, heat, emp)


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
        ("q_pos", head.q_pos, q.shape[0]), ("q_example", head.q_example, q.shape[0]),
        ("q_bucket", head.q_bucket, q.shape[0]), ("k_pos", head.k_pos, k.shape[0]),
        ("k_example", head.k_example, k.shape[0]), ("k_bucket", head.k_bucket, k.shape[0]),
    ):
        if np.shape(arr) != (n,):
            raise ValueError(f"plasticity: {name} must have shape ({n},) to match the vectors; got {np.shape(arr)}")
    if not head.bucket_size or head.bucket_size <= 0:
        raise ValueError(f"plasticity: bucket_size must be positive; got {head.bucket_size!r}")
    if not head.context_length or head.context_length <= 0:
        raise ValueError(f"plasticity: context_length must be positive; got {head.context_length!r}")
    if head.sliding_window is not None and head.sliding_window <= 0:
        raise ValueError(f"plasticity: sliding_window must be positive or None; got {head.sliding_window!r}")
    return q, k


def _q_diagnostics(
    t: np.ndarray, Qc: np.ndarray, reg: Regression, beta_norm: float, params: PlasticityParams, seed: int
) -> dict[str, float]:
    """The q_* columns of §2.3.2 from the *centred* rotated queries ``Qc`` (n x d, n >= 2).

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
        out["q_noise_med_abs_skew"] = float(np.nanmedian(np.abs(sk))) if np.isfinite(sk).any() else math.nan
        out["q_noise_med_abs_kurt"] = float(np.nanmedian(np.abs(ku))) if np.isfinite(ku).any() else math.nan
        n_dims = min(int(params.normality_max_dims), d - 1)
        dims = 1 + np.random.default_rng(seed).choice(d - 1, n_dims, replace=False)
        Zt = Qc.T[dims]  # (n_dims, n)
        sds = np.sqrt(np.einsum("ij,ij->i", Zt, Zt) / (n - 1))
        Zt /= np.where(sds > 0, sds, 1.0)[:, None]
        out["q_noise_med_ks_p"], out["q_noise_frac_ks_p_lt_alpha"] = _ks_summary(Zt, params.p_alpha)
    else:
        for c in ("q_noise_med_abs_skew", "q_noise_med_abs_kurt", "q_noise_med_ks_p", "q_noise_frac_ks_p_lt_alpha"):
            out[c] = math.nan
    return out


def _nan_diagnostics() -> dict[str, float]:
    return {c: math.nan for c in _DIAG_COLUMNS}


def analyse(head: HeadData, params: PlasticityParams, *, seed: int) -> AnalysisResult:
    """Attention plasticity of one head -> the four ``plasticity_*`` tables (spec §2.3).

    head : Q (n_q x d), K (n_k x d) and row metadata; ``head.bucket_size`` is the heatmap width
        W and the midpoint unit, ``head.context_length`` is L_ctx, ``head.sliding_window`` (tokens
        or None) restricts eligible keys to ``tau_j - s <= window``.
    params : :class:`~qkwh.params.PlasticityParams` (cov_mode, eligibility, pairs, P, ...).
    seed : the run's base seed; normality dims use ``default_rng(seed)``, pairs use
        ``default_rng(pair_seed(seed, layer, q_head))`` consumed bucket by bucket in increasing j.

    Degenerate input never raises: no keys, n_q < 2, buckets with n_j < 2 or no admissible pair
    produce rows with NaN plasticity.  Inconsistent shapes raise ``ValueError`` naming the array.
    The ``max_tokens_per_head`` cap is the caller's job (:func:`cap_rows`).

    Cost (n_q = n_k = 8000, d = 128, 16 buckets, P = 1024, one BLAS thread): O(n d) passes for
    orientation / regression / reflection, O(n_j d²) per bucket covariance (+ Cholesky), one
    triangular multiply per bucket for the P pair variances, one float32 sort for the 64 KS
    columns; no Python loop over pairs or rows.  Exhaustive mode adds O(sum_e G_e d²) per bucket.
    """
    if params.cov_mode not in ("full", "diag", "global_diag"):
        raise ValueError(f"plasticity.cov_mode must be one of full, diag, global_diag; got {params.cov_mode!r}")
    if params.eligibility not in ("position", "strict_bucket"):
        raise ValueError(f"plasticity.eligibility must be one of position, strict_bucket; got {params.eligibility!r}")
    if params.pairs not in ("sampled", "exhaustive"):
        raise ValueError(f"plasticity.pairs must be one of sampled, exhaustive; got {params.pairs!r}")
    q_in, k_in = _validate(head)
    n_q, d = q_in.shape
    n_k = k_in.shape[0]
    P = int(params.num_pairs_per_bucket)
    W = float(head.bucket_size)
    L = float(head.context_length)
    used_seed = pair_seed(seed, head.layer, head.q_head)
    mode_tag = f"{params.pairs}/{params.cov_mode}/{params.eligibility}"

    # queries sorted by bucket (stable): every bucket is a contiguous block; all statistics
    # are row-order free, so this only changes floating summation order (deterministically)
    qb = np.asarray(head.q_bucket, dtype=np.int64)
    qorder = np.argsort(qb, kind="stable")
    qb = qb[qorder]
    t = np.asarray(head.q_pos, dtype=np.float64)[qorder]

    # -- keys: sort by (example, position); orientation from key bucket means ---------------
    k_ex_ids, k_ex = np.unique(np.asarray(head.k_example), return_inverse=True)
    k_ex = k_ex.reshape(-1)
    korder = np.lexsort((np.asarray(head.k_pos), k_ex))
    k_ex = k_ex[korder]
    k_pos = np.asarray(head.k_pos, dtype=np.float64)[korder]
    k_bkt = np.asarray(head.k_bucket, dtype=np.int64)[korder]
    k_sorted = np.take(np.asarray(k_in), korder, axis=0)
    K = k_sorted.astype(np.float64)
    # the empirical estimator scores raw vectors: q.k is unchanged by orientation and reflection
    k_raw = k_sorted if params.empirical else None
    signs = orientation_signs(K, k_bkt) if params.orientation else np.ones(d)
    K *= signs

    # -- regression on oriented queries, Householder, diagnostics -------------------------------
    # Qc = oriented queries minus their mean; rotated in place below (H(x - xbar) = Hx - H xbar)
    q_sorted = np.take(np.asarray(q_in), qorder, axis=0)
    Qc = np.multiply(q_sorted, signs, dtype=np.float64)
    if n_q >= 1:
        qbar = Qc.mean(axis=0)
        Qc -= qbar
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
    diag = _q_diagnostics(t, Qc, reg, beta_norm, params, seed) if n_q >= 2 else _nan_diagnostics()
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
    buckets, bstart, bcount = np.unique(qb, return_index=True, return_counts=True)
    nb = len(buckets)
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
    buffers = (np.empty((P, d)), np.empty((P, d))) if params.pairs == "sampled" and n_k > 1 else None
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
        model = query_model(
            Qc[rows], tau, pos_model, params.cov_mode, params.eps,
            global_fit=global_fit, global_resid_var=global_resid_var, offset=qbar_rot,
        )
        kw = dict(bucket_width=W, num_pairs=P, var_floor=params.var_floor,
                  queries=q_sorted[rows] if params.empirical else None, keys_raw=k_raw)
        if params.pairs == "exhaustive":
            est = exhaustive_bucket(Kr, k_pos, counts, model, rows=elig, **kw)
        else:
            est = _sampled_bucket(rng, Kr, k_pos, elig, counts, model, buffers=buffers, **kw)
        b_npairs[bi] = est.n_pairs
        b_ap[bi], b_se[bi], b_z[bi] = est.ap, est.se, est.mean_abs_z
        if est.empirical is not None:
            b_emp[bi], b_emp_se[bi], b_gap_se[bi] = est.empirical.ap, est.empirical.se, est.empirical.gap_se
        if est.heat is not None:
            heat_rows.append((int(j), est.heat.rows()))

    result = AnalysisResult()
    # -- plasticity_buckets ------------------------------------------------------------------
    result.add(BUCKETS, {
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
    })
    # -- plasticity_heatmap --------------------------------------------------------------------
    if heat_rows:
        parts = [(np.full(len(r[0]), j, dtype=np.int64), *r) for j, r in heat_rows]
        cols = [np.concatenate(c) for c in zip(*parts)]
    else:
        cols = [np.zeros(0, np.int64)] * 4 + [np.zeros(0), np.zeros(0)]
    result.add(HEATMAP, dict(zip(COLUMNS[HEATMAP], cols)))
    # -- plasticity_components -----------------------------------------------------------------
    r2 = np.asarray(reg.r2, dtype=np.float64) if n_q >= 2 else np.full(d, np.nan)
    result.add(COMPONENTS, {
        "component": np.arange(d, dtype=np.int64),
        "component_r2": r2,
        "component_weight": component_weights(r2) if n_q >= 2 else np.full(d, np.nan),
    })
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
