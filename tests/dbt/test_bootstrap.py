"""qkwh.bootstrap: the correlation statistics the dbt correlation models call."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from qkwh.analyses.correlation import pearson_pvalue, weighted_pearson
from qkwh.bootstrap import (
    correlation_with_intervals,
    fisher_interval,
    pearson,
    percentile_interval,
    stream,
    two_stage_bootstrap_r,
)


def test_weighted_pearson_is_pearson_of_the_repeated_points():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=9), rng.normal(size=9)
    w = rng.integers(0, 4, size=(5, 9)).astype(float)
    got = weighted_pearson(x, y, w, min_n=3, if_constant=math.nan)
    for b in range(5):
        reps = w[b].astype(int)
        want = np.corrcoef(np.repeat(x, reps), np.repeat(y, reps))[0, 1]
        assert got[b] == pytest.approx(want, rel=1e-12)


def test_pearson_is_withheld_for_too_few_points_or_a_constant_side():
    assert math.isnan(pearson(np.array([1.0, 2.0]), np.array([3.0, 1.0])))
    assert math.isnan(pearson(np.array([1.0, 2.0, 3.0]), np.array([5.0, 5.0, 5.0])))
    assert math.isnan(pearson(np.array([]), np.array([])))
    assert pearson(np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 3.0, 2.0, 4.0])) == 0.8


def test_fisher_interval_of_the_thesis_headline():
    """r = -0.67 over 7 models: the 95 % Fisher-z interval is about [-0.95, +0.17]."""
    lo, hi = fisher_interval(-0.67, 7, 0.95)
    assert lo == pytest.approx(-0.947, abs=0.002) and hi == pytest.approx(0.17, abs=0.01)
    assert all(math.isnan(v) for v in fisher_interval(0.5, 3, 0.95))
    assert fisher_interval(1.0, 10, 0.95) == (1.0, 1.0)


def test_p_value_matches_scipy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=12)
    y = 0.4 * x + rng.normal(size=12)
    res = stats.pearsonr(x, y)
    assert pearson_pvalue(float(res.statistic), 12) == pytest.approx(res.pvalue, rel=1e-9)
    assert math.isnan(pearson_pvalue(0.3, 2)) and pearson_pvalue(-1.0, 5) == 0.0


def test_percentile_interval_ignores_undefined_replicates():
    lo, hi, n = percentile_interval(np.array([np.nan, 0.0, 1.0, 2.0, 3.0, 4.0]), 0.5)
    assert (lo, hi, n) == (1.0, 3.0, 5)
    assert math.isnan(percentile_interval(np.array([np.nan, 1.0]), 0.95)[0])


def test_two_stage_bootstrap_widens_with_the_metric_noise():
    """With exact metrics the bootstrap only resamples models; noisy per-model replicates
    widen the interval; a fixed seed gives the same replicates."""
    rng = np.random.default_rng(1)
    n = 12
    x = rng.normal(size=n)
    y = x + 0.5 * rng.normal(size=n)
    exact = np.repeat(x[:, None], 300, axis=1)
    noisy = x[:, None] + 0.8 * rng.normal(size=(n, 300))
    a = two_stage_bootstrap_r(exact, y, 1000, stream(0, "g"), min_n=3)
    b = two_stage_bootstrap_r(noisy, y, 1000, stream(0, "g"), min_n=3)
    width = lambda v: np.subtract(*np.nanquantile(v, [0.975, 0.025]))  # noqa: E731
    assert width(b) > 1.2 * width(a)
    assert np.array_equal(
        a, two_stage_bootstrap_r(exact, y, 1000, stream(0, "g"), min_n=3), equal_nan=True
    )
    assert np.nanmedian(b) < np.nanmedian(a)  # noise in x attenuates r


def test_correlation_with_intervals_without_a_bootstrap():
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    y = np.array([2.0, 1.0, 4.0, 3.0, 5.0])
    res = correlation_with_intervals(x, y, None, level=0.95, min_n=3)
    assert res.n == 5 and res.r == 0.8 and math.isnan(res.boot_low) and res.n_boot_valid == 0
    assert res.fisher_low < 0.8 < res.fisher_high
