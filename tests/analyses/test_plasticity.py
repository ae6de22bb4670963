"""Attention plasticity (spec §2.3): pieces, invariants, estimators, outputs.

Synthetic heads come from a small in-test generator with planted geometry (queries drifting along a
known direction, keys with a planted positional slope along a direction the query mean points
to).  Reference computations are deliberately naive (explicit H matrix, lstsq, Python loops over
pairs, scipy.stats) so that they share no code path with the vectorised implementation.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats as st
from numpy.testing import assert_allclose, assert_array_equal

from qkwh.analyses import normality
from qkwh.analyses import plasticity as pl
from qkwh.analyses.declared.plasticity import PlasticityParams
from qkwh.analyses.types import HeadData
from qkwh.params import pair_seed

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    """Single-threaded BLAS, as in compute: on a busy 2-core box OpenBLAS worker threads spin and
    the real-data tests slow down ~10x."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1, user_api="blas"):
        yield


# ---------------------------------------------------------------------------------------------
# synthetic heads
# ---------------------------------------------------------------------------------------------
def make_head(
    *,
    n_examples: int = 40,
    n_buckets: int = 8,
    bucket_size: int = 256,
    d: int = 8,
    q_per: int = 2,
    k_per: int = 2,
    q_slope: float = 1e-3,
    k_slope: float = 1e-3,
    seed: int = 0,
    layer: int = 2,
    q_head: int = 5,
    sliding_window: int | None = None,
    dtype=np.float32,
) -> HeadData:
    """Gaussian Q/K with planted positional structure.

    q = mu_q + q_slope * t * drift + noise_q,  k = mu_k + k_slope * s * kdir + noise_k, with
    ``mu_q`` having a large component along ``kdir`` (so the key slope moves q.(k1 - k2)) and
    correlated (non-diagonal) noise.  ``q_per``/``k_per`` rows per example and bucket at uniform
    positions inside the bucket.
    """
    rng = np.random.default_rng(seed)

    def rows(per: int):
        ex = np.repeat(np.arange(n_examples), n_buckets * per)
        b = np.tile(np.repeat(np.arange(n_buckets), per), n_examples)
        pos = b * bucket_size + rng.integers(0, bucket_size, size=b.size)
        return pos, ex, b

    tq, eq, bq = rows(q_per)
    tk, ek, bk = rows(k_per)
    drift = rng.standard_normal(d)
    drift /= np.linalg.norm(drift)
    kdir = rng.standard_normal(d)
    kdir /= np.linalg.norm(kdir)
    mu_q = 2.0 * kdir + 0.5 * rng.standard_normal(d)
    mu_k = 0.3 * rng.standard_normal(d)
    Aq = rng.standard_normal((d, d)) / math.sqrt(d)
    Ak = rng.standard_normal((d, d)) / math.sqrt(d)
    noise_q = rng.standard_normal((tq.size, d)) @ Aq
    noise_k = rng.standard_normal((tk.size, d)) @ Ak
    q = mu_q + q_slope * np.outer(tq, drift) + noise_q
    k = mu_k + k_slope * np.outer(tk, kdir) + noise_k
    return HeadData(
        q=q.astype(dtype),
        q_pos=tq,
        q_example=eq,
        q_bucket=bq,
        k=k.astype(dtype),
        k_pos=tk,
        k_example=ek,
        k_bucket=bk,
        context_length=n_buckets * bucket_size,
        bucket_size=bucket_size,
        sliding_window=sliding_window,
        layer=layer,
        q_head=q_head,
    )


def with_vectors(head: HeadData, q: np.ndarray, k: np.ndarray, **kw) -> HeadData:
    fields = {f: getattr(head, f) for f in head.__dataclass_fields__}
    fields.update(q=q, k=k, **kw)
    return HeadData(**fields)


def run(head: HeadData, seed: int = 0, **params) -> dict[str, dict[str, np.ndarray]]:
    return pl.analyse(head, PlasticityParams(**params), seed=seed).tables


def head_summary(tables: dict, column: str = "ap_bucket") -> dict[str, float]:
    """Test oracle for the head aggregates the dbt project derives from the buckets:
    n-weighted ap_overall, deciles by floor(10 tau/L), first/last 20 % and ap_drop (plain loops)."""
    b = tables["plasticity_buckets"]
    L = float(tables["plasticity_heads"]["context_length"][0])
    num, den = [0.0] * 10, [0.0] * 10
    tot_num = tot_den = 0.0
    for tau, n, ap in zip(b["bucket_position"], b["n_queries"], b[column]):
        if not np.isfinite(ap):
            continue
        k = min(int(math.floor(10 * tau / L)), 9)
        num[k] += n * ap
        den[k] += n
        tot_num += n * ap
        tot_den += n
    dec = [num[k] / den[k] if den[k] else math.nan for k in range(10)]
    first, last = (dec[0] + dec[1]) / 2, (dec[8] + dec[9]) / 2
    return {
        "ap_overall": tot_num / tot_den if tot_den else math.nan,
        "ap_drop": first - last,
        "ap_first_20pct": first,
        "ap_last_20pct": last,
        **{f"decile_{k}": dec[k] for k in range(10)},
    }


def assert_tables_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for table in a:
        assert a[table].keys() == b[table].keys(), table
        for col in a[table]:
            assert_array_equal(a[table][col], b[table][col], err_msg=f"{table}.{col}")


