"""The closed-form Gaussian query model of the plasticity analysis.

Orientation of the head dimensions, the per-dimension position regression, the Householder
alignment of the position direction with coordinate 0, the per-bucket Gaussian query model and
the closed-form pair plasticity ``PP = 4 Phi(z) Phi(-z)``.  Pure functions with shapes in their
docstrings; :mod:`qkwh.analyses.plasticity` runs them for one head.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.linalg import blas as _blas
from scipy.linalg import lapack as _lapack
from scipy.special import ndtr

__all__ = [
    "HOUSEHOLDER_TOL",
    "SS_TOT_FLOOR",
    "PositionalModel",
    "QueryModel",
    "Regression",
    "apply_householder",
    "component_weights",
    "fit_position_regression",
    "householder_vector",
    "orientation_signs",
    "pair_plasticity",
    "query_model",
    "query_model_from_moments",
    "reflect_symmetric",
    "scalar_position_predictability",
]

HOUSEHOLDER_TOL = 1e-12  # ||beta|| or ||beta_hat - e1|| below this -> H = I (step 3)
SS_TOT_FLOOR = 1e-12  # R² = 1 - SS_res / max(SS_tot, floor) (step 2)


# ---------------------------------------------------------------------------------------------
# orientation, regression and diagnostics (steps 1-2 of docs/metrics/plasticity.md)
# ---------------------------------------------------------------------------------------------
def orientation_signs(k: np.ndarray, k_bucket: np.ndarray) -> np.ndarray:
    """Per-dimension signs ``s`` (shape ``(d,)``, values +-1.0) of step 1.

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
    ``1 - ss_res / max(ss_tot, 1e-12)`` clipped above at 1 (step 2).
    """

    alpha: np.ndarray
    beta: np.ndarray
    r2: np.ndarray
    ss_res: np.ndarray
    ss_tot: np.ndarray


def fit_position_regression(t: np.ndarray, X: np.ndarray, *, centred: bool = False) -> Regression:
    """OLS of every column of ``X`` (n x d) on positions ``t`` (n,), step 2.

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
    """``w_c = max(R²_c, 0) / sum max(R², 0)``; ``1/d`` everywhere if that sum <= 0 (step 2).

    NaN R² values count as 0.  Shape ``(d,)`` in, ``(d,)`` out.
    """
    r2 = np.asarray(r2, dtype=np.float64)
    pos = np.where(np.isfinite(r2), np.maximum(r2, 0.0), 0.0)
    total = pos.sum()
    if not total > 0:
        return np.full(r2.shape, 1.0 / max(r2.size, 1))
    return pos / total


def scalar_position_predictability(
    t: np.ndarray, s: np.ndarray
) -> tuple[float, float, float, float]:
    """``(q_R2_scalar, q_mae_baseline, q_mae_proj, q_mae_ratio)`` of step 2.

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


# ---------------------------------------------------------------------------------------------
# Householder alignment (step 3)
# ---------------------------------------------------------------------------------------------
def householder_vector(beta: np.ndarray) -> np.ndarray | None:
    """Unit vector ``v`` (d,) with ``H = I - 2 v v^T``, ``H beta_hat = e_1`` (step 3).

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


def reflect_symmetric(S: np.ndarray, v: np.ndarray | None) -> np.ndarray:
    """``H S H`` for a symmetric (d, d) ``S`` and ``H = I - 2 v v^T`` (``v=None``: a copy of S).

    The second moments of reflected rows from those of the rows, at O(d²):
    ``H S H = S - 2 (v u^T + u v^T) + 4 (v^T u) v v^T`` with ``u = S v``; exactly symmetric.
    """
    S = np.asarray(S, dtype=np.float64)
    if v is None:
        return S.copy()
    u = S @ v
    vu = np.outer(v, u)
    vu += vu.T
    out = S - 2.0 * vu
    out += (4.0 * float(v @ u)) * np.outer(v, v)
    return out


