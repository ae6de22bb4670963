"""Combined Q/K PCA (spec §2.1) and the shared stats helpers it uses."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy import stats as sst

from qkwh import synth
from qkwh.analyses import pca, rotation, stats
from qkwh.analyses.declared.pca import PCAParams
from qkwh.analyses.types import HeadData


def _head(seed: int = 0, **kw) -> tuple[HeadData, synth.PlantedTruth]:
    args = dict(n_q=3000, n_k=3000, d=24)
    args.update(kw)
    return synth.make_head(np.random.default_rng(seed), **args)


def _run(head: HeadData, params: PCAParams = PCAParams()) -> tuple[dict, dict]:
    t = pca.analyse(head, params).tables
    return t["pca_components"], {k: v[0] for k, v in t["pca_heads"].items()}


def _reference(head: HeadData, n_pc: int = 10) -> dict[str, np.ndarray]:
    """Straightforward row-level re-implementation of spec §2.1 (sklearn semantics)."""
    q, k = head.q.astype(np.float64), head.k.astype(np.float64)
    x = np.concatenate([q, k])
    xbar = x.mean(axis=0)
    lam, vec = np.linalg.eigh(np.cov(x, rowvar=False))
    lam, vec = lam[::-1], vec[:, ::-1]
    v = vec[:, :n_pc] * np.sign(vec[np.argmax(np.abs(vec[:, :n_pc]), axis=0), np.arange(n_pc)])
    zq, zk = (q - xbar) @ v, (k - xbar) @ v
    r_q = np.array([np.corrcoef(zq[:, i], head.q_pos)[0, 1] for i in range(n_pc)])
    r_k = np.array([np.corrcoef(zk[:, i], head.k_pos)[0, 1] for i in range(n_pc)])
    return dict(lam=lam, vec=vec, v=v, zq=zq, zk=zk, r_q=r_q, r_k=r_k, evr=lam[:n_pc] / lam.sum())


@pytest.fixture(scope="module")
def positional():
    head, truth = _head(seed=1)
    comps, row = _run(head)
    return head, truth, comps, row, _reference(head)


# ---------------------------------------------------------------------------------------------
# PCA core
# ---------------------------------------------------------------------------------------------
def test_explained_variance_matches_numpy_eigenvalues(positional) -> None:
    _, _, comps, row, ref = positional
    assert_array_equal(comps["pc"], np.arange(10))
    assert_allclose(comps["explained_variance_ratio"], ref["evr"], rtol=1e-10)
    assert comps["explained_variance_ratio"].sum() <= 1.0
    assert np.all(np.diff(comps["explained_variance_ratio"]) <= 0)
    assert (row["n_q"], row["n_k"], row["d"]) == (3000, 3000, 24)
    assert_allclose([row["ev0"], row["ev1"]], ref["evr"][:2], rtol=1e-10)


def test_correlations_and_canonical_signs(positional) -> None:
    _, _, comps, _, ref = positional
    # same |r| as the row-level reference; the sign follows the canonicalisation rule
    assert_allclose(np.abs(comps["r_q"]), np.abs(ref["r_q"]), rtol=1e-9, atol=1e-12)
    assert_allclose(np.abs(comps["r_k"]), np.abs(ref["r_k"]), rtol=1e-9, atol=1e-12)
    strong = np.abs(comps["r_q"]) >= 0.05
    assert np.all(comps["r_q"][strong] >= 0)
    assert np.all(comps["r_k"][~strong] >= 0)
    assert_array_equal(comps["anchor"], np.where(strong, "q", "k"))
    sigma = np.where(comps["sign_flipped"], -1.0, 1.0)
    assert_allclose(comps["r_q"], sigma * ref["r_q"], rtol=1e-9, atol=1e-12)
    assert_allclose(comps["r_k"], sigma * ref["r_k"], rtol=1e-9, atol=1e-12)
    assert not strong.all() and strong.any()  # both branches of the rule are exercised


def test_p_values_match_scipy(positional) -> None:
    head, _, comps, _, ref = positional
    z = ref["zq"][:, 1] * (-1.0 if comps["sign_flipped"][1] else 1.0)
    expected = sst.pearsonr(z, head.q_pos)
    assert_allclose(comps["p_q"][1], expected.pvalue, rtol=1e-6)
    z = ref["zk"][:, 4]
    assert_allclose(comps["p_k"][4], sst.pearsonr(z, head.k_pos).pvalue, rtol=1e-6)


def test_means_variances_and_head_summaries(positional) -> None:
    _, _, comps, row, ref = positional
    sigma = np.where(comps["sign_flipped"], -1.0, 1.0)
    zq, zk = ref["zq"] * sigma, ref["zk"] * sigma
    assert_allclose(comps["mean_q"], zq.mean(axis=0), atol=1e-10)
    assert_allclose(comps["mean_k"], zk.mean(axis=0), atol=1e-10)
    assert_allclose(comps["var_q"], zq.var(axis=0, ddof=1), rtol=1e-10)
    assert_allclose(comps["var_k"], zk.var(axis=0, ddof=1), rtol=1e-10)
    evr, r_q, r_k = comps["explained_variance_ratio"], comps["r_q"], comps["r_k"]
    assert_allclose(row["pos_var_q_thesis"], np.sum(evr * r_q**2), rtol=1e-12)
    assert_allclose(row["pos_var_k_thesis"], np.sum(evr * r_k**2), rtol=1e-12)
    assert_allclose(
        row["pc0_share_pos_q"], evr[0] * r_q[0] ** 2 / row["pos_var_q_thesis"], rtol=1e-12
    )
    assert_allclose(
        row["pc0_share_pos_k"], evr[0] * r_k[0] ** 2 / row["pos_var_k_thesis"], rtol=1e-12
    )
    dm = comps["mean_q"][0] - comps["mean_k"][0]
    assert_allclose(row["qk_sep_pc0"], abs(dm), rtol=1e-12)
    assert_allclose(row["fisher_pc0"], dm**2 / (comps["var_q"][0] + comps["var_k"][0]), rtol=1e-12)
    assert_allclose([row["r_q0"], row["r_k0"]], [r_q[0], r_k[0]], rtol=0)


def test_pos_var_exact_formula_cross_checked(positional) -> None:
    """‖Cov(q,t)‖²/(Var t · tr Σ_Q) = Σ_{all d} Var_Q(z_i) r_q,i² / tr Σ_Q (spec §2.1, I-13)."""
    head, _, _, row, ref = positional
    for x, t, got in (
        (head.q, head.q_pos, row["pos_var_q_exact"]),
        (head.k, head.k_pos, row["pos_var_k_exact"]),
    ):
        x = x.astype(np.float64)
        cov_xt = np.cov(np.column_stack([x, t]), rowvar=False)[:-1, -1]
        sigma = np.cov(x, rowvar=False)
        direct = cov_xt @ cov_xt / (np.var(t, ddof=1) * np.trace(sigma))
        assert_allclose(got, direct, rtol=1e-10)
        z = (x - x.mean(axis=0)) @ ref["vec"]  # the full d-dimensional eigenbasis
        r = np.array([np.corrcoef(z[:, i], t)[0, 1] for i in range(z.shape[1])])
        assert_allclose(got, np.sum(z.var(axis=0, ddof=1) * r**2) / np.trace(sigma), rtol=1e-9)
        assert 0.0 <= got <= 1.0


def test_qk_accuracy_is_the_2d_lda_of_the_spec(positional) -> None:
    head, _, comps, row, ref = positional
    sigma = np.where(comps["sign_flipped"], -1.0, 1.0)[:2]
    z = np.concatenate([ref["zq"][:, :2], ref["zk"][:, :2]]) * sigma
    lab = np.r_[np.ones(head.q.shape[0], bool), np.zeros(head.k.shape[0], bool)]
    # textbook LDA: class-frequency priors, pooled within-class covariance / N
    mq, mk = z[lab].mean(0), z[~lab].mean(0)
    zc = np.where(lab[:, None], z - mq, z - mk)
    s = zc.T @ zc / len(z)
    inv = np.linalg.inv(s)
    pi_q = lab.mean()
    dq = z @ inv @ mq - 0.5 * mq @ inv @ mq + np.log(pi_q)
    dk = z @ inv @ mk - 0.5 * mk @ inv @ mk + np.log(1 - pi_q)
    assert_allclose(row["qk_acc_pc01"], np.mean((dq > dk) == lab), rtol=0, atol=1e-12)
    assert_allclose(stats.lda_accuracy(z, lab), np.mean((dq > dk) == lab), rtol=0, atol=1e-12)
    assert row["qk_acc_pc01"] > 0.95  # planted separation 6 >> noise 1


def test_qk_accuracy_chance_when_q_and_k_share_a_distribution() -> None:
    head, _ = _head(seed=2, separation=0.0, mu_q_a=1.0, mu_k_a=1.0, alpha_q=1e-3, alpha_k=1e-3)
    _, row = _run(head)
    assert abs(row["qk_acc_pc01"] - 0.5) < 0.03


# ---------------------------------------------------------------------------------------------
# invariances
# ---------------------------------------------------------------------------------------------
def test_sign_flip_of_all_vectors_is_absorbed_by_canonicalisation(positional) -> None:
    head, _, comps, row, _ = positional
    f_comps, f_row = _run(dataclasses.replace(head, q=-head.q, k=-head.k))
    for name in ("explained_variance_ratio", "r_q", "r_k", "mean_q", "mean_k", "var_q", "var_k"):
        assert_allclose(f_comps[name], comps[name], rtol=1e-8, atol=1e-12, err_msg=name)
    assert_array_equal(f_comps["anchor"], comps["anchor"])
    # the sklearn orientation of the eigenvectors is unchanged, so the canonical flip toggles
    assert_array_equal(f_comps["sign_flipped"], ~comps["sign_flipped"])
    assert_allclose([f_row["r_q0"], f_row["r_k0"]], [row["r_q0"], row["r_k0"]], rtol=1e-8)


def test_row_permutation_invariance(positional) -> None:
    head, _, comps, row, _ = positional
    rng = np.random.default_rng(0)
    pq_, pk_ = rng.permutation(head.q.shape[0]), rng.permutation(head.k.shape[0])
    perm = dataclasses.replace(
        head, q=head.q[pq_], q_pos=head.q_pos[pq_], k=head.k[pk_], k_pos=head.k_pos[pk_]
    )
    p_comps, p_row = _run(perm)
    for name in ("explained_variance_ratio", "r_q", "r_k", "p_q", "mean_q", "var_k"):
        assert_allclose(p_comps[name], comps[name], rtol=1e-8, atol=1e-12, err_msg=name)
    for name in ("pos_var_q_exact", "qk_acc_pc01", "fisher_pc0"):
        assert_allclose(p_row[name], row[name], rtol=1e-9, err_msg=name)


# ---------------------------------------------------------------------------------------------
# planted PC0 correlations (the inputs of the taxonomy, which the dbt project derives)
# ---------------------------------------------------------------------------------------------
def test_planted_pc0_correlations() -> None:
    both, _ = _head(
        seed=3, alpha_q=3e-3, alpha_k=3e-3, separation=1.0, mu_q_a=1, mu_k_a=1, rope_planes=()
    )
    content, _ = _head(seed=4, drift_scale=0.0, separation=1.0, rope_planes=())
    q_only, _ = _head(
        seed=5, alpha_q=3e-3, alpha_k=0.0, separation=1.0, mu_q_a=1, mu_k_a=1, rope_planes=()
    )
    rows = [_run(h)[1] for h in (both, content, q_only)]
    (b, c, q) = [(r["r_q0"], abs(r["r_k0"])) for r in rows]
    assert b[0] > 0.7 and b[1] > 0.7  # position dominated: both drift with position
    assert c[0] < 0.3 and c[1] < 0.3  # content focused: neither does
    assert q[0] > 0.7 and q[1] < 0.3  # q positional: only the queries drift


# ---------------------------------------------------------------------------------------------
# degenerate and invalid input
# ---------------------------------------------------------------------------------------------
def test_constant_vectors_give_nan_not_an_exception() -> None:
    head, _ = _head(seed=6, n_q=50, n_k=50, d=8)
    const = dataclasses.replace(
        head, q=np.tile(head.q[:1], (50, 1)), k=np.tile(head.q[:1], (50, 1))
    )
    comps, row = _run(const)
    assert len(comps["pc"]) == 8
    assert np.all(np.isnan(comps["explained_variance_ratio"])) and np.all(np.isnan(comps["r_q"]))
    assert np.isnan(row["ev0"]) and np.isnan(row["r_q0"]) and "taxonomy" not in row


def test_equal_positions_use_the_zero_variance_rule() -> None:
    head, _ = _head(seed=7, n_q=300, n_k=300, d=8)
    comps, row = _run(dataclasses.replace(head, q_pos=np.full(300, 42), k_pos=np.full(300, 42)))
    assert_array_equal(comps["r_q"], 0.0)
    assert_array_equal(comps["r_k"], 0.0)
    assert np.all(np.isnan(comps["p_q"])) and np.all(np.isnan(comps["p_k"]))
    assert np.all(np.isfinite(comps["explained_variance_ratio"]))
    assert row["r_q0"] == 0.0 and row["r_k0"] == 0.0 and row["pos_var_q_exact"] == 0.0


def test_small_and_malformed_input_raise() -> None:
    head, _ = _head(seed=8, n_q=20, n_k=20, d=6)
    with pytest.raises(ValueError, match="too few rows"):
        pca.analyse(dataclasses.replace(head, k=head.k[:2], k_pos=head.k_pos[:2]))
    with pytest.raises(ValueError, match="different head dimensions"):
        pca.analyse(dataclasses.replace(head, q=head.q[:, :5]))
    with pytest.raises(ValueError, match="q_pos"):
        pca.analyse(dataclasses.replace(head, q_pos=head.q_pos[:5]))


def test_n_components_capped_by_d_and_params() -> None:
    head, _ = _head(seed=9, n_q=100, n_k=100, d=6, rope_planes=())
    comps, _row = _run(head)
    assert len(comps["pc"]) == 6
    assert_allclose(comps["explained_variance_ratio"].sum(), 1.0, rtol=1e-12)  # all of d kept
    comps3, _ = _run(head, PCAParams(n_components=3))
    assert_allclose(comps3["r_q"], comps["r_q"][:3], rtol=1e-12)


def test_output_contract_matches_schema_columns() -> None:
    from qkwh.analyses import registry

    def columns(table: str) -> set[str]:
        return set(registry.table(table).column_names)

    tables = pca.analyse(_head(seed=10, n_q=100, n_k=100, d=12)[0]).tables
    assert set(tables["pca_components"]) == columns("pca_components")
    assert set(tables["pca_heads"]) == columns("pca_heads")
    assert set(tables["pca_axes"]) == columns("pca_axes")


def test_pca_axes_reproduce_the_stored_scores() -> None:
    """pca_axes holds the canonical components and the pooled mean: (x - mean)·pc_i has the
    stored mean and variance of z^Q_i, z^K_i."""
    head = _head(seed=12, n_q=400, n_k=300, d=16)[0]
    t = pca.analyse(head).tables
    axes = dict(zip(t["pca_axes"]["axis"], t["pca_axes"]["vec"]))
    v = np.column_stack([axes[f"pc{i}"] for i in range(len(t["pca_components"]["pc"]))])
    zq = (head.q.astype(np.float64) - axes["mean"]) @ v
    zk = (head.k.astype(np.float64) - axes["mean"]) @ v
    np.testing.assert_allclose(zq.mean(0), t["pca_components"]["mean_q"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(zk.var(0, ddof=1), t["pca_components"]["var_k"], rtol=1e-9)
    np.testing.assert_allclose(v.T @ v, np.eye(v.shape[1]), atol=1e-12)


def test_real_sample_heads() -> None:
    """The embedded SmolLM2 sample (real data, d = 64): sane outputs on every head."""
    import json

    import pyarrow.parquet as pq

    root = Path(__file__).resolve().parents[2] / "warehouse" / "sample" / "smollm2-135m"
    meta = json.loads((root / "_saver_state.json").read_text())["model_metadata"]
    ratio = meta["head_sampling_num_query_heads"] // meta["head_sampling_num_key_heads"]

    def read(path: Path) -> tuple[np.ndarray, np.ndarray]:
        t = pq.read_table(path, columns=["position", "vector"])
        vec = t.column("vector").combine_chunks()
        return vec.values.to_numpy().reshape(-1, vec.type.list_size), t.column(
            "position"
        ).to_numpy()

    n = 0
    for qdir in sorted(root.glob("l??h??q")):
        layer, h = int(qdir.name[1:3]), int(qdir.name[4:6])
        q, t = read(qdir / "data.parquet")
        k, s = read(root / f"l{layer:02d}h{h // ratio:02d}k" / "data.parquet")
        z = np.zeros(len(t), dtype=np.int64)
        head = HeadData(
            q=q,
            q_pos=t,
            q_example=z,
            q_bucket=z,
            k=k,
            k_pos=s,
            k_example=np.zeros(len(s), np.int64),
            k_bucket=np.zeros(len(s), np.int64),
            context_length=8192,
            bucket_size=512,
        )
        comps, row = _run(head)
        assert len(comps["pc"]) == 10 and comps["explained_variance_ratio"].sum() < 1
        assert -1 <= row["r_q0"] <= 1 and -1 <= row["r_k0"] <= 1
        assert 0 <= row["pos_var_q_exact"] <= 1 and 0 <= row["pos_var_k_thesis"] <= 1
        assert np.all(comps["r_q"][np.abs(comps["r_q"]) >= 0.05] > 0)
        n += 1
    assert n == 12


# ---------------------------------------------------------------------------------------------
# stats helpers
# ---------------------------------------------------------------------------------------------
def test_pearson_zero_variance_rule_and_scipy_agreement() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(200), rng.standard_normal(200)
    y = y + 0.3 * x
    r = sst.pearsonr(x, y)
    assert_allclose(stats.pearson(x, y, if_constant=0.0), r.statistic, rtol=1e-12)
    assert_allclose(stats.pearson_pvalue(r.statistic, 200), r.pvalue, rtol=1e-9)
    assert stats.pearson(np.full(200, 3.7), y, if_constant=0.0) == 0.0
    assert (
        stats.pearson(x, np.full(200, 1e6 + 0.1), if_constant=0.0) == 0.0
    )  # constant up to rounding
    cols = stats.pearson_cols(np.column_stack([x, np.full(200, 2.0), -x]), y, if_constant=0.0)
    assert_allclose(cols, [r.statistic, 0.0, -r.statistic], rtol=1e-12)
    assert np.isnan(stats.pearson_pvalue(0.5, 2))
    assert stats.pearson_pvalue(1.0, 10) == 0.0


def test_ols_slope_and_orientation_helpers() -> None:
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 100, 500)
    y = 2.5 - 0.03 * x + rng.standard_normal(500)
    slope, icpt = stats.ols_slope(x, y)
    assert_allclose([slope, icpt], np.polyfit(x, y, 1), rtol=1e-10)
    assert all(np.isnan(stats.ols_slope(np.full(5, 3.0), np.arange(5.0))))
    v = np.array([[0.1, -0.9], [-0.8, 0.2], [0.3, 0.1]])
    out, signs = stats.orient_largest_positive(v)
    assert_array_equal(signs, [-1.0, -1.0])
    assert_allclose(out, -v)


def test_head_moments_shared_by_pca_and_rotation() -> None:
    head, _ = _head(seed=11, n_q=50, n_k=50, d=6)
    m1 = stats.head_moments(head)
    # passing precomputed moments gives exactly what each analysis computes on its own
    for analyse in (pca.analyse, rotation.analyse):
        own, shared = analyse(head).tables, analyse(head, moments=m1).tables
        for table, cols in own.items():
            for name, values in cols.items():
                if values.dtype.kind == "f":
                    assert_array_equal(values, shared[table][name])
    x = np.concatenate([head.q, head.k]).astype(np.float64)
    assert_allclose(m1.scatter, (x - x.mean(0)).T @ (x - x.mean(0)), rtol=1e-10)


def test_query_moments_per_bucket_sums_add_up_to_the_head() -> None:
    """Queries in stable bucket order; each bucket's scatter about its own mean; their sum plus the
    between-bucket term is the head's query scatter (float64 accumulation: rtol 1e-12)."""
    rng = np.random.default_rng(4)
    n, d = 400, 7
    q = (rng.standard_normal((n, d)) * 3.0 + 5.0).astype(np.float32)
    bucket = rng.integers(0, 6, n)
    bucket[bucket == 4] = 5  # a missing bucket id
    pos = rng.integers(0, 10_000, n)
    qm = stats.query_moments(q, pos, bucket)
    assert_array_equal(qm.order, np.argsort(bucket, kind="stable"))
    assert_array_equal(qm.file_rows(qm.order), np.arange(n))
    assert_array_equal(qm.t, pos[qm.order].astype(np.float64))
    x = q.astype(np.float64)
    assert_allclose(qm.mu, x.mean(0), rtol=1e-12)
    assert_allclose(qm.scatter, (x - x.mean(0)).T @ (x - x.mean(0)), rtol=1e-12)
    assert_array_equal(qm.buckets, [0, 1, 2, 3, 5])
    total = np.zeros((d, d))
    for i, b in enumerate(qm.buckets):
        xb = x[bucket == b]
        assert qm.count[i] == len(xb)
        assert_allclose(qm.bucket_mean[i] + qm.mu, xb.mean(0), rtol=1e-12)
        assert_allclose(
            qm.bucket_scatter[i], (xb - xb.mean(0)).T @ (xb - xb.mean(0)), rtol=1e-11, atol=1e-9
        )
        total += qm.bucket_scatter[i] + qm.count[i] * np.outer(qm.bucket_mean[i], qm.bucket_mean[i])
    assert_allclose(total, qm.scatter, rtol=1e-12)


