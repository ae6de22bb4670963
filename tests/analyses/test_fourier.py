"""Blocked Chebyshev moments against direct Fourier sums."""

from __future__ import annotations

import numpy as np
from numpy.testing import assert_allclose

from qkwh.analyses.fourier import ChebyshevBasis


def test_blocked_chebyshev_moments_equal_direct_fourier_sums(monkeypatch):
    rng = np.random.default_rng(5)
    tau = np.sort(rng.integers(0, 20_000, 3000)).astype(float)
    u = rng.standard_normal((3000, 3))
    om = np.geomspace(1e-5, 2e-3, 40)
    monkeypatch.setattr(ChebyshevBasis, "BLOCK", 257)  # several blocks, a ragged last one
    cheb = ChebyshevBasis(tau, 2 * om[-1], interval=(0.0, 19_999.0))
    m, ones = cheb.moments_and_ones(u, cheb.order_for(om), cheb.order)
    direct = np.exp(-1j * np.outer(om, tau - cheb.centre)) @ u
    assert_allclose(cheb.from_moments(m, om), direct, rtol=1e-11, atol=1e-9)
    direct2 = np.exp(-2j * np.outer(om, tau - cheb.centre)).sum(axis=1)
    assert_allclose(cheb.from_moments(ones, 2 * om), direct2, rtol=1e-11, atol=1e-9)


def test_leap_recurrence_gives_the_chebyshev_polynomials():
    """T_k from the leap recurrence (LEAP orders per step) equal cos(k arccos x) to 3e-12 for
    k < 300, with the order not a multiple of LEAP; the three-term recurrence (LEAP = 1) too."""
    x = np.cos(np.linspace(0.0, np.pi, 1001))
    cheb = ChebyshevBasis(x, 1.0, interval=(-1.0, 1.0))
    eye = np.eye(x.size)
    ref = np.cos(np.outer(np.arange(299), np.arccos(np.clip(cheb.x, -1, 1))))
    for leap in (1, 8, 13):
        cheb.LEAP = leap
        m, ones = cheb.moments_and_ones(eye, 299, 299)
        assert_allclose(m, ref, rtol=0, atol=3e-12)
        assert_allclose(ones, ref.sum(axis=1), rtol=0, atol=1e-10)
