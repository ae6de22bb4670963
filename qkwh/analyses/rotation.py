"""Planar rotation model: the {a, b} plane and the RoPE rotation planes of its complement
(docs/metrics/rotation.md).

One head in, three tables out (head key and ``config_id`` are added by the caller):

* ``rotation_heads`` (1 row): ``n_q, n_k, d, degenerate, b_mode, pairing, position_r, r_q_a, r_k_a,
  alpha_q, alpha_k, intercept_q_a, intercept_k_a, mu_q_a, mu_k_a, mu_q_b, mu_k_b, bias_strength,
  bias_strength_ctx, slope_ratio_kq, separation_strength, var_frac_a, var_frac_b,
  plane_var_fraction, content_var_b, content_var_b_frac, residual_pos_r, omega, omega_r_squared,
  n_active_pairs, active_var_frac, cos_b_bc``;
* ``rotation_pairs`` (one row per complement SVD pair): ``pair, sv_var_share, angle_r,
  angle_r_circ, omega_pair, angle_r_circ_pm, omega_pair_pm, qk_acc, active``;
* ``rotation_axes`` (rows ``axis`` = 'a', 'b', 'b_centroid', plus 'mean' (pooled x̄) and the
  complement directions 'w0' .. 'w{2n-1}' for collages): ``axis`` (object array of str) and
  ``vec`` as a 2-D float array (n_axes, d); 'b' is always the eigenvector axis, whatever
  ``b_mode`` says.

Units: projections in vector units; positions in tokens; ``alpha_*`` in vector units per token;
``bias_strength`` in score units per token (``bias_strength_ctx`` = bias_strength x L_ctx, the
score change across the whole window); ``omega*`` in radians per token; fractions, correlations
and accuracies are dimensionless.

Orientation conventions (docs/metrics/rotation.md):

* a = c/‖c‖ with c = Σ_n (x_n - x̄)(τ_n - τ̄) on the pool, so Cov(aᵀx, τ) > 0;
* b (eigenvector) is oriented so that bᵀ(μ_Q - μ_K) >= 0, falling back to "largest-magnitude
  loading positive" when bᵀΔμ = 0; b_centroid = P_a Δμ/‖P_a Δμ‖ points K -> Q by construction;
* complement singular vectors: largest-magnitude loading positive; θ = atan2(Z_{2i+1}, Z_{2i}),
  and a positive ``omega_pair``/``omega_pair_pm`` means θ increases with position.

Degenerate heads (positions all equal, constant vectors, or ‖c‖ below 1e-12 absolutely or
relative to its Cauchy–Schwarz bound sqrt(tr S · Σ(τ-τ̄)²)) get ``degenerate = True``, NaN
metrics, ``n_active_pairs = 0`` and no pair / axis rows.  No exception is raised for them;
malformed input or fewer than 3 query/key rows raise ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy import linalg

from qkwh.analyses import stats
from qkwh.analyses.declared.rotation import RotationParams
from qkwh.analyses.types import AnalysisResult, HeadData

__all__ = ["analyse", "delta_second_moment", "nearest_pairs", "HEAD_FLOAT_COLUMNS", "PAIR_COLUMNS"]

HEAD_FLOAT_COLUMNS: tuple[str, ...] = (
    "position_r",
    "r_q_a",
    "r_k_a",
    "alpha_q",
    "alpha_k",
    "intercept_q_a",
    "intercept_k_a",
    "mu_q_a",
    "mu_k_a",
    "mu_q_b",
    "mu_k_b",
    "bias_strength",
    "bias_strength_ctx",
    "slope_ratio_kq",
    "separation_strength",
    "var_frac_a",
    "var_frac_b",
    "plane_var_fraction",
    "content_var_b",
    "content_var_b_frac",
    "residual_pos_r",
    "omega",
    "omega_r_squared",
    "active_var_frac",
    "cos_b_bc",
)
PAIR_COLUMNS: tuple[str, ...] = (
    "pair",
    "sv_var_share",
    "angle_r",
    "angle_r_circ",
    "omega_pair",
    "angle_r_circ_pm",
    "omega_pair_pm",
    "qk_acc",
    "active",
)

#: ‖c‖ (c = Cov(X, τ), 1/N normalisation) below this is "no drift axis"
#: (docs/metrics/rotation.md#axis-a-drift)
C_NORM_ABS: float = 1e-12
#: ... and so is ‖c‖ below this fraction of its Cauchy–Schwarz bound
C_NORM_REL: float = 1e-12


# ---------------------------------------------------------------------------------------------
# pairing of δ = q - k (``rotation.pairing``, docs/metrics/rotation.md#axis-b-separation)
# ---------------------------------------------------------------------------------------------
def nearest_pairs(
    q_example: np.ndarray, q_pos: np.ndarray, k_example: np.ndarray, k_pos: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Pair every query row with the key row of the same example nearest in position.

    Ties (one key at t - x and one at t + x) go to the earlier key (the causal one).  Query rows
    whose example has no key rows are dropped.  O((n_q + n_k) log n_k), vectorised.

    Returns
    -------
    (q_index, k_index) : int arrays of equal length (matched rows)
    """
    q_ex = np.asarray(q_example, dtype=np.int64)
    k_ex = np.asarray(k_example, dtype=np.int64)
    qp = np.asarray(q_pos, dtype=np.int64)
    kp = np.asarray(k_pos, dtype=np.int64)
    _, inv = np.unique(np.concatenate([q_ex, k_ex]), return_inverse=True)
    qe, ke = inv[: q_ex.size], inv[q_ex.size :]
    lo_pos = min(int(qp.min()), int(kp.min()))
    span = 3 * (max(int(qp.max()), int(kp.max())) - lo_pos + 1)  # keeps examples apart
    kkey = ke * span + (kp - lo_pos)
    order = np.argsort(kkey, kind="stable")
    ks = kkey[order]
    qkey = qe * span + (qp - lo_pos)
    j = np.searchsorted(ks, qkey, side="left")
    hi = np.minimum(j, ks.size - 1)
    lo = np.maximum(j - 1, 0)
    hi_ok = (j < ks.size) & (ke[order[hi]] == qe)
    lo_ok = (j > 0) & (ke[order[lo]] == qe)
    d_hi = np.where(hi_ok, np.abs(ks[hi] - qkey), np.iinfo(np.int64).max)
    d_lo = np.where(lo_ok, np.abs(qkey - ks[lo]), np.iinfo(np.int64).max)
    pick = np.where(d_lo <= d_hi, lo, hi)
    ok = hi_ok | lo_ok
    return np.flatnonzero(ok), order[pick[ok]]


