"""Bootstrap random streams and draws, and correlation statistics with intervals, for the dbt
Python models that derive them.

Pure numpy / scipy / pyarrow functions (no I/O, no DuckDB): the dbt models
``int_bootstrap_draws`` (the layer-cluster draws of every interval: :func:`stream`,
:func:`draw_layers`), ``family_correlations`` and ``benchmark_correlations`` (one row per
correlation: :func:`correlation_row`, :func:`correlation_table`) load their rows, call these and
write the results.  Every function
accumulates in float64 and takes an explicit random generator where it draws.

Pearson r and its p-value come from :mod:`qkwh.analyses.correlation` (the one implementation,
with its constant-input rule): here r is NaN (reported as NULL) below ``min_n`` complete pairs
or when a side is constant (``if_constant=nan``), and rounded to 12 decimals so that summation
order never shows.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from scipy import special

from qkwh.analyses.correlation import pearson_pvalue, weighted_pearson


def stable_hash(text: str) -> int:
    """A 64-bit integer from ``text`` that is the same in every process (unlike ``hash``)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")


def stream(seed: int, key: str) -> np.random.Generator:
    """The random stream of one unit (a model, a correlation group): ``default_rng([seed, h(key)])``."""
    return np.random.default_rng([int(seed), stable_hash(key)])


