"""Pearson correlation, its p-value and OLS lines (float64): the one implementation qkwh has.

Per-head geometry (``qkwh.analyses.pca`` / ``rotation``) and the correlation marts (``qkwh.
uncertainty``, run by the dbt models family_correlations and benchmark_correlations) both call
this module.

**Constant input.** A side is *constant* when its variance is zero up to rounding: var <=
:data:`ZERO_VAR_REL` squared x the mean square of its raw values (:func:`is_zero_variance`; a
constant float vector centred by its rounded mean has a variance of ~1e-32 x its square, not
exactly 0).  Pearson r is then undefined, and every function that returns an r takes the value
to report in its stead as the required keyword ``if_constant``, so each caller states its rule:

* ``if_constant=0.0`` for per-head geometry: a PC score or an axis that does not move with
  position carries no linear position signal (the zero-variance rule of docs/metrics/pca.md);
* ``if_constant=nan`` for correlations across heads or models (the marts): undefined, stored
  as NULL next to its n.

The two-sided **p-value** (:func:`pearson_pvalue`, t distribution with n - 2 degrees of freedom,
identical to ``scipy.stats.pearsonr``'s) is NaN for n < 3 and for an undefined r (NaN); callers
that report r = 0 for a constant side set its p-value to NaN themselves (nothing was tested).
The OLS slope (:func:`ols_slope`) of a constant x is NaN by the same test.
"""

from __future__ import annotations

import numpy as np
from scipy import special

__all__ = [
    "ZERO_VAR_REL",
    "is_zero_variance",
    "pearson",
    "pearson_cols",
    "pearson_from_moments",
    "weighted_pearson",
    "pearson_pvalue",
    "ols_slope",
]

#: a variance v counts as zero when v <= (ZERO_VAR_REL ** 2) * (mean square of the raw values)
ZERO_VAR_REL: float = 1e-12


def is_zero_variance(var: np.ndarray | float, mean_square: np.ndarray | float) -> np.ndarray:
    """True where ``var`` is zero up to rounding, relative to the raw mean square of the values.

    Parameters
    ----------
    var : variance (any ddof; only compared against the threshold)
    mean_square : mean of the squared *raw* values (same units as ``var``)
    """
    var = np.asarray(var, dtype=np.float64)
    ms = np.asarray(mean_square, dtype=np.float64)
    return (var <= 0.0) | (var <= (ZERO_VAR_REL**2) * ms)


def pearson(x: np.ndarray, y: np.ndarray, *, if_constant: float) -> float:
    """Pearson correlation of two 1-D samples; ``if_constant`` when either side is constant.

    Parameters
    ----------
    x, y : (n,) arrays of equal length, n >= 2 (any real dtype; computed in float64)
    if_constant : the value reported when r is undefined (module docstring)
    """
    return float(pearson_cols(np.asarray(x)[:, None], y, if_constant=if_constant)[0])


