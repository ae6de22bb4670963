"""Pearson correlation with the zero-variance rule, its p-value, and OLS lines (float64).

* **Pearson with the zero-variance rule**: the sample correlation, defined as 0 when either input
  has zero variance.  "Zero" is decided relative to the data's own scale (:data:`ZERO_VAR_REL`),
  because a constant float vector centred by its rounded mean has a variance of ~1e-32 x its
  square, not exactly 0.
* **p-values** of a Pearson r from the t distribution with n - 2 degrees of freedom (identical to
  ``scipy.stats.pearsonr``'s two-sided value); NaN where r is undefined (zero variance) or n < 3.
"""

from __future__ import annotations

import numpy as np
from scipy import special

__all__ = ["ZERO_VAR_REL", "is_zero_variance", "pearson", "pearson_cols", "pearson_from_moments",
           "pearson_pvalue", "ols_slope"]

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


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation of two 1-D samples; 0 when either has zero variance.

    Parameters
    ----------
    x, y : (n,) arrays of equal length, n >= 2 (any real dtype; computed in float64)
    """
    return float(pearson_cols(np.asarray(x)[:, None], y)[0])


def pearson_cols(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson correlation of every column of ``x`` with ``y`` (zero-variance rule per column).

    Parameters
    ----------
    x : (n, p) array
    y : (n,) array

    Returns
    -------
    (p,) float64 array in [-1, 1]
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
        sxy, sxx, syy, x_mean_square=np.einsum("ij,ij->j", x, x) / n, y_mean_square=float(y @ y) / n, n=n
    )


def pearson_from_moments(
    sxy: np.ndarray | float,
    sxx: np.ndarray | float,
    syy: float,
    *,
    x_mean_square: np.ndarray | float,
    y_mean_square: float,
    n: int,
) -> np.ndarray:
    """Pearson r from centred sums ``sxy = Σ(x-x̄)(y-ȳ)``, ``sxx = Σ(x-x̄)²``, ``syy = Σ(y-ȳ)²``.

    The mean squares of the raw values (``Σx²/n``) set the rounding scale of the zero-variance
    rule.  Arrays broadcast; the result is clipped to [-1, 1].
    """
    sxy = np.asarray(sxy, dtype=np.float64)
    sxx = np.asarray(sxx, dtype=np.float64)
    zero = is_zero_variance(sxx / n, x_mean_square) | bool(is_zero_variance(syy / n, y_mean_square))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = sxy / np.sqrt(np.where(zero, 1.0, sxx) * (syy if syy > 0 else 1.0))
    return np.clip(np.where(zero, 0.0, r), -1.0, 1.0)


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

