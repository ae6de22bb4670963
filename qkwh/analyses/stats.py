"""The numeric helpers shared by the per-head analyses, in one namespace.

Everything is pure numpy/scipy, typed, vectorised and accumulates in float64 (inputs may be
float32).  The helpers live in one module per topic; this module re-exports them:

* :mod:`qkwh.analyses.correlation`: Pearson with the constant-input rule, p-values, OLS lines;
* :mod:`qkwh.analyses.lda`: the two-class Q-vs-K linear discriminant;
* :mod:`qkwh.analyses.fourier`: non-uniform Fourier sums over positions, the ω grid;
* :mod:`qkwh.analyses.moments`: per-head moments (:class:`HeadMoments`), sign canonicalisation,
  complement bases, the row cap.
"""

from __future__ import annotations

from qkwh.analyses.correlation import (
    ZERO_VAR_REL,
    is_zero_variance,
    ols_slope,
    pearson,
    pearson_cols,
    pearson_from_moments,
    pearson_pvalue,
)
from qkwh.analyses.fourier import ChebyshevBasis, cheb_order, log_omega_grid, nudft
from qkwh.analyses.lda import lda_accuracy, lda_accuracy_from_scores, lda_direction
from qkwh.analyses.moments import (
    MIN_ROWS,
    HeadMoments,
    KeyMoments,
    QueryMoments,
    cap_rows,
    complement_basis,
    head_moments,
    key_moments,
    orient_largest_positive,
    query_moments,
    validate_head,
)

__all__ = [
    "ZERO_VAR_REL",
    "MIN_ROWS",
    "HeadMoments",
    "KeyMoments",
    "QueryMoments",
    "head_moments",
    "key_moments",
    "query_moments",
    "validate_head",
    "cap_rows",
    "is_zero_variance",
    "pearson",
    "pearson_cols",
    "pearson_from_moments",
    "pearson_pvalue",
    "ols_slope",
    "lda_accuracy",
    "lda_direction",
    "lda_accuracy_from_scores",
    "ChebyshevBasis",
    "cheb_order",
    "orient_largest_positive",
    "complement_basis",
    "nudft",
    "log_omega_grid",
]