def test_query_moments_with_many_buckets_skip_the_per_bucket_scatters(monkeypatch) -> None:
    from qkwh.analyses import moments

    rng = np.random.default_rng(5)
    q, pos = rng.standard_normal((60, 4)), np.arange(60)
    few = stats.query_moments(q, pos, np.arange(60) // 10)
    monkeypatch.setattr(moments, "MAX_QUERY_BUCKETS", 5)
    many = stats.query_moments(q, pos, np.arange(60) // 10)
    assert few.bucket_scatter is not None and many.bucket_scatter is None
    assert_allclose(many.scatter, few.scatter, rtol=1e-12)
    assert_allclose(many.bucket_mean, few.bucket_mean, rtol=0, atol=0)


def test_rotation_pairings_read_queries_in_file_order() -> None:
    """The moments hold queries in bucket order; row_order and same_example_nearest pair by
    file row: C_delta equals the direct computation on the file-order rows."""
    head, _ = _head(seed=12, n_q=120, n_k=120, d=6)
    rng = np.random.default_rng(0)
    head = dataclasses.replace(head, q_bucket=rng.permutation(np.asarray(head.q_bucket)))
    mom = stats.head_moments(head)
    assert not np.array_equal(mom.query.order, np.arange(120))
    q, k = np.asarray(head.q, dtype=np.float64), np.asarray(head.k, dtype=np.float64)
    delta = q - k
    assert_allclose(
        rotation.delta_second_moment(head, mom, "row_order"),
        delta.T @ delta / len(delta),
        rtol=1e-10,
    )
    qi, ki = rotation.nearest_pairs(head.q_example, head.q_pos, head.k_example, head.k_pos)
    delta = q[qi] - k[ki]
    assert_allclose(
        rotation.delta_second_moment(head, mom, "same_example_nearest"),
        delta.T @ delta / len(delta),
        rtol=1e-10,
    )