def pearson_cols(x: np.ndarray, y: np.ndarray, *, if_constant: float) -> np.ndarray:
    """Pearson correlation of every column of ``x`` with ``y`` (constant-input rule per column).

    Parameters
    ----------
    x : (n, p) array
    y : (n,) array
    if_constant : the value reported for a column (or a ``y``) that is constant

    Returns
    -------
    (p,) float64 array in [-1, 1] (or ``if_constant``)
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 1 or x.shape[0] != y.shape[0]:
        raise ValueError(f"pearson_cols: shapes {x.shape} and {y.shape} do not match (n, p) / (n,)")
    if x.shape[0] < 2:
        raise ValueError("pearson_cols: need at least 2 observations")
    xc = x - x.mean(axis=0)
    yc = y - y.mean()
    sxy = yc @ xc
    sxx = np.einsum("ij,ij->j", xc, xc)
    syy = float(yc @ yc)
    n = x.shape[0]
    return pearson_from_moments(
        sxy,
        sxx,
        syy,
        x_mean_square=np.einsum("ij,ij->j", x, x) / n,
        y_mean_square=float(y @ y) / n,
        n=n,
        if_constant=if_constant,
    )


def pearson_from_moments(
    sxy: np.ndarray | float,
    sxx: np.ndarray | float,
    syy: float,
    *,
    x_mean_square: np.ndarray | float,
    y_mean_square: float,
    n: int,
    if_constant: float,
) -> np.ndarray:
    """Pearson r from centred sums ``sxy = Σ(x-x̄)(y-ȳ)``, ``sxx = Σ(x-x̄)²``, ``syy = Σ(y-ȳ)²``.

    The mean squares of the raw values (``Σx²/n``) set the rounding scale of the constant-input
    rule; ``if_constant`` is reported where a side is constant.  Arrays broadcast; r is clipped
    to [-1, 1].
    """
    sxy = np.asarray(sxy, dtype=np.float64)
    sxx = np.asarray(sxx, dtype=np.float64)
    zero = is_zero_variance(sxx / n, x_mean_square) | bool(is_zero_variance(syy / n, y_mean_square))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = sxy / np.sqrt(np.where(zero, 1.0, sxx) * (syy if syy > 0 else 1.0))
    return np.where(zero, if_constant, np.clip(r, -1.0, 1.0))


def weighted_pearson(
    x: np.ndarray, y: np.ndarray, w: np.ndarray, *, min_n: int, if_constant: float
) -> np.ndarray:
    """Pearson r of x and y under each row of weights ``w`` (a bootstrap's multiplicities).

    Parameters
    ----------
    x, y : (n,) float64 without NaN, or (R, n) for one sample per row
    w : (R, n) non-negative weights (integer multiplicities in a bootstrap, all ones for the
        plain r)
    min_n : fewer points with positive weight than this give NaN
    if_constant : reported where a side is constant under the weights (module docstring; the
        rule compares the weighted sum of squares about the mean with the raw Σw·x²)

    Returns
    -------
    (R,) float64

    Every row is summed on its own, pairwise along the row (numpy's reduction of a C-ordered
    row), so a row's r does not depend on the other rows: the rows are taken in blocks of about
    :data:`_BLOCK` values, which keeps the temporaries in cache.
    """
    w = np.atleast_2d(np.asarray(w, np.float64))
    x = np.broadcast_to(np.asarray(x, np.float64), w.shape)
    y = np.broadcast_to(np.asarray(y, np.float64), w.shape)
    w = np.ascontiguousarray(w)
    r = np.empty(w.shape[0])
    step = max(1, _BLOCK // max(1, w.shape[1]))
    for a in range(0, w.shape[0], step):
        b = min(a + step, w.shape[0])
        r[a:b] = _weighted_pearson_rows(x[a:b], y[a:b], w[a:b], min_n, if_constant)
    return r


#: values (rows x columns) of one block of weighted_pearson's rows
_BLOCK = 1 << 16


def _weighted_pearson_rows(
    x: np.ndarray, y: np.ndarray, w: np.ndarray, min_n: int, if_constant: float
) -> np.ndarray:
    """:func:`weighted_pearson` of one block of rows (all three (R, n); ``w`` C-ordered).

    The products are formed as ``(w * d) * d`` and ``(w * d) * e``, into reused buffers."""
    sw = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        wx = w * x
        mx = wx.sum(axis=1) / sw
        wy = w * y
        my = wy.sum(axis=1) / sw
        # the raw sums Σw·x² and Σw·y² of the constant-input rule
        sxx_raw = np.multiply(wx, x, out=wx).sum(axis=1)
        syy_raw = np.multiply(wy, y, out=wy).sum(axis=1)
        dx = x - mx[:, None]
        dy = y - my[:, None]
        wdx = np.multiply(w, dx, out=wx)
        sxx = np.multiply(wdx, dx, out=wy).sum(axis=1)
        sxy = np.multiply(wdx, dy, out=wy).sum(axis=1)
        wdy = np.multiply(w, dy, out=wx)
        syy = np.multiply(wdy, dy, out=wy).sum(axis=1)
        r = sxy / np.sqrt(sxx * syy)
        # the rule on sums (both sides of var <= REL² * mean square multiplied by Σw)
        constant = is_zero_variance(sxx, sxx_raw) | is_zero_variance(syy, syy_raw)
    r = np.clip(r, -1.0, 1.0)
    r[constant] = if_constant
    r[(w > 0).sum(axis=1) < min_n] = np.nan
    return r


def pearson_pvalue(r: np.ndarray | float, n: int | np.ndarray) -> np.ndarray:
    """Two-sided p-value of Pearson r under H0: rho = 0 (t test, df = n - 2).

    Equals ``scipy.stats.pearsonr(x, y).pvalue``.  NaN when n < 3 or r is NaN.
    """
    r = np.asarray(r, dtype=np.float64)
    df = np.asarray(n, dtype=np.float64) - 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        r2 = np.minimum(r * r, 1.0)
        t = np.abs(r) * np.sqrt(df / np.maximum(1.0 - r2, 0.0))
        p = 2.0 * special.stdtr(df, -t)
    p = np.where(r2 >= 1.0, 0.0, p)
    return np.where((df < 1) | np.isnan(r), np.nan, p)


def ols_slope(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Ordinary least-squares line y ≈ intercept + slope * x.

    Parameters
    ----------
    x, y : (n,) arrays; units of slope = [y] / [x]

    Returns
    -------
    (slope, intercept) : floats; both NaN if x has zero variance.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    xm, ym = x.mean(), y.mean()
    xc = x - xm
    sxx = float(xc @ xc)
    if bool(is_zero_variance(sxx / len(x), float(x @ x) / len(x))):
        return float("nan"), float("nan")
    slope = float(xc @ (y - ym)) / sxx
    return slope, float(ym - slope * xm)
