"""qkwh.analyses.correlation: the one Pearson implementation and its constant-input rule.

Per-head geometry reports r = 0 for a constant side, the correlation marts NaN (NULL): both ask
the same module, which decides "constant" once and returns what the caller names in
``if_constant``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sst

from qkwh import bootstrap
from qkwh.analyses import correlation as corr


@pytest.fixture
def xy() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    x = rng.standard_normal(50)
    return x, 0.4 * x + rng.standard_normal(50)


@pytest.mark.parametrize("constant", [np.full(50, 3.7), np.full(50, 1e6 + 0.1), np.zeros(50)])
def test_a_constant_side_gives_exactly_what_the_caller_names(xy, constant):
    x, y = xy
    for a, b in ((constant, y), (x, constant)):
        assert corr.pearson(a, b, if_constant=0.0) == 0.0
        assert math.isnan(corr.pearson(a, b, if_constant=math.nan))
        assert corr.pearson_cols(np.column_stack([a, a]), b, if_constant=-2.0).tolist() == [
            -2.0,
            -2.0,
        ]
        w = np.ones((2, 50))
        assert corr.weighted_pearson(a, b, w, min_n=3, if_constant=0.0).tolist() == [0.0, 0.0]
        assert np.isnan(corr.weighted_pearson(a, b, w, min_n=3, if_constant=math.nan)).all()
        # the marts' rule: undefined -> NaN (NULL), and its p-value NaN
        assert math.isnan(bootstrap.pearson(a, b))
        res = bootstrap.correlation_with_intervals(a, b, None, level=0.95, min_n=3)
        assert math.isnan(res.r) and math.isnan(res.p_value) and res.n == 50


def test_constant_means_constant_up_to_rounding_on_both_paths():
    """A vector that is constant up to float rounding is constant for the plain and the weighted
    path alike (one threshold: var <= ZERO_VAR_REL² x mean square); a tiny real spread is not."""
    y = np.linspace(0.0, 1.0, 40)
    rounded = np.full(40, 1e6 + 0.1) + np.tile([0.0, 1e-10], 20)  # spread ~1e-10 on 1e6: rounding
    real = 1e6 + 1e-3 * np.arange(40.0)  # spread 1e-3 on 1e6: a real trend
    ones = np.ones((1, 40))
    assert corr.is_zero_variance(rounded.var(), float(rounded @ rounded) / 40)
    assert corr.pearson(rounded, y, if_constant=0.0) == 0.0
    assert corr.weighted_pearson(rounded, y, ones, min_n=3, if_constant=0.0)[0] == 0.0
    assert corr.pearson(real, y, if_constant=0.0) == pytest.approx(1.0)
    assert corr.weighted_pearson(real, y, ones, min_n=3, if_constant=0.0)[0] == pytest.approx(1.0)


def test_plain_weighted_and_scipy_agree_off_the_rule(xy):
    x, y = xy
    want = sst.pearsonr(x, y)
    assert corr.pearson(x, y, if_constant=0.0) == pytest.approx(want.statistic, rel=1e-12)
    got = corr.weighted_pearson(x, y, np.ones((1, 50)), min_n=3, if_constant=math.nan)[0]
    assert got == pytest.approx(want.statistic, rel=1e-12)
    assert bootstrap.pearson(x, y) == round(float(got), 12)
    assert float(corr.pearson_pvalue(want.statistic, 50)) == pytest.approx(want.pvalue, rel=1e-9)
    # too few points: NaN whatever if_constant says
    assert math.isnan(
        corr.weighted_pearson(x[:2], y[:2], np.ones((1, 2)), min_n=3, if_constant=0.0)[0]
    )
    assert math.isnan(float(corr.pearson_pvalue(0.5, 2)))


def test_bootstrap_has_no_pearson_arithmetic_of_its_own():
    """One implementation: the marts' module imports the kernels instead of redefining them."""
    assert bootstrap.weighted_pearson is corr.weighted_pearson
    assert bootstrap.pearson_pvalue is corr.pearson_pvalue
    assert not hasattr(bootstrap, "p_value")


def test_if_constant_is_required():
    with pytest.raises(TypeError):
        corr.pearson(np.arange(5.0), np.arange(5.0))  # type: ignore[call-arg]