# ---------------------------------------------------------------------------------------------
# query model (step 4), closed form (step 6)
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
    def fit(cls, t: np.ndarray, x0: np.ndarray, beta_norm: float) -> PositionalModel:
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
    """Query model of one bucket from its rotated queries ``q_rot`` (n_j x d, n_j >= 2), step 4.

    ``offset`` (d,), if given, is the shift that was removed from the rows (lets the caller pass
    globally centred rows without a copy): it is added back to the mean; covariances are
    shift-free.  ``q_rot`` is never modified (and is unused in ``global_diag``).

    * ``full``: ``mu_j`` = mean of ``q_rot[:, 1:]``, ``Sigma_j`` = its covariance (ddof=1) + eps I;
    * ``diag``: same mean, ``diag(Sigma_j)`` (variances ddof=1, + eps);
    * ``global_diag``: mean ``alpha_rot[1:] + beta_rot[1:] tau`` of the global rotated
      regression ``global_fit`` and variances ``global_resid_var[1:]`` (ddof=1) + eps.

    The positional coordinate always uses the global ``pos`` (``w[0] = alpha_pos + beta_pos
    tau``, variance ``sigma2_pos``).  The bulk path builds the same model from the head's shared
    per-bucket moments (:func:`query_model_from_moments`).
    """
    q_rot = np.asarray(q_rot, dtype=np.float64)
    n, d = q_rot.shape
    mean, scatter = np.zeros(d), None
    if (
        cov_mode in ("full", "diag") and n >= 2
    ):  # else the rows are not read (or an error is raised)
        mean = q_rot.mean(axis=0)
        c = q_rot - mean
        scatter = c.T @ c
    return query_model_from_moments(
        mean,
        scatter,
        n,
        tau,
        pos,
        cov_mode,
        eps,
        global_fit=global_fit,
        global_resid_var=global_resid_var,
        offset=offset,
    )


def query_model_from_moments(
    mean: np.ndarray,
    scatter: np.ndarray | None,
    n: int,
    tau: float,
    pos: PositionalModel,
    cov_mode: str = "full",
    eps: float = 1e-12,
    *,
    global_fit: Regression | None = None,
    global_resid_var: np.ndarray | None = None,
    offset: np.ndarray | None = None,
) -> QueryModel:
    """:func:`query_model` from the bucket's rotated moments instead of its rows.

    mean : (d,) mean of the bucket's rotated rows (minus ``offset`` when given); scatter : (d, d)
    their scatter matrix Σ (x - mean)(x - mean)^T (not read in ``global_diag``); n : rows
    (n >= 2 for ``full`` / ``diag``).  Same modes and result as :func:`query_model`.
    """
    w0 = pos.alpha_pos + pos.beta_pos * tau
    chol = None
    if cov_mode == "global_diag":
        if global_fit is None or global_resid_var is None:
            raise ValueError("cov_mode='global_diag' needs global_fit and global_resid_var")
        mu = global_fit.alpha[1:] + global_fit.beta[1:] * tau
        cov = np.asarray(global_resid_var[1:], dtype=np.float64) + eps
    elif cov_mode in ("full", "diag"):
        if n < 2:
            raise ValueError(f"query_model needs at least 2 queries in the bucket; got {n}")
        mean = np.asarray(mean, dtype=np.float64)
        mu = mean[1:] if offset is None else mean[1:] + offset[1:]
        if cov_mode == "full":
            S = np.array(scatter, dtype=np.float64)  # (d, d); row/column 0 replaced below
            S /= n - 1
            S[0, :] = 0.0
            S[:, 0] = 0.0
            S[0, 0] = pos.sigma2_pos
            S[np.arange(1, S.shape[0]), np.arange(1, S.shape[0])] += eps
            cov = S[1:, 1:].copy()
            if np.isfinite(pos.sigma2_pos) and pos.sigma2_pos > 0:
                chol = _upper_cholesky(S)
        else:
            cov = np.diagonal(scatter)[1:] / (n - 1) + eps  # type: ignore[arg-type]  # given for diag
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
    """Closed-form pair plasticity (step 6) -> ``(pp, z)``, both shape (P,).

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
    """``(pp, z)`` from pair means and variances: ``pp = 4 Phi(z) Phi(-z) = 4 a (1 - a)`` with
    ``a = Phi(-|z|) <= 1/2`` (one evaluation of Phi per pair; ``1 - a`` is exact to an ulp)."""
    s = np.where(v <= 0, var_floor, v)  # a new array: ``v`` may be the caller's
    np.sqrt(s, out=s)
    z = m / s
    a = np.abs(z, out=s)  # the same operations as ndtr(-|z|), in one scratch array
    np.negative(a, out=a)
    ndtr(a, out=a)
    pp = 1.0 - a
    pp *= a
    pp *= 4.0
    return pp, z