def delta_second_moment(head: HeadData, mom: stats.HeadMoments, pairing: str) -> np.ndarray:
    """C_δ = E[δ δᵀ] (uncentred), δ = q - k, under a ``rotation.pairing`` mode.

    * ``independent`` (default, closed form): Σ_Q + Σ_K + Δμ Δμᵀ with population (1/n)
      covariances = the average of (q_i - k_j)(q_i - k_j)ᵀ over all n_q·n_k pairs;
    * ``row_order``: δ_i = q_i - k_i for i < min(n_q, n_k) (file row order);
    * ``same_example_nearest``: each query paired with the nearest-position key of its example
      (:func:`nearest_pairs`).

    Returns
    -------
    (d, d) float64; raises ValueError for ``same_example_nearest`` with no shared example.
    """
    dm = mom.delta_mu
    if pairing == "independent":
        return mom.scatter_q / mom.n_q + mom.scatter_k / mom.n_k + np.outer(dm, dm)
    # mom.qc holds the query rows in bucket order: file row i is mom.qc[_q_rows(mom, i)]
    if pairing == "row_order":
        n = min(mom.n_q, mom.n_k)
        delta = mom.qc[_q_rows(mom, np.arange(n))] - mom.kc[:n] + dm
    elif pairing == "same_example_nearest":
        qi, ki = nearest_pairs(head.q_example, head.q_pos, head.k_example, head.k_pos)
        if qi.size == 0:
            raise ValueError(
                "pairing 'same_example_nearest': no query row shares an example with a key row"
            )
        delta = mom.qc[_q_rows(mom, qi)] - mom.kc[ki] + dm
    else:
        raise ValueError(
            f"unknown pairing {pairing!r}; expected independent, same_example_nearest or row_order"
        )
    return (delta.T @ delta) / delta.shape[0]


