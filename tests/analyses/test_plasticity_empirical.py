"""The empirical (real-query) plasticity estimator (spec §2.3.10) beside the Gaussian one.

References are deliberately naive: a Python loop over every admissible pair, scoring every real
query of the bucket with plain dot products of the raw vectors.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from qkwh.analyses import plasticity as pl
from qkwh.analyses.types import HeadData

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_plasticity import (  # (shared generators of the plasticity tests)
    REPO,
    head_summary,
    load_real_head,
    make_head,
    random_orthogonal,
    real_heads,
    run,
    with_vectors,
)


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1, user_api="blas"):
        yield


def naive_empirical(head: HeadData, eligibility: str = "position") -> np.ndarray:
    """Exhaustive AP_j(empirical) per query bucket, one admissible pair at a time."""
    Q = np.asarray(head.q, dtype=np.float64)
    K = np.asarray(head.k, dtype=np.float64)
    qb, tq = np.asarray(head.q_bucket), np.asarray(head.q_pos, dtype=np.float64)
    ke, ks, kb = np.asarray(head.k_example), np.asarray(head.k_pos), np.asarray(head.k_bucket)
    out = []
    for j in np.unique(qb):
        queries = Q[qb == j]
        n = len(queries)
        tau = tq[qb == j].mean()
        elig = (ks < tau) if eligibility == "position" else (kb < j)
        values = []
        for e in np.unique(ke[elig]):
            idx = np.flatnonzero(elig & (ke == e))
            for a in range(len(idx)):
                for b in range(a + 1, len(idx)):
                    s1, s2 = queries @ K[idx[a]], queries @ K[idx[b]]
                    p = (np.sum(s1 > s2) + 0.5 * np.sum(s1 == s2)) / n
                    values.append(4 * p * (1 - p) * n / (n - 1))
        out.append(np.mean(values) if values and n >= 2 else np.nan)
    return np.array(out)


def test_pair_formula():
    n = 10
    assert_allclose(
        pl.empirical_pair_plasticity(np.array([0.0, n, -n, 4.0]), n),
        [n / (n - 1), 0.0, 0.0, (1 - 0.4**2) * n / (n - 1)],
        rtol=1e-15,
    )
    diff = np.array([[1.0, -2.0, 0.0, 3.0], [0.0, 0.0, 0.0, 0.0]])
    assert_array_equal(pl.net_wins(diff), [1.0, 0.0])


@pytest.mark.parametrize("eligibility", ["position", "strict_bucket"])
def test_exhaustive_equals_naive_count_synthetic(eligibility):
    head = make_head(n_examples=25, n_buckets=6, q_per=4, k_per=3, d=8, seed=3)
    got = run(head, pairs="exhaustive", empirical=True, eligibility=eligibility)[
        "plasticity_buckets"
    ]
    assert_allclose(
        got["ap_bucket_empirical"], naive_empirical(head, eligibility), rtol=1e-13, equal_nan=True
    )


@pytest.mark.slow
def test_exhaustive_equals_naive_count_on_real_capture():
    """The embedded sample is a real capture (SmolLM2-135M): every admissible pair of every bucket."""
    root = REPO / "warehouse" / "sample" / "smollm2-135m"
    layer, q_head = real_heads(root)[0]
    head = load_real_head(root, layer, q_head)
    b = run(head, pairs="exhaustive", empirical=True)["plasticity_buckets"]
    assert np.isfinite(b["ap_bucket_empirical"]).sum() >= 15
    assert_allclose(b["ap_bucket_empirical"], naive_empirical(head), rtol=1e-13, equal_nan=True)


def test_ties_count_half():
    """A key duplicated inside one example ties with itself for every query: p = 1/2."""
    head = make_head(n_examples=6, n_buckets=4, q_per=3, k_per=2, d=5, seed=7)
    k = np.array(head.k)
    first = np.flatnonzero((head.k_example == 0) & (head.k_bucket == 0))
    k[first[1]] = k[first[0]]
    tied = with_vectors(head, head.q, k)
    got = run(tied, pairs="exhaustive", empirical=True)["plasticity_buckets"]["ap_bucket_empirical"]
    assert_allclose(got, naive_empirical(tied), rtol=1e-13, equal_nan=True)


def test_sampled_scores_the_gaussian_pairs():
    """Turning the empirical estimator on changes no Gaussian output (same pairs, same RNG use),
    and each sampled empirical value is a mean over exactly those pairs."""
    head = make_head(n_examples=80, n_buckets=8, k_per=3, seed=2)
    off = run(head, num_pairs_per_bucket=256)
    on = run(head, num_pairs_per_bucket=256, empirical=True)
    for table in off:
        for col, val in off[table].items():
            if col not in (
                "ap_bucket_empirical",
                "ap_bucket_empirical_se",
                "gauss_gap_se",
                "empirical",
            ):
                assert_array_equal(on[table][col], val, err_msg=f"{table}.{col}")
    b = on["plasticity_buckets"]
    sampled = b["n_admissible_pairs"] > 256
    assert sampled.sum() >= 4
    assert np.all(b["ap_bucket_empirical_se"][sampled] > 0) and np.all(
        b["gauss_gap_se"][sampled] > 0
    )
    assert np.all(b["ap_bucket_empirical_se"][~sampled & (b["n_pairs"] > 0)] == 0)


@pytest.mark.parametrize("layer_head", [0, 1])
def test_sampled_within_4_se_of_exhaustive_on_real_capture(layer_head):
    root = REPO / "warehouse" / "sample" / "smollm2-135m"
    layer, q_head = real_heads(root)[layer_head]
    head = load_real_head(root, layer, q_head)
    sa = run(head, empirical=True, num_pairs_per_bucket=256)["plasticity_buckets"]
    ex = run(head, pairs="exhaustive", empirical=True, num_pairs_per_bucket=256)[
        "plasticity_buckets"
    ]
    big = ex["n_admissible_pairs"] > 256
    assert big.sum() >= 8
    z = (sa["ap_bucket_empirical"][big] - ex["ap_bucket_empirical"][big]) / sa[
        "ap_bucket_empirical_se"
    ][big]
    assert np.all(np.abs(z) < 4), z
    assert_array_equal(sa["ap_bucket_empirical"][~big], ex["ap_bucket_empirical"][~big])


def test_rotation_invariant():
    """q.k is invariant under a joint orthogonal map, so is the empirical estimate."""
    head = make_head(n_examples=30, d=8, dtype=np.float64, q_per=4)
    R = random_orthogonal(8, 1)
    rot = with_vectors(head, head.q @ R, head.k @ R)
    for pairs in ("sampled", "exhaustive"):
        a = run(head, pairs=pairs, empirical=True, num_pairs_per_bucket=64)["plasticity_buckets"]
        b = run(rot, pairs=pairs, empirical=True, num_pairs_per_bucket=64)["plasticity_buckets"]
        assert_allclose(
            b["ap_bucket_empirical"], a["ap_bucket_empirical"], rtol=1e-12, equal_nan=True
        )


def test_singleton_bucket_is_nan():
    head = make_head(n_examples=20)
    keep = ~(
        (head.q_bucket == 3)
        & (np.arange(len(head.q_bucket)) > np.flatnonzero(head.q_bucket == 3)[0])
    )
    h = with_vectors(
        head,
        head.q[keep],
        head.k,
        q_pos=head.q_pos[keep],
        q_example=head.q_example[keep],
        q_bucket=head.q_bucket[keep],
    )
    b = run(h, empirical=True)["plasticity_buckets"]
    assert (
        np.isnan(b["ap_bucket_empirical"][3])
        and np.isfinite(b["ap_bucket_empirical"][[1, 2, 4]]).all()
    )


# ---------------------------------------------------------------------------------------------
# planted query distributions: the sign of the Gaussian shortcut's error
# ---------------------------------------------------------------------------------------------
def planted_head(
    kind: str,
    *,
    seed: int = 0,
    n_examples: int = 200,
    n_buckets: int = 4,
    d: int = 6,
    q_per: int = 10,
) -> HeadData:
    """Queries with mean ``mu`` and one planted noise law along every direction; keys Gaussian.

    ``gauss``: N(0, I).  ``heavy``: Student t with 3 degrees of freedom scaled to unit variance
    (a scale mixture of normals: for moderate z = m/sqrt(v), the share p of queries preferring
    one key is further from 1/2 than Phi(z), so the Gaussian over-states plasticity:
    gap = Gaussian - empirical > 0).  ``bimodal``: +-u along one direction u with small
    isotropic noise (q.delta is two-peaked around the mean, p stays near 1/2 where the Gaussian
    puts it far off: gap < 0).
    """
    rng = np.random.default_rng(seed)
    base = make_head(
        n_examples=n_examples,
        n_buckets=n_buckets,
        q_per=q_per,
        k_per=2,
        d=d,
        seed=seed,
        q_slope=0.0,
        k_slope=0.0,
        dtype=np.float64,
    )
    n = len(base.q_pos)
    mu = 0.6 * rng.standard_normal(d)
    if kind == "gauss":
        eps = rng.standard_normal((n, d))
    elif kind == "heavy":
        nu = 3.0
        w = nu / rng.chisquare(nu, size=(n, 1))  # t = g * sqrt(w), Var = nu / (nu - 2)
        eps = rng.standard_normal((n, d)) * np.sqrt(w) / math.sqrt(nu / (nu - 2))
    elif kind == "bimodal":
        u = np.zeros(d)
        u[:] = 1 / math.sqrt(d)
        eps = 2.0 * rng.choice([-1.0, 1.0], size=(n, 1)) * u + 0.05 * rng.standard_normal((n, d))
    else:
        raise ValueError(kind)
    k = rng.standard_normal((len(base.k_pos), d))
    return with_vectors(base, mu + eps, k)


def replicate_gaps(kind: str, n_rep: int = 6) -> tuple[float, float, list[float]]:
    """Head gap (query-weighted mean of Gaussian - empirical over buckets, exhaustive pairs) over
    ``n_rep`` independently drawn heads -> (mean, standard error of the mean, the gaps).

    The spread across replicates is the noise of a finite number of real queries (~500 per
    bucket here); ``gauss_gap_se`` only covers pair sampling, which exhaustive mode removes.
    """
    gaps = []
    for seed in range(n_rep):
        b = run(
            planted_head(kind, seed=seed, n_examples=100, q_per=5),
            pairs="exhaustive",
            empirical=True,
        )["plasticity_buckets"]
        ok = np.isfinite(b["ap_bucket"]) & np.isfinite(b["ap_bucket_empirical"])
        w = b["n_queries"][ok].astype(float)
        gaps.append(float(w @ (b["ap_bucket"][ok] - b["ap_bucket_empirical"][ok]) / w.sum()))
    return float(np.mean(gaps)), float(np.std(gaps, ddof=1) / math.sqrt(n_rep)), gaps


def test_gaussian_head_has_no_gap():
    g, se, _ = replicate_gaps("gauss")
    assert abs(g) < 3 * se + 1e-4 and se < 0.002, (g, se)


def test_heavy_tailed_head_gap_is_positive():
    g, se, gaps = replicate_gaps("heavy")
    assert min(gaps) > 0.01 and g > 4 * se, gaps


def test_bimodal_head_gap_is_negative():
    g, se, gaps = replicate_gaps("bimodal")
    assert max(gaps) < -0.01 and g < -4 * se, gaps


def test_head_summary_of_empirical_buckets():
    """The dbt project aggregates ap_bucket_empirical exactly as ap_bucket; the oracle agrees."""
    tables = run(make_head(n_examples=40, n_buckets=10), empirical=True)
    emp = head_summary(tables, "ap_bucket_empirical")
    gauss = head_summary(tables)
    assert abs(emp["ap_overall"] - gauss["ap_overall"]) < 0.05
    assert np.isfinite(emp["ap_drop"])