def draw_layers(n_layers: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Layer-cluster bootstrap multiplicities: (n_boot + 1, n_layers) float64, row 0 all ones (the
    point estimate), rows 1.. how often each layer is drawn when n_layers layers are drawn with
    replacement (each row sums to n_layers).  ``rng``: the model's :func:`stream`."""
    picks = rng.integers(0, n_layers, size=(n_boot, n_layers))
    flat = (picks + n_layers * np.arange(n_boot)[:, None]).ravel()
    counts = np.bincount(flat, minlength=n_boot * n_layers).reshape(n_boot, n_layers)
    return np.vstack([np.ones((1, n_layers)), counts]).astype(np.float64)


def pearson(x: np.ndarray, y: np.ndarray, *, min_n: int = 3) -> float:
    """Plain Pearson r (NaN below ``min_n`` points or with a constant side), rounded to 12 decimals."""
    if len(x) == 0:
        return math.nan
    r = float(weighted_pearson(x, y, np.ones((1, len(x))), min_n=min_n, if_constant=math.nan)[0])
    return round(r, 12) if math.isfinite(r) else math.nan


def fisher_interval(r: float, n: int, level: float) -> tuple[float, float]:
    """Fisher-z interval for a Pearson r from n independent pairs: tanh(atanh r ± z/√(n−3)).

    NaN bounds when n ≤ 3 or r is NaN; |r| = 1 gives the degenerate interval [r, r].
    """
    if not math.isfinite(r) or n <= 3:
        return math.nan, math.nan
    if abs(r) >= 1.0:
        return r, r
    z = math.atanh(r)
    # the standard normal quantile (scipy.stats.norm.ppf computes it with the same ndtri;
    # scipy.special imports in a fraction of scipy.stats' time)
    half = special.ndtri(0.5 + level / 2) / math.sqrt(n - 3)
    return math.tanh(z - half), math.tanh(z + half)


def percentile_interval(values: np.ndarray, level: float) -> tuple[float, float, int]:
    """(low, high, n_valid): the level percentile interval of the finite values (linear
    interpolation, as SQL quantile_cont); NaN bounds when fewer than 2 values are finite."""
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    if v.size < 2:
        return math.nan, math.nan, int(v.size)
    lo, hi = np.quantile(v, [0.5 - level / 2, 0.5 + level / 2])
    return float(lo), float(hi), int(v.size)


@dataclass(frozen=True)
class CorrelationResult:
    """One correlation with its intervals (NaN where undefined)."""

    n: int
    r: float
    fisher_low: float
    fisher_high: float
    boot_low: float
    boot_high: float
    n_boot_valid: int
    p_value: float


def correlation_with_intervals(
    x: np.ndarray, y: np.ndarray, boot_r: np.ndarray | None, *, level: float, min_n: int
) -> CorrelationResult:
    """r, Fisher-z interval and p-value of (x, y), and the percentile interval of ``boot_r``
    (bootstrap replicates of r; None: no bootstrap)."""
    n = int(len(x))
    r = pearson(x, y, min_n=min_n)
    fl, fh = fisher_interval(r, n, level)
    if boot_r is None or not math.isfinite(r):
        bl, bh, nv = math.nan, math.nan, 0
    else:
        bl, bh, nv = percentile_interval(boot_r, level)
    return CorrelationResult(n, r, fl, fh, bl, bh, nv, float(pearson_pvalue(r, n)))


def two_stage_bootstrap_r(
    replicates: np.ndarray, y: np.ndarray, n_boot: int, rng: np.random.Generator, *, min_n: int
) -> np.ndarray:
    """Bootstrap replicates of r(metric, score) over models, with the metric's own uncertainty.

    replicates: (n, R) float64, row i = model i's metric in its layer-bootstrap replicates
    1..R (a model without replicates repeats its point value); y: (n,) scores.  Each of the
    n_boot draws resamples the n models with replacement and takes, for every drawn model, one
    of its replicates at random.  Returns (n_boot,) r values (NaN when degenerate).
    """
    reps = np.asarray(replicates, np.float64)
    n, R = reps.shape
    if n == 0 or R == 0 or n_boot == 0:
        return np.full(n_boot, np.nan)
    pick = rng.integers(0, n, size=(n_boot, n))
    which = rng.integers(0, R, size=(n_boot, n))
    xs = reps[pick, which]
    ys = np.asarray(y, np.float64)[pick]
    # a draw that repeats fewer than min_n distinct models is degenerate
    ordered = np.sort(pick, axis=1)
    distinct = 1 + np.count_nonzero(np.diff(ordered, axis=1), axis=1)
    out = weighted_pearson(xs, ys, np.ones((n_boot, n)), min_n=min_n, if_constant=math.nan)
    out[distinct < min_n] = np.nan
    return out


def jackknife_se(values: np.ndarray) -> float:
    """Delete-a-group jackknife standard error of a statistic from its leave-group-out values.

    ``values``: θ_(g), the statistic recomputed without document group g, one per group (NaN for
    a group without a value, e.g. one with no rows, which is left out: G counts the finite
    values).  Returns ``sqrt((G - 1) / G · Σ_g (θ_(g) - θ̄_(·))²)`` with θ̄_(·) their mean; NaN
    when fewer than 2 are finite.

    For the mean of G equal-sized groups this is the standard error of the group means,
    ``sd(group means, ddof=1) / sqrt(G)``: θ_(g) - θ̄_(·) = -(x̄_g - x̄) / (G - 1), so
    SE² = Σ_g (x̄_g - x̄)² / (G (G - 1)).  The dbt marts compute the same formula in SQL
    (docs/metrics/jackknife.md).
    """
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    g = v.size
    if g < 2:
        return math.nan
    return math.sqrt((g - 1) / g * float(np.sum((v - v.mean()) ** 2)))


#: the columns of a correlation row after its key (family_correlations, benchmark_correlations)
CORRELATION_FIELDS: tuple[tuple[str, pa.DataType], ...] = (
    ("n", pa.int64()),
    ("n_models", pa.int64()),
    ("pearson_r", pa.float64()),
    ("fisher_ci_low", pa.float64()),
    ("fisher_ci_high", pa.float64()),
    ("boot_ci_low", pa.float64()),
    ("boot_ci_high", pa.float64()),
    ("p_value", pa.float64()),
    ("n_boot", pa.int64()),
    ("level", pa.float64()),
    ("seed", pa.int64()),
    ("method", pa.string()),
    ("note", pa.string()),
)


def _finite_or_none(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else v


def correlation_row(
    res: CorrelationResult,
    *,
    n_models: int,
    n_boot: int,
    level: float,
    seed: int,
    method: str,
    note: str | None,
) -> dict[str, object]:
    """The columns :data:`CORRELATION_FIELDS` of one correlation (non-finite values as None)."""
    return {
        "n": res.n,
        "n_models": n_models,
        "pearson_r": _finite_or_none(res.r),
        "fisher_ci_low": _finite_or_none(res.fisher_low),
        "fisher_ci_high": _finite_or_none(res.fisher_high),
        "boot_ci_low": _finite_or_none(res.boot_low),
        "boot_ci_high": _finite_or_none(res.boot_high),
        "p_value": _finite_or_none(res.p_value),
        "n_boot": n_boot,
        "level": level,
        "seed": seed,
        "method": method,
        "note": note,
    }


def correlation_table(
    key_fields: tuple[tuple[str, pa.DataType], ...], rows: list[dict[str, object]]
) -> pa.Table:
    """The correlation rows (each: its key columns, then :func:`correlation_row`) as a table with
    the key columns followed by :data:`CORRELATION_FIELDS`."""
    schema = pa.schema([*key_fields, *CORRELATION_FIELDS])
    return pa.table({f.name: [r[f.name] for r in rows] for f in schema}, schema=schema)
