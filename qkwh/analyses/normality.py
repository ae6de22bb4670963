"""Residual normality diagnostics of the query model: skewness, kurtosis and exact KS p-values.

Vectorised equivalents of ``scipy.stats.skew`` / ``kurtosis`` (bias-corrected) and of
``scipy.stats.kstest(x, "norm").pvalue`` (method "exact"), at a fraction of their cost.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import sys
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy.special import gammaln, ndtr

__all__ = ["standardised_moments", "ks_norm_pvalues", "ks_summary"]


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
    return float(np.clip(_kstwo_sf_scipy(D, n), 0.0, 1.0))


def _kstwo_sf_scipy(x: float, n: int) -> float:
    """``scipy.stats.kstwo.sf(x, n)`` for a finite ``x`` and an integer ``n >= 1``, by scipy's
    own code: what the distribution's ``sf`` does for such arguments (1 at or below the lower
    end of the support 1/(2n), 0 at or above 1, else ``kolmogn(n, x, cdf=False)``), without
    importing ``scipy.stats`` (see :func:`_scipy_kolmogn`)."""
    if x <= 0.5 / n:
        return 1.0
    if x >= 1.0:
        return 0.0
    return float(_scipy_kolmogn()(n, x, cdf=False))


@functools.cache
def _scipy_kolmogn() -> Callable[..., np.ndarray]:
    """``kolmogn`` of scipy's ``scipy/stats/_ksstats.py`` (the function behind
    ``scipy.stats.kstwo``).

    Importing ``scipy.stats`` costs about 0.6 s (it loads nearly all of SciPy), more than the
    analyses of several heads, and every compute worker would pay it for this one function.  So
    the module's file is loaded on its own, under a private name; the one name it imports from
    ``scipy.stats`` (a finite-difference helper, used only by the density, never here) is served
    during that load by a stand-in that imports the real one if it is ever called.  When
    ``scipy.stats`` is already imported, or SciPy's layout differs, its own module is used.
    """
    if "scipy.stats" not in sys.modules:
        try:
            return _load_kolmogn()
        except Exception:  # noqa: BLE001 - any surprise: take the ordinary import
            pass
    from scipy.stats._ksstats import kolmogn

    return kolmogn


def _load_kolmogn() -> Callable[..., np.ndarray]:
    import scipy

    path = Path(scipy.__file__).parent / "stats" / "_ksstats.py"
    spec = importlib.util.spec_from_file_location("qkwh.analyses._scipy_ksstats", path)
    if spec is None or spec.loader is None:
        raise ImportError(path)
    module = importlib.util.module_from_spec(spec)
    helper = "scipy.stats._finite_differences"

    def _derivative(*args, **kwargs):  # pragma: no cover - the density only
        from scipy.stats._finite_differences import _derivative as real

        return real(*args, **kwargs)

    stand_in = types.ModuleType(helper)
    stand_in._derivative = _derivative  # type: ignore[attr-defined]
    if helper in sys.modules:
        raise ImportError(helper)
    sys.modules[helper] = stand_in
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[helper]
    return module.kolmogn


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


#: sorted points per block of :func:`_ks_from_sorted`'s screening
KS_BLOCK: int = 16
#: slack on a block's upper bound: covers rounding in the bound and any non-monotone last bit of ndtr
_KS_BOUND_SLACK = 1e-12


def _ks_every_point(srt: np.ndarray) -> np.ndarray:
    """KS statistic of sorted rows from Phi at every point (the definition; reference for tests)."""
    n = srt.shape[1]
    cdf = ndtr(srt, dtype=np.float64)
    dplus = (np.arange(1.0, n + 1.0) / n - cdf).max(axis=1)  # same arithmetic as scipy
    dminus = (cdf - np.arange(0.0, n) / n).max(axis=1)
    return np.maximum(dplus, dminus)


def _ks_from_sorted(srt: np.ndarray, block: int = KS_BLOCK) -> np.ndarray:
    """KS statistic vs N(0,1) of rows already sorted ascending (any float dtype) -> (k,) float64.

    Exactly :func:`_ks_every_point` (same values to the last bit), with Phi evaluated at a
    fraction of the points.  The sorted row is cut into blocks of ``block`` points.  Within a
    block [s, e], ``i/n - Phi(x_i) <= e'/n - Phi(x_s)`` and ``Phi(x_i) - (i-1)/n <= Phi(x_e) -
    (s-1)/n`` (Phi is increasing), so Phi at the two ends of every block bounds the block, and
    the end points' own terms give a lower bound on D.  Only blocks whose bound reaches that lower
    bound can hold the maximum: Phi is evaluated at all their points, with the same arithmetic
    as the definition, and D is the largest term found.  Rows with a non-finite value take the
    definition.
    """
    k, n = srt.shape
    if k == 0 or n < 4 * block:
        return _ks_every_point(srt)
    out = np.empty(k)
    finite = np.isfinite(srt[:, 0]) & np.isfinite(srt[:, -1])  # sorted: -inf first, inf / NaN last
    if not finite.all():
        bad = np.flatnonzero(~finite)
        out[bad] = _ks_every_point(srt[bad])
        if bad.size == k:
            return out
        rows = np.flatnonzero(finite)
        out[rows] = _ks_from_sorted(srt[rows], block)
        return out
    up = np.arange(1.0, n + 1.0) / n  # i/n at 0-based index i - 1, as in the definition
    down = np.arange(0.0, n) / n
    starts = np.arange(0, n, block)
    ends = np.minimum(starts + block, n) - 1
    c_s = ndtr(srt[:, starts], dtype=np.float64)  # (k, blocks)
    c_e = ndtr(srt[:, ends], dtype=np.float64)
    lower = np.maximum(
        np.maximum(up[starts] - c_s, c_s - down[starts]),
        np.maximum(up[ends] - c_e, c_e - down[ends]),
    ).max(axis=1)
    bound = np.maximum(up[ends] - c_s, c_e - down[starts]) + _KS_BOUND_SLACK
    r, b = np.nonzero(bound >= lower[:, None])  # row-major: grouped by row
    idx = np.minimum(starts[b][:, None] + np.arange(block), ends[b][:, None])  # (C, block)
    cdf = ndtr(srt[r[:, None], idx], dtype=np.float64)
    term = np.maximum(up[idx] - cdf, cdf - down[idx]).max(axis=1)
    out[:] = lower
    first = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
    np.maximum.at(out, r[first], np.maximum.reduceat(term, first))
    return out


def ks_summary(Zt: np.ndarray, p_alpha: float) -> tuple[float, float]:
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
