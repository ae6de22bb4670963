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