# ---------------------------------------------------------------------------------------------
# naive reference implementation (exhaustive mode)
# ---------------------------------------------------------------------------------------------
def reference(
    head: HeadData, cov_mode: str, eligibility: str, eps: float = 1e-12, pairs: bool = True
):
    """Per-bucket exhaustive AP, heatmap dict and head quantities, computed the slow way."""
    Q = np.asarray(head.q, dtype=np.float64)
    K = np.asarray(head.k, dtype=np.float64)
    kb = np.asarray(head.k_bucket)
    bucket_means = np.stack([K[kb == b].mean(axis=0) for b in np.unique(kb)])
    s = np.where(bucket_means.mean(axis=0) < 0, -1.0, 1.0)
    Q, K = Q * s, K * s
    t = np.asarray(head.q_pos, dtype=np.float64)
    A = np.column_stack([np.ones_like(t), t])
    coef = np.linalg.lstsq(A, Q, rcond=None)[0]
    beta = coef[1]
    d = Q.shape[1]
    bh = beta / np.linalg.norm(beta)
    v = (bh - np.eye(d)[0]) / np.linalg.norm(bh - np.eye(d)[0])
    H = np.eye(d) - 2.0 * np.outer(v, v)
    Qr, Kr = Q @ H, K @ H
    bp = np.linalg.norm(beta)
    ap_ = Qr[:, 0].mean() - bp * t.mean()
    s2 = np.sum((Qr[:, 0] - ap_ - bp * t) ** 2) / (len(t) - 2)
    coef_rot = np.linalg.lstsq(A, Qr, rcond=None)[0]
    resid_var = np.var(Qr - A @ coef_rot, axis=0, ddof=1)
    r2 = 1 - np.sum((Q - A @ coef) ** 2, axis=0) / np.sum((Q - Q.mean(0)) ** 2, axis=0)
    W = head.bucket_size
    out = {}
    for j in np.unique(head.q_bucket):
        rows = head.q_bucket == j
        tau = t[rows].mean()
        sem = Qr[rows, 1:]
        if cov_mode == "global_diag":
            mu = coef_rot[0, 1:] + coef_rot[1, 1:] * tau
            Sig = np.diag(resid_var[1:] + eps)
        else:
            mu = sem.mean(axis=0)
            Sig = np.cov(sem.T, ddof=1) + eps * np.eye(d - 1)
            if cov_mode == "diag":
                Sig = np.diag(np.diag(Sig))
        w = np.concatenate([[ap_ + bp * tau], mu])
        Sp = np.zeros((d, d))
        Sp[0, 0] = s2
        Sp[1:, 1:] = Sig
        if eligibility == "position":
            elig = np.asarray(head.k_pos) < tau
        else:
            elig = kb < j
        if head.sliding_window is not None:
            elig &= (tau - np.asarray(head.k_pos)) <= head.sliding_window
        pps, zs, heat = [], [], {}
        for e in np.unique(head.k_example) if pairs else []:
            idx = np.flatnonzero(elig & (head.k_example == e))
            for a, b in itertools.combinations(idx, 2):
                delta = Kr[a] - Kr[b]
                z = (delta @ w) / math.sqrt(delta @ Sp @ delta)
                pp = 4 * st.norm.cdf(z) * st.norm.sf(z)
                pps.append(pp)
                zs.append(abs(z))
                s1, s2_ = head.k_pos[a], head.k_pos[b]
                cell = (int(abs(s1 - s2_) // W), int(math.floor((tau - (s1 + s2_) / 2) / W)))
                n0, sp0, sq0 = heat.get(cell, (0, 0.0, 0.0))
                heat[cell] = (n0 + 1, sp0 + pp, sq0 + pp * pp)
        out[int(j)] = dict(
            tau=tau,
            n_elig=int(elig.sum()),
            A=len(pps),
            ap=np.mean(pps) if pps and rows.sum() >= 2 else np.nan,
            mean_abs_z=np.mean(zs) if pps else np.nan,
            heat=heat,
        )
    return out, dict(alpha_pos=ap_, beta_pos=bp, sigma2_pos=s2, r2=r2, H=H, Qr=Qr, t=t)


# ---------------------------------------------------------------------------------------------
# output contract
# ---------------------------------------------------------------------------------------------
def schema_columns(table: str) -> list[str]:
    """Declared columns of ``table`` (the head key and config_id are added by qkwh)."""
    from qkwh.analyses import registry

    return list(registry.table(table).column_names)


def test_tables_have_exactly_the_schema_columns():
    tables = run(make_head())
    assert set(tables) == {
        "plasticity_heads",
        "plasticity_buckets",
        "plasticity_heatmap",
        "plasticity_components",
    }
    for name, cols in tables.items():
        assert sorted(cols) == sorted(schema_columns(name)), name
        assert len({len(v) for v in cols.values()}) == 1, name
    assert len(tables["plasticity_heads"]["n_q"]) == 1
    assert len(tables["plasticity_components"]["component"]) == 8
    assert_array_equal(tables["plasticity_buckets"]["q_bucket"], np.arange(8))
    assert set(tables["plasticity_buckets"]["mode"]) == {"sampled/full/position"}


# ---------------------------------------------------------------------------------------------
# pieces
# ---------------------------------------------------------------------------------------------
def test_cap_rows():
    assert pl.cap_rows(10, 10, 0) is None
    assert pl.cap_rows(5, 10, 0) is None
    idx = pl.cap_rows(1000, 100, 7)
    assert idx.shape == (100,) and np.all(np.diff(idx) > 0) and idx.max() < 1000
    assert_array_equal(idx, np.sort(np.random.default_rng(7).choice(1000, 100, replace=False)))
    with pytest.raises(ValueError, match="max_tokens_per_head"):
        pl.cap_rows(10, 0, 0)


@pytest.mark.parametrize("kind", ["random", "near_e1", "minus_e1"])
def test_householder_maps_beta_hat_to_e1(kind):
    rng = np.random.default_rng(3)
    d = 16
    beta = {
        "random": rng.standard_normal(d),
        "near_e1": np.eye(d)[0] + 1e-9 * rng.standard_normal(d),
        "minus_e1": -3.0 * np.eye(d)[0],
    }[kind]
    v = pl.householder_vector(beta)
    assert v is not None
    H = np.eye(d) - 2 * np.outer(v, v)
    assert_allclose(H @ (beta / np.linalg.norm(beta)), np.eye(d)[0], atol=1e-12)
    assert_allclose(H, H.T, atol=0)
    assert_allclose(H @ H.T, np.eye(d), atol=1e-14)
    X = rng.standard_normal((50, d))
    assert_allclose(pl.apply_householder(X, v), X @ H, atol=1e-13)
    Y = X.copy()
    out = pl.apply_householder(Y, v, inplace=True)
    assert out is Y
    assert_allclose(Y, X @ H, atol=1e-13)


def test_householder_identity_cases():
    assert pl.householder_vector(np.zeros(5)) is None
    assert pl.householder_vector(np.array([2.0, 0, 0, 0])) is None
    X = np.arange(12.0).reshape(3, 4)
    assert_array_equal(pl.apply_householder(X, None), X)


def test_rotated_regression_has_slope_norm_beta_e1():
    head = make_head(d=12, n_examples=30)
    t = head.q_pos.astype(float)
    Q = head.q.astype(float)
    reg = pl.fit_position_regression(t, Q)
    v = pl.householder_vector(reg.beta)
    reg_rot = pl.fit_position_regression(t, pl.apply_householder(Q, v))
    expected = np.linalg.norm(reg.beta) * np.eye(12)[0]
    assert_allclose(reg_rot.beta, expected, atol=1e-12 * np.abs(Q).max() / t.std())
    # semantic coordinates: zero slope, so their R^2 is ~0
    assert np.all(np.abs(reg_rot.r2[1:]) < 1e-12)


def test_regression_matches_lstsq():
    rng = np.random.default_rng(0)
    t = rng.integers(0, 4096, 500).astype(float)
    X = rng.standard_normal((500, 6)) + np.outer(t, rng.standard_normal(6)) * 1e-3 + 5.0
    reg = pl.fit_position_regression(t, X)
    A = np.column_stack([np.ones_like(t), t])
    coef = np.linalg.lstsq(A, X, rcond=None)[0]
    assert_allclose(reg.alpha, coef[0], rtol=1e-10)
    assert_allclose(reg.beta, coef[1], rtol=1e-10)
    r2 = 1 - ((X - A @ coef) ** 2).sum(0) / ((X - X.mean(0)) ** 2).sum(0)
    assert_allclose(reg.r2, r2, rtol=1e-9)
    # no positional variance -> zero slopes, R^2 = 0
    flat = pl.fit_position_regression(np.full(500, 7.0), X)
    assert_array_equal(flat.beta, 0.0)
    assert_allclose(flat.r2, 0.0, atol=1e-15)


def test_orientation_signs_average_bucket_means_unweighted():
    # dim 0: bucket means -1 (9 keys) and +3 (1 key): unweighted mean +1 (pooled mean -0.6)
    # dim 1: all zero -> +1; dim 2: bucket means +1 and -5 -> -1
    k = np.zeros((10, 3))
    k[:9, 0], k[9, 0] = -1.0, 3.0
    k[:9, 2], k[9, 2] = 1.0, -5.0
    buckets = np.array([0] * 9 + [1])
    assert_array_equal(pl.orientation_signs(k, buckets), [1.0, 1.0, -1.0])
    assert_array_equal(pl.orientation_signs(np.zeros((0, 3)), np.zeros(0, int)), [1.0, 1.0, 1.0])


def test_component_weights():
    assert_allclose(pl.component_weights(np.array([0.2, -0.1, 0.6, np.nan])), [0.25, 0, 0.75, 0])
    assert_allclose(pl.component_weights(np.array([-0.2, 0.0])), [0.5, 0.5])


def test_ks_and_moments_match_scipy():
    rng = np.random.default_rng(5)
    for n in (3, 7, 200, 3000):
        Z = rng.standard_normal((n, 9)) * 1.2 + 0.1
        Z[:, 2] = np.round(Z[:, 2], 1)  # ties
        ref = st.kstest(Z, "norm", axis=0)
        # p-values: scipy's exact kstwo.sf; large-n tail via the log-space Birnbaum-Tingey sum
        assert_allclose(pl.ks_norm_pvalues(Z), ref.pvalue, rtol=1e-9, atol=1e-300)
        med, frac = pl._ks_summary(np.ascontiguousarray(Z.T), 0.2)
        assert_allclose(med, np.median(ref.pvalue), rtol=1e-9)
        assert frac == np.mean(ref.pvalue < 0.2)
        sk, ku = pl.standardised_moments(Z - Z.mean(0), n)
        assert_allclose(sk, st.skew(Z, axis=0, bias=False), rtol=1e-9, atol=1e-12)
        assert_allclose(ku, st.kurtosis(Z, axis=0, fisher=True, bias=False), rtol=1e-9, atol=1e-12)
    const = np.zeros((10, 1))
    assert np.isnan(pl.standardised_moments(const, 10)[0][0])


def test_kstwo_sf_matches_scipy_in_every_regime():
    for n in (5, 140, 141, 2000, 8000):
        for lam in (0.3, 0.9, 1.3, 1.5, 1.63, 2.5, 6.0, 12.0, 25.0):
            D = min(lam / math.sqrt(n), 0.999)
            assert_allclose(
                pl._kstwo_sf_one(D, n),
                st.kstwo.sf(D, n),
                rtol=1e-9,
                atol=1e-300,
                err_msg=f"{n} {D}",
            )
    assert pl._kstwo_sf_one(0.4 / 8000, 8000) == st.kstwo.sf(0.4 / 8000, 8000) == 1.0


#: computes the exact KS p-values of argv[1] (JSON list of [D, n]) in a fresh interpreter, and
#: prints them (as float.hex) with whether scipy.stats got imported
_KSTWO_PROBE = """
import json, sys
from qkwh.analyses import normality
cases = json.loads(sys.argv[1])
values = [normality._kstwo_sf_scipy(D, n).hex() for D, n in cases]
print(json.dumps({"values": values, "scipy_stats": "scipy.stats" in sys.modules}))
"""


def test_kstwo_sf_is_scipys_to_the_bit_without_importing_scipy_stats():
    """The exact p-value comes from scipy's own kstwo code, loaded without ``scipy.stats``
    (whose import costs every compute worker more than a head): bit for bit the value of
    ``scipy.stats.kstwo.sf``, in every branch of scipy's case split (small and large n, the
    Ruben-Gambino ends, DMTW, Pomeranz, Pelz-Good, Smirnov, both ends of the support)."""
    rng = np.random.default_rng(11)
    cases = []
    for n in (1, 2, 3, 7, 60, 140, 141, 1000, 8000, 100_001):
        near = rng.uniform(0.0, 4.0 / math.sqrt(n), 25)
        anywhere = rng.uniform(0.0, 1.0, 10)
        edges = (0.0, 0.25 / n, 0.5 / n, 0.75 / n, 1.0 / n, 0.5, 1.0 - 1.0 / n, 1.0, 1.5)
        cases += [[float(D), n] for D in (*near, *anywhere, *edges)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    r = subprocess.run(
        [sys.executable, "-c", _KSTWO_PROBE, json.dumps(cases)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["scipy_stats"] is False
    got = [float.fromhex(v) for v in out["values"]]
    want = [float(st.kstwo.sf(D, n)) for D, n in cases]
    assert [g.hex() for g in got] == [w.hex() for w in want]
    # in this process scipy.stats is loaded: its own module serves, with the same values
    assert [normality._kstwo_sf_scipy(D, n) for D, n in cases[:40]] == want[:40]


def test_ks_summary_matches_scipy_on_heavy_tails_and_ties():
    """Exercises the float32 screening: heavy tails (every p tiny), duplicated rows (tied D)."""
    for seed, alpha in ((0, 0.01), (1, 0.3)):
        Z = st.t.rvs(6, size=(9, 1500), random_state=seed)
        Z[4:8] = Z[0]  # five identical rows
        p = st.kstest(Z, "norm", axis=1).pvalue
        med, frac = pl._ks_summary(Z.copy(), alpha)
        assert_allclose(med, np.median(p), rtol=1e-9)
        assert frac == np.mean(p < alpha)
    Z = np.random.default_rng(0).standard_normal((8, 1500))
    p = st.kstest(Z, "norm", axis=1).pvalue
    alpha = float(np.sort(p)[3]) * (1 + 1e-9)  # threshold just above a p-value: screening undecided
    assert pl._ks_summary(Z.copy(), alpha)[1] == np.mean(p < alpha) == 0.5


def test_blocked_ks_statistic_equals_every_point_bit_for_bit():
    """Phi only at block ends plus the blocks that can hold the maximum: same D to the last bit
    (Gaussian, heavy-tailed and skewed rows, ties, a short tail block, float32 and float64 rows,
    non-finite values, rows shorter than four blocks)."""
    from qkwh.analyses import normality as nm

    rng = np.random.default_rng(21)
    rows = [
        rng.standard_normal((6, 8000)),
        st.t.rvs(3, size=(6, 5001), random_state=2),
        rng.gamma(2.0, 1.0, (6, 4099)) - 2.0,
        np.round(rng.standard_normal((4, 3000)), 1),
        rng.standard_normal((3, 40)) + 0.5,
    ]
    bad = rng.standard_normal((4, 1000))
    bad[1, 5], bad[2, 7], bad[3, 9] = np.nan, np.inf, -np.inf
    rows.append(bad)
    for Z in rows:
        for dtype in (np.float64, np.float32):
            srt = np.sort(Z.astype(dtype), axis=1)
            ref = nm._ks_every_point(srt)
            for block in (4, nm.KS_BLOCK, 64):
                assert_array_equal(nm._ks_from_sorted(srt, block), ref)
    # and the definition itself is scipy's statistic
    Z = rows[1]
    assert_allclose(
        nm._ks_every_point(np.sort(Z, axis=1)),
        st.kstest(Z, "norm", axis=1).statistic,
        rtol=0,
        atol=1e-15,
    )


def test_query_model_from_shared_moments_equals_the_model_from_rows():
    """The bulk path builds each bucket's model from the head's shared query moments (sign flip
    and reflection applied to the moments, O(d²)); it equals the model from the rotated rows."""
    from qkwh.analyses.moments import query_moments
    from qkwh.analyses.plasticity_model import reflect_symmetric

    rng = np.random.default_rng(8)
    S = rng.standard_normal((6, 6))
    S = S @ S.T
    v = rng.standard_normal(6)
    v /= np.linalg.norm(v)
    H = np.eye(6) - 2.0 * np.outer(v, v)
    out = reflect_symmetric(S, v)
    assert_allclose(out, H @ S @ H, rtol=1e-12, atol=1e-12)
    assert_array_equal(out, out.T)
    assert_array_equal(reflect_symmetric(S, None), S)

    head = make_head(seed=3, q_per=6, d=6)
    qm = query_moments(head.q, head.q_pos, head.q_bucket)
    signs = np.where(rng.standard_normal(6) < 0, -1.0, 1.0)
    Qc = qm.qc * signs
    Qr = pl.apply_householder(Qc, v)
    offset = rng.standard_normal(6)
    pos = pl.PositionalModel(0.3, 0.002, 0.7)
    for i in range(len(qm.buckets)):
        rows = slice(int(qm.start[i]), int(qm.start[i] + qm.count[i]))
        for mode in ("full", "diag"):
            ref = pl.query_model(Qr[rows], 100.0, pos, mode, 1e-9, offset=offset)
            got = pl.query_model_from_moments(
                pl.apply_householder((qm.bucket_mean[i] * signs)[None, :], v)[0],
                reflect_symmetric(qm.bucket_scatter[i] * np.outer(signs, signs), v),
                int(qm.count[i]),
                100.0,
                pos,
                mode,
                1e-9,
                offset=offset,
            )
            assert_allclose(got.w, ref.w, rtol=1e-12, atol=1e-12)
            assert_allclose(got.cov, ref.cov, rtol=1e-10, atol=1e-12)
            if mode == "full":
                assert_allclose(got.chol, ref.chol, rtol=1e-10, atol=1e-12)


def test_plasticity_with_shared_query_moments_is_the_same_computation():
    from qkwh.analyses.moments import query_moments

    head = make_head(seed=4)
    params = PlasticityParams(num_pairs_per_bucket=64)
    own = pl.analyse(head, params, seed=1).tables
    shared = pl.analyse(
        head, params, seed=1, moments=query_moments(head.q, head.q_pos, head.q_bucket)
    ).tables
    for table, cols in own.items():
        for name, values in cols.items():
            assert_array_equal(values, shared[table][name], err_msg=f"{table}.{name}")


# ---------------------------------------------------------------------------------------------
# closed form
# ---------------------------------------------------------------------------------------------
def test_closed_form_agrees_with_monte_carlo():
    """Pr_q(q.k1 > q.k2) under q ~ N(w, Sigma') vs Phi(z); MC error 5 * sqrt(p(1-p)/M)."""
    rng = np.random.default_rng(11)
    d, M = 6, 400_000
    w = rng.standard_normal(d)
    B = rng.standard_normal((d - 1, d - 1))
    cov = B @ B.T / d + 0.1 * np.eye(d - 1)
    s2 = 0.7
    Sp = np.zeros((d, d))
    Sp[0, 0] = s2
    Sp[1:, 1:] = cov
    q = w + rng.standard_normal((M, d)) @ np.linalg.cholesky(Sp).T
    delta = (
        rng.standard_normal((8, d)) * np.array([0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 0.02])[:, None]
    )
    pp, z = pl.pair_plasticity(delta, w, s2, cov)
    p_emp = (q @ delta.T > 0).mean(axis=0)
    p = st.norm.cdf(z)
    se = np.sqrt(p * (1 - p) / M)
    assert np.all(np.abs(p_emp - p) <= 5 * se + 1e-12), (p_emp, p)
    assert_allclose(pp, 4 * p * (1 - p), rtol=1e-12)
    # PP = 4p(1-p) is 4-Lipschitz in p
    assert np.all(np.abs(4 * p_emp * (1 - p_emp) - pp) <= 4 * 5 * se + 1e-12)
    # the pairs span informative regimes (not all saturated at p = 0 or 1)
    assert p.min() < 0.2 and p.max() > 0.8 and np.all((p > 0.02) & (p < 0.98)), p


def test_pair_plasticity_variants_agree_and_are_symmetric():
    rng = np.random.default_rng(2)
    d = 9
    w = rng.standard_normal(d)
    B = rng.standard_normal((d - 1, d - 1))
    cov = B @ B.T + 0.5 * np.eye(d - 1)
    delta = rng.standard_normal((300, d))
    pp, z = pl.pair_plasticity(delta, w, 0.3, cov)
    S = np.zeros((d, d), order="F")
    S[0, 0], S[1:, 1:] = 0.3, cov
    U = pl._upper_cholesky(S)
    pp_c, z_c = pl.pair_plasticity(delta.copy(), w, 0.3, cov, chol=U, overwrite_delta=True)
    assert_allclose(z_c, z, rtol=1e-11)
    assert_allclose(pp_c, pp, rtol=1e-11, atol=1e-300)
    pp_m, z_m = pl.pair_plasticity(-delta, w, 0.3, cov)
    assert_allclose(pp_m, pp, rtol=1e-13)
    assert_allclose(z_m, -z, rtol=1e-13)
    assert np.all((pp >= 0) & (pp <= 1))
    # diagonal covariance given as a vector == the same matrix
    var = np.abs(rng.standard_normal(d - 1)) + 0.1
    pp_v, _ = pl.pair_plasticity(delta, w, 0.3, var)
    pp_d, _ = pl.pair_plasticity(delta, w, 0.3, np.diag(var))
    assert_allclose(pp_v, pp_d, rtol=1e-12)
    # identical keys: v floored, m = 0 -> PP = 1
    assert_allclose(pl.pair_plasticity(np.zeros((1, d)), w, 0.3, cov)[0], [1.0])


# ---------------------------------------------------------------------------------------------
# pair enumeration / sampling
# ---------------------------------------------------------------------------------------------
def test_enumerate_and_sample_pairs():
    counts = np.array([3, 1, 0, 5])
    i1, i2 = pl.enumerate_pairs(counts)
    assert len(i1) == pl.admissible_pair_counts(counts).sum() == 13
    owner = np.repeat(np.arange(4), counts)
    assert np.all(i1 < i2) and np.all(owner[i1] == owner[i2])
    assert len(set(zip(i1.tolist(), i2.tolist()))) == 13
    rng = np.random.default_rng(0)
    n = 130_000
    s1, s2 = pl.sample_pairs(rng, counts, n)
    assert np.all(s1 != s2) and np.all(owner[s1] == owner[s2])
    key = np.minimum(s1, s2) * 10 + np.maximum(s1, s2)
    _, freq = np.unique(key, return_counts=True)
    assert len(freq) == 13
    expected = n / 13
    assert np.all(np.abs(freq - expected) < 5 * math.sqrt(expected * 12 / 13))  # uniform over pairs


# ---------------------------------------------------------------------------------------------
# end-to-end against the naive reference
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("cov_mode", "eligibility", "window"),
    [
        ("full", "position", None),
        ("diag", "position", None),
        ("global_diag", "position", None),
        ("full", "strict_bucket", None),
        ("full", "position", 300),
        ("diag", "strict_bucket", 500),
    ],
)
def test_exhaustive_matches_naive_reference(cov_mode, eligibility, window):
    head = make_head(
        n_examples=10, n_buckets=5, d=6, q_per=3, k_per=2, sliding_window=window, dtype=np.float64
    )
    keep = np.random.default_rng(1).random(len(head.k_pos)) < 0.75  # unequal key-bucket counts
    head = with_vectors(
        head,
        head.q,
        head.k[keep],
        k_pos=head.k_pos[keep],
        k_example=head.k_example[keep],
        k_bucket=head.k_bucket[keep],
    )
    tables = run(head, pairs="exhaustive", cov_mode=cov_mode, eligibility=eligibility)
    ref, hq = reference(head, cov_mode, eligibility)
    b = tables["plasticity_buckets"]
    for i, j in enumerate(b["q_bucket"]):
        r = ref[int(j)]
        assert_allclose(b["bucket_position"][i], r["tau"], rtol=1e-14)
        assert b["n_eligible_keys"][i] == r["n_elig"]
        assert b["n_admissible_pairs"][i] == r["A"]
        assert_allclose(b["ap_bucket"][i], r["ap"], rtol=1e-9, equal_nan=True)
        assert_allclose(b["mean_abs_z"][i], r["mean_abs_z"], rtol=1e-9, equal_nan=True)
    hm = tables["plasticity_heatmap"]
    got = {
        (int(j), int(x), int(m)): (n, s, s2)
        for j, x, m, n, s, s2 in zip(
            hm["q_bucket"], hm["dx_bin"], hm["dm_bin"], hm["n"], hm["sum_pp"], hm["sum_pp2"]
        )
    }
    want = {(j, *cell): val for j, r in ref.items() for cell, val in r["heat"].items()}
    assert got.keys() == want.keys()
    for key, (n, s, s2) in want.items():
        assert got[key][0] == n
        assert_allclose(got[key][1:], (s, s2), rtol=1e-9)
    h = tables["plasticity_heads"]
    assert_allclose(
        [h["alpha_pos"][0], h["beta_pos"][0], h["sigma2_pos"][0]],
        [hq["alpha_pos"], hq["beta_pos"], hq["sigma2_pos"]],
        rtol=1e-9,
    )
    c = tables["plasticity_components"]
    assert_allclose(c["component_r2"], hq["r2"], rtol=1e-9, atol=1e-13)
    assert_allclose(
        c["component_weight"], np.maximum(hq["r2"], 0) / np.maximum(hq["r2"], 0).sum(), rtol=1e-9
    )
    assert_allclose(h["q_R2_pos"][0], hq["r2"].mean(), rtol=1e-9)


def test_diagnostics_match_scipy_reference():
    head = make_head(n_examples=25, d=7, dtype=np.float64)
    seed = 4
    h = run(head, seed=seed, normality_max_dims=3, p_alpha=0.5)["plasticity_heads"]
    _, hq = reference(head, "full", "position", pairs=False)
    t, Qr = hq["t"], hq["Qr"]
    n, d = Qr.shape
    Q = np.asarray(head.q, dtype=float)
    beta = np.linalg.lstsq(np.column_stack([np.ones(n), t]), Q, rcond=None)[0][1]
    assert_allclose(h["q_beta_norm"][0], np.linalg.norm(beta), rtol=1e-10)
    # scalar predictability: OLS of log2(t+1) on the projection
    y = np.log2(t + 1)
    lr = st.linregress(Qr[:, 0], y)
    yhat = lr.intercept + lr.slope * Qr[:, 0]
    assert_allclose(h["q_R2_scalar"][0], lr.rvalue**2, rtol=1e-8)
    assert_allclose(h["q_mae_baseline"][0], np.mean(np.abs(y - y.mean())), rtol=1e-10)
    assert_allclose(h["q_mae_proj"][0], np.mean(np.abs(y - yhat)), rtol=1e-8)
    assert_allclose(
        h["q_mae_ratio"][0], np.mean(np.abs(y - yhat)) / np.mean(np.abs(y - y.mean())), rtol=1e-8
    )
    # residual of rotated coordinate 0
    lr0 = st.linregress(t, Qr[:, 0])
    res = Qr[:, 0] - lr0.intercept - lr0.slope * t
    z0 = (res - res.mean()) / res.std(ddof=1)
    assert_allclose(h["q_resid0_skew"][0], st.skew(z0, bias=False), rtol=1e-7)
    assert_allclose(h["q_resid0_kurt"][0], st.kurtosis(z0, fisher=True, bias=False), rtol=1e-7)
    assert_allclose(h["q_resid0_ks_p"][0], st.kstest(z0, "norm").pvalue, rtol=1e-7)
    # semantic coordinates
    sem = (Qr[:, 1:] - Qr[:, 1:].mean(0)) / Qr[:, 1:].std(0, ddof=1)
    assert_allclose(
        h["q_noise_med_abs_skew"][0], np.median(np.abs(st.skew(sem, bias=False))), rtol=1e-7
    )
    assert_allclose(
        h["q_noise_med_abs_kurt"][0], np.median(np.abs(st.kurtosis(sem, bias=False))), rtol=1e-7
    )
    dims = np.random.default_rng(seed).choice(d - 1, 3, replace=False)
    p = st.kstest(sem[:, dims], "norm", axis=0).pvalue
    assert_allclose(h["q_noise_med_ks_p"][0], np.median(p), rtol=1e-7)
    assert h["q_noise_frac_ks_p_lt_alpha"][0] == np.mean(p < 0.5)
    assert h["seed_used"][0] == pair_seed(seed, head.layer, head.q_head)


# ---------------------------------------------------------------------------------------------
# sampled vs exhaustive
# ---------------------------------------------------------------------------------------------
def test_sampled_agrees_with_exhaustive_within_standard_error():
    head = make_head(n_examples=100, n_buckets=8, d=10, k_per=3, q_per=2)
    P = 256
    ex = run(head, pairs="exhaustive", num_pairs_per_bucket=P)["plasticity_buckets"]
    big = ex["n_admissible_pairs"] > P
    assert big.sum() >= 6
    zs, se_ratio = [], []
    for seed in range(6):
        sa = run(head, seed=seed, num_pairs_per_bucket=P)["plasticity_buckets"]
        assert_array_equal(sa["n_pairs"][big], P)
        zs.append((sa["ap_bucket"][big] - ex["ap_bucket"][big]) / ex["ap_bucket_se"][big])
        se_ratio.append(sa["ap_bucket_se"][big] / ex["ap_bucket_se"][big])
        # buckets with A <= P are exact in both modes
        assert_array_equal(sa["ap_bucket"][~big], ex["ap_bucket"][~big])
    z = np.concatenate(zs)
    assert np.abs(z).max() < 4.0, z
    assert 0.5 < np.abs(z).mean() < 1.1  # E|N(0,1)| = 0.80
    assert 0.6 < z.std() < 1.4
    assert 0.85 < np.median(np.concatenate(se_ratio)) < 1.15


def test_pair_rng_is_consumed_bucket_by_bucket():
    """Replay the sampler: one default_rng(pair_seed) drawing P pairs per bucket in increasing j
    (buckets with A <= P draw nothing), keys laid out by (example, position)."""
    head = make_head(n_examples=12, n_buckets=5, d=6, k_per=4, dtype=np.float64, layer=3, q_head=7)
    P = 64
    tables = run(head, seed=9, num_pairs_per_bucket=P)
    b = tables["plasticity_buckets"]
    _, hq = reference(head, "full", "position", pairs=False)
    Kr = np.asarray(head.k, dtype=float)
    kb = np.asarray(head.k_bucket)
    s = np.where(np.stack([Kr[kb == c].mean(0) for c in np.unique(kb)]).mean(0) < 0, -1.0, 1.0)
    Kr = (Kr * s) @ hq["H"]
    order = np.lexsort((head.k_pos, head.k_example))
    rng = np.random.default_rng(pair_seed(9, 3, 7))
    n_sampled = 0
    for i, j in enumerate(b["q_bucket"]):
        tau = b["bucket_position"][i]
        elig = order[head.k_pos[order] < tau]
        counts = np.bincount(head.k_example[elig], minlength=12)
        if pl.admissible_pair_counts(counts).sum() <= P:
            continue
        i1, i2 = pl.sample_pairs(rng, counts, P)
        rows = head.q_bucket == j
        sem = hq["Qr"][rows, 1:]
        w = np.concatenate([[hq["alpha_pos"] + hq["beta_pos"] * tau], sem.mean(0)])
        cov = np.cov(sem.T, ddof=1) + 1e-12 * np.eye(5)
        pp, _ = pl.pair_plasticity(Kr[elig[i1]] - Kr[elig[i2]], w, hq["sigma2_pos"], cov)
        assert_allclose(b["ap_bucket"][i], pp.mean(), rtol=1e-9)
        assert_allclose(b["ap_bucket_se"][i], pp.std(ddof=1) / math.sqrt(P), rtol=1e-7)
        n_sampled += 1
    assert n_sampled >= 3


def test_sampled_equals_exhaustive_when_all_pairs_fit():
    head = make_head(n_examples=8, n_buckets=6, d=5)
    ex = run(head, pairs="exhaustive", num_pairs_per_bucket=10_000)
    sa = run(head, pairs="sampled", num_pairs_per_bucket=10_000)
    assert np.all(ex["plasticity_buckets"]["n_admissible_pairs"] <= 10_000)
    for table in ("plasticity_buckets", "plasticity_heatmap", "plasticity_components"):
        for col, val in ex[table].items():
            if col != "mode":
                assert_array_equal(sa[table][col], val, err_msg=f"{table}.{col}")
    assert_array_equal(sa["plasticity_buckets"]["ap_bucket_se"][1:], 0.0)


def test_exhaustive_gram_blocking_does_not_change_results(monkeypatch):
    head = make_head(n_examples=3, n_buckets=4, d=6, k_per=20)
    base = run(head, pairs="exhaustive")
    monkeypatch.setattr(pl, "_GRAM_BLOCK", 50)  # forces row blocks of single examples
    small = run(head, pairs="exhaustive")
    for table in ("plasticity_buckets", "plasticity_heatmap"):
        for col, val in base[table].items():
            if val.dtype.kind == "f":
                assert_allclose(small[table][col], val, rtol=1e-12, equal_nan=True)
            else:
                assert_array_equal(small[table][col], val)


@pytest.mark.parametrize("pairs", ["sampled", "exhaustive"])
def test_sparse_heatmap_accumulation_matches_dense(monkeypatch, pairs):
    head = make_head(n_examples=30, n_buckets=6, k_per=3)
    dense = run(head, pairs=pairs)["plasticity_heatmap"]
    monkeypatch.setattr(pl, "_HEAT_DENSE_MAX", 1)
    sparse = run(head, pairs=pairs)["plasticity_heatmap"]
    for col in ("q_bucket", "dx_bin", "dm_bin", "n"):
        assert_array_equal(sparse[col], dense[col])
    assert_allclose(sparse["sum_pp"], dense["sum_pp"], rtol=1e-12)
    assert_allclose(sparse["sum_pp2"], dense["sum_pp2"], rtol=1e-12)


def test_exhaustive_matches_direct_pair_formula():
    rng = np.random.default_rng(8)
    d = 7
    counts = np.array([4, 0, 1, 9, 2])
    K = rng.standard_normal((counts.sum(), d))
    pos = np.sort(rng.integers(0, 2000, counts.sum())).astype(float)
    B = rng.standard_normal((d - 1, d - 1))
    model = pl.QueryModel(
        tau=2100.0, w=rng.standard_normal(d), cov=B @ B.T + np.eye(d - 1), sigma2_pos=0.4
    )
    est = pl.exhaustive_bucket(K, pos, counts, model, bucket_width=256, num_pairs=20)
    i1, i2 = pl.enumerate_pairs(counts)
    pp, z = pl.pair_plasticity(K[i1] - K[i2], model.w, model.sigma2_pos, model.cov)
    assert est.n_pairs == len(pp) == 43
    assert_allclose(est.ap, pp.mean(), rtol=1e-12)
    assert_allclose(est.mean_abs_z, np.abs(z).mean(), rtol=1e-12)
    assert_allclose(est.se, pp.std(ddof=0) / math.sqrt(20), rtol=1e-9)  # A = 43 > P = 20
    est_all = pl.exhaustive_bucket(K, pos, counts, model, bucket_width=256, num_pairs=43)
    assert est_all.se == 0.0  # A <= P: the sampled mode would use every pair


# ---------------------------------------------------------------------------------------------
# invariants
# ---------------------------------------------------------------------------------------------
def random_orthogonal(d: int, seed: int) -> np.ndarray:
    Qm, R = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    return Qm * np.sign(np.diag(R))


@pytest.mark.parametrize("pairs", ["sampled", "exhaustive"])
def test_full_mode_invariant_to_joint_orthogonal_rotation(pairs):
    head = make_head(n_examples=30, d=8, dtype=np.float64, q_per=4)
    R = random_orthogonal(8, 1)
    rot = with_vectors(head, head.q @ R, head.k @ R)
    a, b = run(head, pairs=pairs), run(rot, pairs=pairs)
    for col in ("ap_bucket", "mean_abs_z", "ap_bucket_se"):
        assert_allclose(
            b["plasticity_buckets"][col], a["plasticity_buckets"][col], rtol=1e-9, equal_nan=True
        )
    for col in ("alpha_pos", "beta_pos", "sigma2_pos", "q_beta_norm"):
        assert_allclose(b["plasticity_heads"][col], a["plasticity_heads"][col], rtol=1e-9)
    for col in ("ap_overall", "ap_drop"):
        assert_allclose(head_summary(b)[col], head_summary(a)[col], rtol=1e-9)
    for col in ("n", "sum_pp"):
        assert_allclose(b["plasticity_heatmap"][col], a["plasticity_heatmap"][col], rtol=1e-9)
    if pairs == "exhaustive":
        for mode in ("diag", "global_diag"):
            da = run(head, pairs=pairs, cov_mode=mode)["plasticity_buckets"]["ap_bucket"]
            db = run(rot, pairs=pairs, cov_mode=mode)["plasticity_buckets"]["ap_bucket"]
            assert np.nanmax(np.abs(da - db)) > 1e-3, mode  # diagonal modes are basis-dependent


def test_orientation_flip_of_dims():
    head = make_head(n_examples=30, d=8)
    f = np.array([1, -1, -1, 1, 1, -1, 1, -1], dtype=np.float32)
    flipped = with_vectors(head, head.q * f, head.k * f)
    for mode in ("full", "diag", "global_diag"):
        # with orientation the canonical basis is recovered exactly: bit-identical outputs
        assert_tables_equal(run(head, cov_mode=mode), run(flipped, cov_mode=mode))
    a = run(head, orientation=False)["plasticity_buckets"]["ap_bucket"]
    b = run(flipped, orientation=False)["plasticity_buckets"]["ap_bucket"]
    assert_allclose(b, a, rtol=1e-9, equal_nan=True)


def test_ap_is_a_probability_and_heatmap_sums_match_buckets():
    tables = run(make_head(n_examples=50), pairs="exhaustive")
    b, hm = tables["plasticity_buckets"], tables["plasticity_heatmap"]
    ap = b["ap_bucket"][np.isfinite(b["ap_bucket"])]
    assert len(ap) >= 7 and np.all((ap > 0) & (ap < 1))
    for i, j in enumerate(b["q_bucket"]):
        sel = hm["q_bucket"] == j
        assert hm["n"][sel].sum() == b["n_pairs"][i] == b["n_admissible_pairs"][i]
        if b["n_pairs"][i]:
            assert_allclose(
                hm["sum_pp"][sel].sum() / hm["n"][sel].sum(), b["ap_bucket"][i], rtol=1e-12
            )
        assert np.all(hm["sum_pp2"][sel] <= hm["sum_pp"][sel] + 1e-12)
    assert np.all(hm["dm_bin"] >= 0) and np.all(hm["dx_bin"] >= 0)  # keys precede tau_j


# ---------------------------------------------------------------------------------------------
# eligibility
# ---------------------------------------------------------------------------------------------
def test_eligibility_modes_and_sliding_window():
    head = make_head(n_examples=40, n_buckets=6)
    pos_b = run(head)["plasticity_buckets"]
    strict_b = run(head, eligibility="strict_bucket")["plasticity_buckets"]
    tau = pos_b["bucket_position"]
    k_pos, k_b = head.k_pos, head.k_bucket
    assert_array_equal(pos_b["n_eligible_keys"], [(k_pos < x).sum() for x in tau])
    assert_array_equal(strict_b["n_eligible_keys"], [(k_b < j).sum() for j in range(6)])
    assert np.isfinite(pos_b["ap_bucket"][0])  # position mode: q-bucket 0 has a value
    assert np.isnan(strict_b["ap_bucket"][0]) and strict_b["n_eligible_keys"][0] == 0
    assert np.all(np.isfinite(strict_b["ap_bucket"][1:]))
    window = 300
    win = pl.analyse(
        with_vectors(head, head.q, head.k, sliding_window=window), PlasticityParams(), seed=0
    ).tables
    wb = win["plasticity_buckets"]
    assert_array_equal(
        wb["n_eligible_keys"], [((k_pos < x) & (x - k_pos <= window)).sum() for x in tau]
    )
    assert np.all(wb["n_admissible_pairs"][2:] < pos_b["n_admissible_pairs"][2:])
    hm = win["plasticity_heatmap"]
    W = head.bucket_size
    assert hm["dx_bin"].max() <= window // W and hm["dm_bin"].max() <= window // W


def test_eligibility_boundaries_hand_built():
    """tau_1 = 605 exactly; window 100: s = 505 is in (tau - s = 100), 504 is out; s = 605 is
    not strictly before tau."""
    rng = np.random.default_rng(0)
    q_pos = np.array([10, 20, 30, 600, 610])
    k_pos = np.array([5, 7, 504, 505, 550, 600, 605])
    head = HeadData(
        q=rng.standard_normal((5, 4)),
        q_pos=q_pos,
        q_example=np.zeros(5, int),
        q_bucket=q_pos // 512,
        k=rng.standard_normal((7, 4)),
        k_pos=k_pos,
        k_example=np.zeros(7, int),
        k_bucket=k_pos // 512,
        context_length=1024,
        bucket_size=512,
        sliding_window=100,
    )
    b = pl.analyse(head, PlasticityParams(), seed=0).tables["plasticity_buckets"]
    assert_array_equal(b["bucket_position"], [20.0, 605.0])
    assert_array_equal(b["n_eligible_keys"], [2, 3])  # bucket 0: 5, 7 (< 20, within 100)
    assert_array_equal(b["n_admissible_pairs"], [1, 3])
    nowin = pl.analyse(
        with_vectors(head, head.q, head.k, sliding_window=None), PlasticityParams(), seed=0
    )
    assert_array_equal(nowin.tables["plasticity_buckets"]["n_eligible_keys"], [2, 6])


# ---------------------------------------------------------------------------------------------
# aggregation
# ---------------------------------------------------------------------------------------------
def test_head_and_bucket_rows():
    tables = run(
        make_head(n_examples=30, n_buckets=16, bucket_size=128), eligibility="strict_bucket"
    )
    b, h = tables["plasticity_buckets"], tables["plasticity_heads"]
    assert np.isfinite(b["ap_bucket"]).sum() == 15  # strict_bucket: q-bucket 0 has no keys
    # head aggregates belong to the dbt project: the analysis writes none of them
    assert not {"ap_overall", "ap_drop", "decile_0", "n_buckets_valid"} & set(h)
    L = h["context_length"][0]
    assert_allclose(b["bucket_frac"], b["bucket_position"] / L, rtol=1e-15)
    assert_allclose(b["bucket_midpoint"], (b["q_bucket"] + 0.5) * 128)
    assert (h["cov_mode"][0], h["eligibility"][0], h["pairs"][0], h["empirical"][0]) == (
        "full",
        "strict_bucket",
        "sampled",
        False,
    )
    assert np.all(np.isnan(b["ap_bucket_empirical"])) and np.all(np.isnan(b["gauss_gap_se"]))


@pytest.mark.parametrize("pairs", ["exhaustive", "sampled"])
def test_stronger_key_slope_gives_larger_ap_drop(pairs):
    drops = []
    for k_slope in (2e-4, 1e-3):
        h = make_head(n_examples=60, n_buckets=16, d=16, k_slope=k_slope, seed=1)
        drops.append(head_summary(run(h, pairs=pairs))["ap_drop"])
    assert drops[1] > drops[0] + 0.1, drops


# ---------------------------------------------------------------------------------------------
# determinism and seeds
# ---------------------------------------------------------------------------------------------
def test_determinism_and_seed_dependence():
    head = make_head(n_examples=60, k_per=3)
    a, b = run(head, seed=3), run(head, seed=3)
    assert_tables_equal(a, b)
    c = run(head, seed=4)
    big = a["plasticity_buckets"]["n_admissible_pairs"] > 1024
    assert big.sum() >= 3
    assert np.all(
        a["plasticity_buckets"]["ap_bucket"][big] != c["plasticity_buckets"]["ap_bucket"][big]
    )
    assert c["plasticity_heads"]["seed_used"][0] == a["plasticity_heads"]["seed_used"][0] + 1
    ea, ec = run(head, seed=3, pairs="exhaustive"), run(head, seed=4, pairs="exhaustive")
    assert_array_equal(ea["plasticity_buckets"]["ap_bucket"], ec["plasticity_buckets"]["ap_bucket"])
    assert_array_equal(ea["plasticity_heatmap"]["sum_pp"], ec["plasticity_heatmap"]["sum_pp"])


# ---------------------------------------------------------------------------------------------
# degenerate and bad input
# ---------------------------------------------------------------------------------------------
def test_no_keys_gives_nan_rows():
    head = make_head(n_examples=10)
    empty = with_vectors(
        head,
        head.q,
        np.zeros((0, 8), np.float32),
        k_pos=np.zeros(0, int),
        k_example=np.zeros(0, int),
        k_bucket=np.zeros(0, int),
    )
    t = run(empty)
    b = t["plasticity_buckets"]
    assert len(b["q_bucket"]) == 8 and np.all(np.isnan(b["ap_bucket"]))
    assert_array_equal(b["n_eligible_keys"], 0)
    assert len(t["plasticity_heatmap"]["n"]) == 0
    h = t["plasticity_heads"]
    assert h["n_k"][0] == 0 and np.isnan(head_summary(t)["ap_overall"])
    assert np.isfinite(h["q_R2_pos"][0])  # query diagnostics do not need keys


@pytest.mark.parametrize("n_q", [0, 1])
def test_too_few_queries_gives_nan_rows(n_q):
    head = make_head(n_examples=10)
    few = with_vectors(
        head,
        head.q[:n_q],
        head.k,
        q_pos=head.q_pos[:n_q],
        q_example=head.q_example[:n_q],
        q_bucket=head.q_bucket[:n_q],
    )
    t = run(few)
    assert len(t["plasticity_buckets"]["q_bucket"]) == n_q
    assert np.all(np.isnan(t["plasticity_buckets"]["ap_bucket"]))
    h = t["plasticity_heads"]
    assert h["n_q"][0] == n_q and np.isnan(h["q_R2_pos"][0])
    assert len(t["plasticity_components"]["component"]) == 8


def test_singleton_bucket_is_nan_but_others_are_not():
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
    b = run(h)["plasticity_buckets"]
    assert b["n_queries"][3] == 1 and np.isnan(b["ap_bucket"][3]) and b["n_pairs"][3] == 0
    assert np.isfinite(b["ap_bucket"][[1, 2, 4, 5]]).all()


def test_bad_input_raises_value_error_naming_the_problem():
    head = make_head(n_examples=5)
    with pytest.raises(ValueError, match=r"head dimension mismatch: q has d=8 but k has d=6"):
        run(with_vectors(head, head.q, head.k[:, :6]))
    with pytest.raises(ValueError, match="k_pos"):
        run(with_vectors(head, head.q, head.k, k_pos=head.k_pos[:-1]))
    with pytest.raises(ValueError, match="context_length"):
        run(with_vectors(head, head.q, head.k, context_length=0))
    with pytest.raises(ValueError, match="cov_mode"):
        run(head, cov_mode="dense")


# ---------------------------------------------------------------------------------------------
# real captures: the embedded sample (always present) and the ../shared fixture (optional)
# ---------------------------------------------------------------------------------------------
def load_real_head(root: Path, layer: int, q_head: int, group: int = 3) -> HeadData:
    import pyarrow.parquet as pq

    def read(name: str):
        t = pq.read_table(
            root / name / "data.parquet", columns=["bucket", "example_id", "position", "vector"]
        )
        vec = t.column("vector").combine_chunks()
        d = vec.type.list_size
        return (
            vec.values.to_numpy().reshape(-1, d),
            *(t.column(c).to_numpy() for c in ("position", "example_id", "bucket")),
        )

    q, qt, qe, qb = read(f"l{layer:02d}h{q_head:02d}q")
    k, kt, ke, kb = read(f"l{layer:02d}h{q_head // group:02d}k")
    return HeadData(
        q=q,
        q_pos=qt,
        q_example=qe,
        q_bucket=qb,
        k=k,
        k_pos=kt,
        k_example=ke,
        k_bucket=kb,
        context_length=8192,
        bucket_size=512,
        layer=layer,
        q_head=q_head,
    )


def _shared_fixture() -> Path | None:
    for base in Path(__file__).resolve().parents:
        cand = base / "shared" / "fixtures" / "smollm2-135m"
        if cand.is_dir():
            return cand
    return None


def real_heads(root: Path) -> list[tuple[int, int]]:
    out = []
    for p in sorted(root.glob("l??h??q")):
        layer, q_head = int(p.name[1:3]), int(p.name[4:6])
        if (root / f"l{layer:02d}h{q_head // 3:02d}k" / "data.parquet").exists():
            out.append((layer, q_head))
    return out


def sampled_vs_exhaustive(head: HeadData):
    sa = run(head)
    ex = run(head, pairs="exhaustive")
    bs, be = sa["plasticity_buckets"], ex["plasticity_buckets"]
    big = be["n_admissible_pairs"] > 1024
    z = (bs["ap_bucket"][big] - be["ap_bucket"][big]) / be["ap_bucket_se"][big]
    assert_array_equal(bs["ap_bucket"][~big], be["ap_bucket"][~big])
    return head_summary(sa), head_summary(ex), z


def test_embedded_sample_real_heads():
    root = REPO / "warehouse" / "sample" / "smollm2-135m"
    heads = real_heads(root)[:2]
    assert heads, "embedded sample has no q/k head pair"
    for layer, q_head in heads:
        _hs, he, z = sampled_vs_exhaustive(load_real_head(root, layer, q_head))
        assert 0.25 < he["ap_overall"] < 0.9
        assert np.all(np.abs(z) < 4.5), z
        assert np.isfinite([he[f"decile_{k}"] for k in range(10)]).all()


def test_shared_fixture_real_heads():
    root = _shared_fixture()
    if root is None:
        pytest.skip("../shared fixture absent (only in CI/dev checkouts)")
    heads = real_heads(root)[::10]  # 6 of the 60 heads, spread over layers
    overall, drops, zs = [], [], []
    for layer, q_head in heads:
        hs, he, z = sampled_vs_exhaustive(load_real_head(root, layer, q_head))
        overall.append(he["ap_overall"])
        drops.append(he["ap_drop"])
        zs.append(z)
        assert abs(hs["ap_overall"] - he["ap_overall"]) < 0.01
    z = np.concatenate(zs)
    # spec §8: ap_overall ~ 0.55 and ap_drop ~ 0.18 over the 60 heads
    assert 0.45 < np.mean(overall) < 0.65, overall
    assert 0.08 < np.mean(drops) < 0.3, drops
    assert np.mean(np.abs(z) < 4) >= 0.95 and np.abs(z).max() < 5, z
    assert 0.4 < np.mean(np.abs(z)) < 1.2