def _q_rows(mom: stats.HeadMoments, file_rows: np.ndarray) -> np.ndarray:
    """Rows of ``mom.qc`` holding the query file rows ``file_rows``."""
    return mom.query.file_rows(file_rows)


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def _top_eigvec_in_complement(mat: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """Top eigenvector of P mat P, computed inside the orthonormal ``basis`` of range(P)."""
    small = basis.T @ mat @ basis
    m = small.shape[0]
    _, vec = linalg.eigh(0.5 * (small + small.T), subset_by_index=[m - 1, m - 1], driver="evr")
    return basis @ vec[:, 0]


def _orient_towards(v: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Flip v so that vᵀtarget >= 0; if vᵀtarget = 0 use "largest-magnitude loading positive"."""
    proj = float(v @ target)
    if abs(proj) <= 1e-12 * float(np.linalg.norm(target)):
        return stats.orient_largest_positive(v)[0]
    return v if proj > 0 else -v


def _omega_fit(fy: np.ndarray, f1: np.ndarray, f2: np.ndarray, n: int, syy: float) -> np.ndarray:
    """R²(ω) of y ≈ c0 + c1 cos ωτ + c2 sin ωτ from Fourier sums.

    See docs/metrics/rotation.md#omega-is-the-drift-a-slow-rotation.

    f1 = Σ e^{-iωτ}, f2 = Σ e^{-2iωτ}, fy = Σ (y - ȳ) e^{-iωτ} (same phase origin); the centred
    Gram of (cos, sin) follows from the double-angle identities.  NaN where it is singular.
    """
    c1, s1 = f1.real, -f1.imag
    c2, s2 = f2.real, -f2.imag
    scc = 0.5 * (n + c2) - c1 * c1 / n
    sss = 0.5 * (n - c2) - s1 * s1 / n
    scs = 0.5 * s2 - c1 * s1 / n
    b1, b2 = fy.real, -fy.imag
    det = scc * sss - scs * scs
    ok = (det > 1e-12 * np.abs(scc * sss)) & (scc > 0) & (sss > 0) & (syy > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        r2 = (sss * b1 * b1 - 2.0 * scs * b1 * b2 + scc * b2 * b2) / (det * syy)
    return np.where(ok, np.clip(r2, 0.0, 1.0), np.nan)


def _complement(
    mom: stats.HeadMoments, a: np.ndarray, b: np.ndarray, scatter: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """Variances λ_j (descending) and directions w_j (d, r) of the centred complement of {a, b}.

    Eigen-decomposition of the complement covariance inside an exact orthonormal basis of
    {a, b}^⊥ (= the thin SVD X_⊥ = U S Wᵀ with λ_j = S_j²/(N-1)).  Rule: keep S_j > 1e-10 S_0
    (λ_j > 1e-20 λ_0); with the Gram route eigenvalues below ~d·eps·λ_0 are rounding noise, so
    that is the effective floor.  Directions oriented "largest-magnitude loading positive".
    """
    d = a.shape[0]
    basis = stats.complement_basis(np.column_stack([a, b]))
    cov_perp = basis.T @ (scatter / (n - 1)) @ basis
    lam, vec = np.linalg.eigh(0.5 * (cov_perp + cov_perp.T))
    lam, vec = lam[::-1], vec[:, ::-1]
    floor = max(1e-20, 8.0 * d * np.finfo(np.float64).eps)
    keep = lam > floor * lam[0] if lam.size and lam[0] > 0 else np.zeros(lam.size, dtype=bool)
    w, _ = stats.orient_largest_positive(basis @ vec[:, keep])
    return lam[keep], w


def _empty_pairs() -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {c: np.empty(0, dtype=np.float64) for c in PAIR_COLUMNS}
    out["pair"] = np.empty(0, dtype=np.int64)
    out["active"] = np.empty(0, dtype=bool)
    return out


def _head_row(
    mom: stats.HeadMoments,
    params: RotationParams,
    degenerate: bool,
    n_active: int,
    values: dict[str, float],
) -> dict[str, np.ndarray]:
    row: dict[str, np.ndarray] = {
        "n_q": np.array([mom.n_q], dtype=np.int64),
        "n_k": np.array([mom.n_k], dtype=np.int64),
        "d": np.array([mom.d], dtype=np.int64),
        "degenerate": np.array([degenerate], dtype=bool),
        "b_mode": np.array([params.b_mode], dtype=object),
        "pairing": np.array([params.pairing], dtype=object),
    }
    for name in HEAD_FLOAT_COLUMNS:
        row[name] = np.array([values.get(name, np.nan)], dtype=np.float64)
    row["n_active_pairs"] = np.array([n_active], dtype=np.int64)
    return row


def _degenerate(mom: stats.HeadMoments, params: RotationParams) -> AnalysisResult:
    res = AnalysisResult()
    res.add("rotation_heads", _head_row(mom, params, True, 0, {}))
    res.add("rotation_pairs", _empty_pairs())
    res.add(
        "rotation_axes",
        {"axis": np.empty(0, dtype=object), "vec": np.empty((0, mom.d), dtype=np.float64)},
    )
    return res


# ---------------------------------------------------------------------------------------------
# the analysis
# ---------------------------------------------------------------------------------------------
def analyse(
    head: HeadData,
    params: RotationParams = RotationParams(),
    *,
    moments: stats.HeadMoments | None = None,
) -> AnalysisResult:
    """Planar rotation analysis of one head (docs/metrics/rotation.md).

    Parameters
    ----------
    head : q (n_q, d), k (n_k, d), positions in tokens; needs d >= 3, n_q, n_k >= 3, and
        ``context_length`` / ``bucket_size`` (ω grid, ``bias_strength_ctx``)
    params : :class:`~qkwh.analyses.declared.rotation.RotationParams` (b_mode, pairing, t_active, max_pairs, omega_grid)
    moments : precomputed :func:`qkwh.analyses.stats.head_moments` of ``head`` (optional)

    Returns
    -------
    AnalysisResult with ``rotation_heads`` (1 row), ``rotation_pairs`` (n_pairs rows),
    ``rotation_axes`` (3 rows).

    Notes
    -----
    Cost: O(N d) + O(d³) beyond the shared moments, plus O(N · 2 n_pairs · d) for the pair
    scores and O(N K (2 + 2 n_pairs)) for the ω scans (K ≈ 100 Chebyshev terms, see
    :func:`qkwh.analyses.stats.nudft`).  ``residual_pos_r`` is Pearson(coordinate, τ) for b and
    every kept complement direction w_j, evaluated as w_jᵀc / sqrt(w_jᵀ S w_j · Σ(τ-τ̄)²) from the
    pooled moments (algebraically identical to correlating the projected rows; ~1e-16).
    """
    if head.q.ndim == 2 and head.q.shape[1] < 3:
        raise ValueError(
            f"rotation analysis needs d >= 3 (axes a, b and a complement); got d={head.q.shape[1]}"
        )
    if params.b_mode not in ("eig", "centroid"):
        raise ValueError(f"b_mode must be 'eig' or 'centroid'; got {params.b_mode!r}")
    if params.pairing not in ("independent", "same_example_nearest", "row_order"):
        raise ValueError(f"unknown pairing {params.pairing!r}")
    mom = moments if moments is not None else stats.head_moments(head)
    n, d = mom.n, mom.d
    scatter = mom.scatter
    tr_s = float(np.trace(scatter))
    stau = mom.stau
    tau = mom.tau
    c = mom.cross
    c_norm = float(np.linalg.norm(c))
    if (
        bool(stats.is_zero_variance(stau / n, float(tau @ tau) / n))
        or bool(stats.is_zero_variance(tr_s / n, mom.msq))
        or c_norm / n < C_NORM_ABS
        or c_norm <= C_NORM_REL * np.sqrt(tr_s * stau)
    ):
        return _degenerate(mom, params)

    # ---- axes ------------------------------------------------------------------------------
    a = c / c_norm
    dm = mom.delta_mu
    try:
        c_delta = delta_second_moment(head, mom, params.pairing)
    except ValueError:
        if params.pairing == "same_example_nearest":
            return _degenerate(mom, params)
        raise
    basis_a = stats.complement_basis(a)
    b_eig = _orient_towards(_top_eigvec_in_complement(c_delta, basis_a), dm)
    pdm = dm - a * float(a @ dm)
    pdm_norm = float(np.linalg.norm(pdm))
    if pdm_norm <= 1e-10 * float(np.linalg.norm(dm)) or bool(
        stats.is_zero_variance(float(dm @ dm), mom.msq)
    ):
        b_cen = np.full(d, np.nan)
    else:
        b_cen = pdm / pdm_norm
    cos_b_bc = abs(float(b_eig @ b_cen))
    b = b_eig if params.b_mode == "eig" else b_cen
    if not np.all(np.isfinite(b)):
        return _degenerate(mom, params)

    # ---- plane metrics (raw projections) ---------------------------------------------------
    lam, w = _complement(mom, a, b, scatter, n)
    n_pairs = int(min(params.max_pairs, lam.size // 2))
    # one pass over the rows: centred projections Z = (X - x̄)[a, b, w_0, w_2, ..., w_1, w_3, ...]
    proj_dirs = np.column_stack([a, b, w[:, 0 : 2 * n_pairs : 2], w[:, 1 : 2 * n_pairs : 2]])
    xbar = mom.mean
    # stored transposed, (directions, N): every per-pair block below is then contiguous
    zt = np.empty((proj_dirs.shape[1], n))
    np.matmul(proj_dirs.T, mom.qc.T, out=zt[:, : mom.n_q])
    zt[:, : mom.n_q] += ((mom.mu_q - xbar) @ proj_dirs)[:, None]
    np.matmul(proj_dirs.T, mom.kc.T, out=zt[:, mom.n_q :])
    zt[:, mom.n_q :] += ((mom.mu_k - xbar) @ proj_dirs)[:, None]
    ya, yb = xbar @ a, xbar @ b  # raw projection = centred + x̄ᵀv
    qa, qb = zt[0, : mom.n_q] + ya, zt[1, : mom.n_q] + yb
    ka, kb = zt[0, mom.n_q :] + ya, zt[1, mom.n_q :] + yb
    y = np.concatenate([qa, ka])
    # a constant side carries no position signal: r = 0 (qkwh.analyses.correlation)
    position_r = abs(stats.pearson(y, tau, if_constant=0.0))
    r_q_a = stats.pearson(qa, mom.t, if_constant=0.0)
    r_k_a = stats.pearson(ka, mom.s, if_constant=0.0)
    alpha_q, icpt_q = stats.ols_slope(mom.t, qa)
    alpha_k, icpt_k = stats.ols_slope(mom.s, ka)
    mu_q_a, mu_k_a = float(qa.mean()), float(ka.mean())
    mu_q_b, mu_k_b = float(qb.mean()), float(kb.mean())
    bias = mu_q_a * alpha_k
    var_a = float(a @ scatter @ a)
    var_b = float(b @ scatter @ b)
    content_var_b = 0.5 * (
        float(b @ mom.scatter_q @ b) / (mom.n_q - 1) + float(b @ mom.scatter_k @ b) / (mom.n_k - 1)
    )
    total_var = tr_s / (n - 1)

    tau_ms = float(tau @ tau) / n
    r_b = stats.pearson_from_moments(
        float(b @ c), var_b, stau, x_mean_square=mom.msq, y_mean_square=tau_ms, n=n, if_constant=0.0
    )
    r_w = stats.pearson_from_moments(
        w.T @ c,
        lam * (n - 1),
        stau,
        x_mean_square=mom.msq,
        y_mean_square=tau_ms,
        n=n,
        if_constant=0.0,
    )
    residual_pos_r = float(np.max(np.abs(np.concatenate([np.atleast_1d(r_b), r_w]))))

    # ---- complement pairs -----------------------------------------------------------------
    omegas = stats.log_omega_grid(head.context_length, head.bucket_size, params.omega_grid)
    y_c = y - y.mean()
    ut = np.empty((2 + 2 * n_pairs, n), dtype=np.float64)  # Fourier weights, transposed
    ut[0] = 1.0
    ut[1] = y_c
    if n_pairs > 0:
        ze, zo = zt[2 : 2 + n_pairs], zt[2 + n_pairs :]  # (P, N) each: SVD_2i, SVD_2i+1
        theta = np.arctan2(zo, ze)
        angle_r = stats.pearson_cols(theta.T, tau, if_constant=0.0)
        rho = np.multiply(ze, ze)
        rho += zo * zo
        np.sqrt(rho, out=rho)
        cos_t, sin_t = ut[2 : 2 + n_pairs], ut[2 + n_pairs :]
        with np.errstate(invalid="ignore", divide="ignore"):
            np.divide(ze, rho, out=cos_t)
            np.divide(zo, rho, out=sin_t)
        flat = rho == 0.0
        if flat.any():  # atan2(0, 0) = 0 -> (cos, sin) = (1, 0)
            cos_t[flat] = 1.0
            sin_t[flat] = 0.0
    # Fourier sums over positions on [0, L_ctx) (Chebyshev expansion, see stats.ChebyshevBasis)
    lo = min(0.0, float(tau.min()))
    hi = max(float(head.context_length - 1), float(tau.max()))
    if stats.cheb_order(2.0 * float(omegas[-1]) * 0.5 * (hi - lo)) <= 1024:
        cheb = stats.ChebyshevBasis(tau, 2.0 * float(omegas[-1]), interval=(lo, hi))
        # one pass over the rows for both grids; ut[0] = 1, so Σ e^{-2iωτ} needs only the ones
        cheb_moments, ones = cheb.moments_and_ones(ut.T, cheb.order_for(omegas), cheb.order)
        sums = cheb.from_moments(cheb_moments, omegas)  # (G, 2 + 2P) at ω
        f2 = cheb.from_moments(ones, 2.0 * omegas)  # Σ e^{-2iωτ}
    else:  # huge ω·L (bucket_size of a few tokens): direct sums, slow but exact
        sums = stats.nudft(tau, ut.T, omegas, origin=0.5 * (lo + hi))
        f2 = stats.nudft(tau, ut[0], 2.0 * omegas, origin=0.5 * (lo + hi))
    r2 = _omega_fit(sums[:, 1], sums[:, 0], f2, n, float(y_c @ y_c))
    if np.all(np.isnan(r2)):
        omega, omega_r2 = np.nan, np.nan
    else:
        best = int(np.nanargmax(r2))
        omega, omega_r2 = float(omegas[best]), float(r2[best])

    if n_pairs > 0:
        share = (lam[0 : 2 * n_pairs : 2] + lam[1 : 2 * n_pairs : 2]) / float(lam.sum())
        s_cos = sums[:, 2 : 2 + n_pairs]
        s_sin = sums[:, 2 + n_pairs :]
        r_plus = np.abs(s_cos + 1j * s_sin) / n  # |mean exp(i(θ - ωτ))| at +ω
        r_minus = np.abs(s_cos - 1j * s_sin) / n  # ... at -ω
        cols = np.arange(n_pairs)
        i_plus = np.argmax(r_plus, axis=0)
        i_minus = np.argmax(r_minus, axis=0)
        circ = r_plus[i_plus, cols]
        circ_minus = r_minus[i_minus, cols]
        use_plus = circ >= circ_minus
        circ_pm = np.where(use_plus, circ, circ_minus)
        # Q-vs-K LDA on each pair (z_2i, z_2i+1); class means / pooled within-class covariance
        # come from the moments: Wᵀ(μ - x̄) and Wᵀ(S_Q + S_K)W / N (2 x 2 diagonal blocks)
        wp = w[:, : 2 * n_pairs]
        within = wp.T @ (mom.scatter_q + mom.scatter_k) @ wp / n
        s_w = np.stack(
            [
                within[0::2, 0::2].diagonal(),
                within[0::2, 1::2].diagonal(),
                within[1::2, 0::2].diagonal(),
                within[1::2, 1::2].diagonal(),
            ],
            axis=1,
        ).reshape(n_pairs, 2, 2)
        m_q = ((mom.mu_q - xbar) @ wp).reshape(n_pairs, 2)
        m_k = ((mom.mu_k - xbar) @ wp).reshape(n_pairs, 2)
        scale = (np.trace(mom.scatter) / n + float(xbar @ xbar)) * np.ones(n_pairs)
        lw, lw0 = stats.lda_direction(m_q, m_k, s_w, mom.n_q, mom.n_k, scale=scale)
        score = ze * lw[:, :1]
        score += zo * lw[:, 1:]
        score += lw0[:, None]
        qk_acc = stats.lda_accuracy_from_scores(score.T, mom.n_q)
        active = circ_pm >= params.t_active
        pairs = {
            "pair": np.arange(n_pairs, dtype=np.int64),
            "sv_var_share": share,
            "angle_r": angle_r,
            "angle_r_circ": circ,
            "omega_pair": omegas[i_plus],
            "angle_r_circ_pm": circ_pm,
            "omega_pair_pm": np.where(use_plus, omegas[i_plus], -omegas[i_minus]),
            "qk_acc": qk_acc,
            "active": active,
        }
    else:
        share = np.empty(0)
        pairs = _empty_pairs()
        active = np.empty(0, dtype=bool)

    values = {
        "position_r": position_r,
        "r_q_a": r_q_a,
        "r_k_a": r_k_a,
        "alpha_q": alpha_q,
        "alpha_k": alpha_k,
        "intercept_q_a": icpt_q,
        "intercept_k_a": icpt_k,
        "mu_q_a": mu_q_a,
        "mu_k_a": mu_k_a,
        "mu_q_b": mu_q_b,
        "mu_k_b": mu_k_b,
        "bias_strength": bias,
        "bias_strength_ctx": bias * float(head.context_length),
        "slope_ratio_kq": abs(alpha_k) / abs(alpha_q)
        if alpha_q != 0 and np.isfinite(alpha_q)
        else np.nan,
        "separation_strength": float(b @ c_delta @ b) / float(np.trace(c_delta)),
        "var_frac_a": var_a / tr_s,
        "var_frac_b": var_b / tr_s,
        "plane_var_fraction": (var_a + var_b) / tr_s,
        "content_var_b": content_var_b,
        "content_var_b_frac": content_var_b / total_var,
        "residual_pos_r": residual_pos_r,
        "omega": omega,
        "omega_r_squared": omega_r2,
        "active_var_frac": float(share[active].sum()),
        "cos_b_bc": cos_b_bc,
    }
    res = AnalysisResult()
    res.add("rotation_heads", _head_row(mom, params, False, int(active.sum()), values))
    res.add("rotation_pairs", pairs)
    # axes for the report's projections plus what a collage of the complement pairs needs:
    # the pooled mean and the SVD directions w_j (pair i = w_{2i}, w_{2i+1}; score = (x - mean)·w)
    w_names = [f"w{j}" for j in range(2 * n_pairs)]
    res.add(
        "rotation_axes",
        {
            "axis": np.array(["a", "b", "b_centroid", "mean", *w_names], dtype=object),
            "vec": np.vstack([a, b_eig, b_cen, xbar, w[:, : 2 * n_pairs].T]),
        },
    )
    return res


def run(
    head: HeadData, params: RotationParams, *, seed: int, shared: Mapping[str, Any]
) -> AnalysisResult:
    """The registered function (``qkwh.analyses.declared.rotation``): :func:`analyse` with the shared
    per-head precomputations."""
    return analyse(head, params, moments=shared.get("moments"))
