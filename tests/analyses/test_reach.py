"""The softmax reach analysis (docs/metrics/reach.md) on synthetic heads.

References are naive: each query's softmax computed by a loop over its admissible keys.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from qkwh.analyses import reach
from qkwh.analyses.declared.reach import ReachParams
from qkwh.analyses.types import AttentionFacts, ExactAttention, HeadData

M, L, D = 32, 512, 16  # bucket size, context, head dim
ALL = AttentionFacts("all", M, 1.0, keep_first=4)


def make_head(
    rng: np.random.Generator,
    *,
    n_examples: int = 3,
    keep: float = 1.0,
    keep_first: int = 4,
    q_rows: int = 40,
    window: int | None = None,
    recency: float = 0.0,
    facts: AttentionFacts = ALL,
) -> HeadData:
    """Keys at every position of each example, kept with probability ``keep`` (1 below
    ``keep_first``); ``q_rows`` query rows per example at random positions.  ``recency`` plants
    a score that grows with the key position (so recent keys win)."""
    qs, qt, qe, ks, kt, ke = [], [], [], [], [], []
    for e in range(n_examples):
        pos = np.arange(L)
        kept = (rng.random(L) < keep) | (pos < keep_first)
        kv = rng.normal(size=(L, D))
        kv[:, 0] = recency * pos / L
        t = np.sort(rng.choice(L, q_rows, replace=False))
        qv = rng.normal(size=(q_rows, D))
        qv[:, 0] = 8.0 if recency else qv[:, 0]
        ks.append(kv[kept]), kt.append(pos[kept]), ke.append(np.full(kept.sum(), e))
        qs.append(qv), qt.append(t), qe.append(np.full(q_rows, e))
    q, k = np.concatenate(qs), np.concatenate(ks)
    t, s = np.concatenate(qt), np.concatenate(kt)
    return HeadData(
        q=q.astype(np.float32),
        q_pos=t,
        q_example=np.concatenate(qe),
        q_bucket=t // M,
        k=k.astype(np.float32),
        k_pos=s,
        k_example=np.concatenate(ke),
        k_bucket=s // M,
        context_length=L,
        bucket_size=M,
        sliding_window=window,
        attention=facts,
    )


def naive(head: HeadData, *, tau: float, cap: float | None = None) -> dict[str, np.ndarray]:
    """Per query row: the softmax over the head's admissible keys with weights 1/pi."""
    facts = head.attention
    assert facts is not None
    pi = reach.keep_probability(head.k_pos, facts)
    n_bins = L // M
    out = {k: np.full(len(head.q_pos), np.nan) for k in ("distance", "entropy", "sink", "log_z")}
    out["bins"] = np.full((len(head.q_pos), n_bins), np.nan)
    q, k = head.q.astype(np.float64), head.k.astype(np.float64)
    for i, (t, e) in enumerate(zip(head.q_pos, head.q_example)):
        j = np.flatnonzero(
            (head.k_example == e)
            & (head.k_pos <= t)
            & ((head.sliding_window is None) | (t - head.k_pos < (head.sliding_window or 0)))
        )
        if j.size == 0 or t == 0:
            continue
        sc = tau * (k[j] @ q[i])
        if cap is not None:
            sc = cap * np.tanh(sc / cap)
        w = np.exp(sc) / pi[j]
        p = w / w.sum()
        dist = t - head.k_pos[j]
        out["distance"][i] = (p * dist).sum()
        out["entropy"][i] = -(p * np.log(p)).sum()
        out["sink"][i] = p[head.k_pos[j] < 4].sum()
        out["log_z"][i] = math.log(w.sum())
        out["bins"][i] = np.bincount(dist // M, weights=p, minlength=n_bins)
    return out


def with_exact(head: HeadData, ref: dict[str, np.ndarray]) -> HeadData:
    return dataclasses.replace(
        head, exact=ExactAttention(ref["bins"], ref["distance"], ref["entropy"], ref["sink"])
    )


def run(head: HeadData, **kw) -> tuple[dict, dict]:
    res = reach.run(head, ReachParams(**kw))
    return res.tables[reach.BUCKETS], {k: v[0] for k, v in res.tables[reach.HEADS].items()}


def test_every_key_kept_equals_exact():
    """With every key kept (pi = 1) the estimate is the exact softmax: equal to the exact
    columns computed independently, row by row and in the head's averages."""
    rng = np.random.default_rng(0)
    head = make_head(rng)
    tau = 1 / math.sqrt(D)
    ref = naive(head, tau=tau)
    head = with_exact(head, ref)
    est = reach.query_estimates(head, head.attention)
    assert_allclose(est.distance, ref["distance"][est.index], rtol=1e-12)
    assert_allclose(est.mass, ref["bins"][est.index], atol=1e-12)
    assert_allclose(est.log_z, ref["log_z"][est.index], rtol=1e-12)
    buckets, heads = run(head)
    assert_allclose(heads["reach"], heads["reach_exact"], rtol=1e-12)
    assert_allclose(heads["sink_mass"], heads["sink_mass_exact"], rtol=1e-12)
    assert_allclose(buckets["mass"], buckets["mass_exact"], atol=1e-12)
    assert heads["scaling_source"] == "default"
    ent = np.nanmean(ref["entropy"][est.index])
    assert_allclose(heads["entropy_exact"], ent, rtol=1e-12)


def test_bucket_rows_and_uniform_shares():
    """Rows r = 0..q_bucket per bucket; mass and uniform mass each sum to 1 over r; uniform
    mass from positions alone (a query at t spreads 1/(t+1) per position)."""
    rng = np.random.default_rng(1)
    head = make_head(rng)
    b, _ = run(head)
    for qb in np.unique(b["q_bucket"]):
        sel = b["q_bucket"] == qb
        assert_array_equal(b["distance_bin"][sel], np.arange(qb + 1))
        assert_allclose(b["mass"][sel].sum(), 1.0, rtol=1e-12)
        assert_allclose(b["uniform_mass"][sel].sum(), 1.0, rtol=1e-12)
    shares = reach.uniform_bin_shares(np.array([40, 31]), 3, M)
    assert_allclose(shares[0], [32 / 41, 9 / 41, 0.0])
    assert_allclose(shares[1], [1.0, 0.0, 0.0])


def test_z_unbiased_over_subsamples():
    """Z-hat (Horvitz-Thompson over uniformly kept keys, keep_first kept) is unbiased: the mean
    of Z-hat / Z over 2000 independent subsamples of one planted head is 1 within 4 standard
    errors (and within 2 % here)."""
    rng = np.random.default_rng(2)
    full = make_head(rng, n_examples=1, q_rows=1)
    full = dataclasses.replace(full, q_pos=np.array([L - 1]), q_bucket=np.array([(L - 1) // M]))
    tau = 1 / math.sqrt(D)
    z_exact = math.exp(naive(full, tau=tau)["log_z"][0])
    rate = 4.0
    facts = AttentionFacts("uniform", M, rate, keep_first=4)
    pi = reach.keep_probability(full.k_pos, facts)
    assert_allclose(pi[4:], rate / M)
    ratios = []
    for _ in range(2000):
        keep = rng.random(full.k_pos.size) < pi
        sub = dataclasses.replace(
            full,
            k=full.k[keep],
            k_pos=full.k_pos[keep],
            k_example=full.k_example[keep],
            k_bucket=full.k_bucket[keep],
            attention=facts,
        )
        est = reach.query_estimates(sub, facts)
        ratios.append(math.exp(est.log_z[0]) / z_exact)
    r = np.asarray(ratios)
    se = r.std(ddof=1) / math.sqrt(r.size)
    assert abs(r.mean() - 1.0) < 4 * se
    assert abs(r.mean() - 1.0) < 0.02


def test_log_uniform_keep_probability():
    facts = AttentionFacts("log_uniform", 4, 2.0, keep_first=0)
    # P = 2; bucket = max(2, floor(log2(s+1)))
    s = np.array([0, 6, 7, 14, 15, 100])
    assert_allclose(reach.keep_probability(s, facts), [0.5, 0.5, 0.25, 0.25, 0.125, 2 / 64])
    assert_allclose(
        reach.keep_probability(np.array([0, 5]), AttentionFacts("uniform", 8, 16.0)), [1.0, 1.0]
    )


def test_window_softcap_and_scaling_honoured():
    """A sliding window, a recorded scaling and a soft-cap enter the softmax as the naive
    reference has them; the uniform baseline follows the window (min(t, W - 1) / 2)."""
    rng = np.random.default_rng(3)
    facts = AttentionFacts("uniform", M, 8.0, keep_first=4, scaling=0.7, softcap=2.0)
    head = make_head(rng, keep=8.0 / M, window=100, facts=facts)
    ref = naive(head, tau=0.7, cap=2.0)
    est = reach.query_estimates(head, facts)
    assert_allclose(est.distance, ref["distance"][est.index], rtol=1e-10)
    assert_allclose(est.mass, ref["bins"][est.index], atol=1e-12)
    t = head.q_pos[est.index]
    assert_allclose(est.reach, est.distance / (np.minimum(t, 99) / 2.0), rtol=1e-12)
    assert (est.distance < 100).all()
    _, heads = run(head)
    assert heads["scaling_source"] == "capture"
    # each of the three changes the answer
    for other in (
        dataclasses.replace(facts, scaling=None),
        dataclasses.replace(facts, softcap=None),
    ):
        alt = reach.query_estimates(head, other)
        assert not np.allclose(alt.distance, est.distance)
    nowin = reach.query_estimates(dataclasses.replace(head, sliding_window=None), facts)
    assert nowin.distance.max() > 100


def test_skip_rules_and_counts():
    """Queries at position 0 and queries without a kept admissible key are skipped and counted;
    every other query is used."""
    rng = np.random.default_rng(4)
    head = make_head(rng, n_examples=2, keep_first=0, facts=AttentionFacts("all", M, 1.0))
    # example 1 keeps only its keys from position 300 on; plant queries at 0 and at 10
    drop = (head.k_example == 1) & (head.k_pos < 300)
    qpos = head.q_pos.copy()
    qpos[0] = 0  # example 0, position 0
    qpos[head.q_example == 1] = np.r_[
        10, 20, np.sort(rng.choice(np.arange(300, L), (head.q_example == 1).sum() - 2, False))
    ]
    head = dataclasses.replace(
        head,
        q_pos=qpos,
        q_bucket=qpos // M,
        k=head.k[~drop],
        k_pos=head.k_pos[~drop],
        k_example=head.k_example[~drop],
        k_bucket=head.k_bucket[~drop],
    )
    _, heads = run(head)
    assert heads["n_queries_skipped"] == 3
    assert heads["n_queries_used"] == len(qpos) - 3
    assert np.isnan(heads["sink_mass"])  # keep_first = 0: the sink is not estimable
    assert np.isnan(heads["reach_exact"])  # no exact columns


def test_edges_far_mass_and_drop():
    """reach_first/last average the queries below 0.2 L and at or above 0.8 L; far_mass the
    queries at or past L/2 (their mass at distance >= L/2); reach_drop = first - last."""
    rng = np.random.default_rng(5)
    head = make_head(rng, q_rows=120)
    est = reach.query_estimates(head, head.attention)
    t = head.q_pos[est.index]
    _, heads = run(head)
    assert_allclose(heads["reach_first_20pct"], est.reach[t < 0.2 * L].mean(), rtol=1e-12)
    assert_allclose(heads["reach_last_20pct"], est.reach[t >= 0.8 * L].mean(), rtol=1e-12)
    assert_allclose(
        heads["reach_drop"], heads["reach_first_20pct"] - heads["reach_last_20pct"], rtol=1e-12
    )
    late = t >= L / 2
    far_ref = est.mass[late][:, (L // 2) // M :].sum(axis=1).mean()
    assert_allclose(heads["far_mass"], far_ref, rtol=1e-10)
    assert_allclose(heads["local_mass"], est.mass[:, 0].mean(), rtol=1e-12)
    _, edged = run(head, edge_fraction=0.5)
    assert_allclose(edged["reach_first_20pct"], est.reach[t < 0.5 * L].mean(), rtol=1e-12)


def test_recency_bias_lowers_reach():
    """A head whose scores grow with the key position (recent keys win) reaches less far than
    the same head without the planted bias, and puts more mass in bin 0."""
    facts = AttentionFacts("uniform", M, 8.0, keep_first=4)
    biased = make_head(np.random.default_rng(6), keep=8 / M, recency=10.0, facts=facts)
    plain = make_head(np.random.default_rng(6), keep=8 / M, recency=0.0, facts=facts)
    _, hb = run(biased)
    _, hp = run(plain)
    assert hb["reach"] < 0.5 * hp["reach"]
    assert hb["local_mass"] > hp["local_mass"]
    assert 0.5 < hp["reach"] < 1.5  # random scores: about as far as uniform attention


def test_missing_sampler_facts_refused():
    head = dataclasses.replace(make_head(np.random.default_rng(7)), attention=None)
    with pytest.raises(ValueError, match="sampler facts"):
        reach.run(head, ReachParams())


def test_sample_through_compute_and_the_sql_function(sample_copy, tmp_path):
    """The embedded sample (sampler facts recorded: uniform, m = 512, base rate 15): every head
    computed, each query used or skipped, bucket masses summing to 1, and the SQL function
    giving the stored rows."""
    import duckdb

    from qkwh import udf
    from qkwh.compute.runner import compute
    from qkwh.ingest import ingest

    db = tmp_path / "wh.duckdb"
    ingest(str(sample_copy), warehouse=db)
    report = compute(db, workers=1, analyses=("reach",))
    assert report.failures == [] and report.n_written == 12 and report.left_out == []
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(
            "SELECT h.n_queries_used + h.n_queries_skipped, f.rows, h.scaling_source "
            "FROM reach_heads h JOIN files f ON f.model_id = h.model_id AND f.layer = h.layer "
            "AND f.head = h.q_head AND f.kind = 'q'"
        ).fetchall()
        assert len(rows) == 12 and all(a == b and s == "default" for a, b, s in rows)
        sums = con.execute(
            "SELECT sum(mass) FROM reach_buckets GROUP BY layer, q_head, q_bucket"
        ).fetchall()
        assert_allclose(np.array(sums), 1.0, rtol=1e-9)
        udf.register(con)
        got = con.execute(
            "SELECT layer, q_head, r.reach, r.local_mass FROM (SELECT h.layer, h.q_head, "
            "qkwh_reach(h) AS r FROM head_inputs('smollm2-135m') AS h) ORDER BY 1, 2"
        ).fetchall()
        want = con.execute(
            "SELECT layer, q_head, reach, local_mass FROM reach_heads ORDER BY 1, 2"
        ).fetchall()
        assert got == want
    finally:
        con.close()


def test_model_without_sampler_facts_is_left_out_with_a_finding(tmp_path):
    """A dataset whose metadata has no base rate: an ingest finding, one compute warning, no
    reach rows (the other analyses run), and the SQL function returns nothing for it."""
    import duckdb
    from typer.testing import CliRunner

    from qkwh import synth, udf
    from qkwh.cli import app
    from qkwh.ingest import ingest

    data = tmp_path / "synth"
    synth.write_dataset(
        data, n_layers=1, n_q_heads=2, n_kv_heads=1, d=16, rows_per_file=200, n_examples=4
    )
    state = json.loads((data / "_saver_state.json").read_text())
    del state["model_metadata"]["sampling_base_rate"]  # as in a capture that did not record it
    (data / "_saver_state.json").write_text(json.dumps(state))
    db = tmp_path / "wh.duckdb"
    rep = ingest(str(data), warehouse=db, model_id="nofacts")
    found = [f for f in rep.findings if f.check == "reach_sampler"]
    assert len(found) == 1 and "sampling_base_rate" in found[0].detail
    r = CliRunner().invoke(
        app, ["compute", "-w", str(db), "--analyses", "pca,reach", "--workers", "1"]
    )
    assert r.exit_code == 0, r.output
    lines = [x for x in r.output.splitlines() if "sampler facts are unknown" in x]
    assert len(lines) == 1 and "'nofacts'" in lines[0]
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM pca_heads").fetchone() == (2,)
        assert con.execute("SELECT count(*) FROM reach_heads").fetchone() == (0,)
        udf.register(con)
        assert con.execute(
            "SELECT DISTINCT len(r.buckets), r.reach IS NULL "
            "FROM (SELECT qkwh_reach(h) AS r FROM head_inputs('nofacts') AS h)"
        ).fetchall() == [(0, True)]
    finally:
        con.close()


def test_reach_is_default_and_models_without_facts_share_one_warning_line(tmp_path):
    """reach is in the default set; a plain compute of two models without sampler facts and one
    with them warns in exactly one line naming both, computes reach for the third only, and the
    other default analyses for all three."""
    import duckdb
    from typer.testing import CliRunner

    from qkwh import synth
    from qkwh.analyses import registry
    from qkwh.cli import app
    from qkwh.ingest import ingest

    assert "reach" in registry.default_names()
    db = tmp_path / "wh.duckdb"
    for model_id, drop in (("nofacts-a", True), ("nofacts-b", True), ("facts", False)):
        data = tmp_path / model_id
        synth.write_dataset(
            data, n_layers=1, n_q_heads=2, n_kv_heads=1, d=16, rows_per_file=200, n_examples=4
        )
        if drop:
            state = json.loads((data / "_saver_state.json").read_text())
            del state["model_metadata"]["sampling_base_rate"]
            (data / "_saver_state.json").write_text(json.dumps(state))
        ingest(str(data), warehouse=db, model_id=model_id)
    r = CliRunner().invoke(app, ["compute", "-w", str(db), "--workers", "1"])
    assert r.exit_code == 0, r.output
    lines = [x for x in r.output.splitlines() if "sampler facts" in x]
    assert len(lines) == 1 and "'nofacts-a'" in lines[0] and "'nofacts-b'" in lines[0]
    assert "'facts'" not in lines[0]
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT DISTINCT model_id FROM reach_heads ORDER BY 1").fetchall() == [
            ("facts",)
        ]
        assert con.execute("SELECT count(*) FROM plasticity_heads").fetchone() == (6,)
    finally:
        con.close()


def test_ratio_estimator_bias_is_bounded_and_shrinks_like_one_over_n():
    """Subsamples of a planted head captured with every key kept (exact columns from the naive
    softmax): at a base rate of 8 per bucket of 32 (keep_first 4) the mean error of reach over
    200 draws is below 0.03 and that of every distance bin's mass below 0.01 (the bounds
    docs/metrics/reach.md states for synthetic heads); halving the rate roughly doubles the
    reach bias (O(1/n) of a ratio estimator), and the sink is estimable with keep_first."""
    rng = np.random.default_rng(10)
    head = make_head(rng, n_examples=2, q_rows=L, recency=3.0)  # every position is a query
    head = with_exact(head, naive(head, tau=1 / math.sqrt(D)))
    err = {
        rate: reach.estimate_errors(
            head,
            AttentionFacts("uniform", M, rate, keep_first=4),
            draws=200,
            rng=np.random.default_rng(1),
        )
        for rate in (4.0, 8.0)
    }
    bias8 = {k: float(np.nanmean(v)) for k, v in err[8.0].items() if k != "bins"}
    assert abs(bias8["reach"]) < 0.03
    assert abs(bias8["local_mass"]) < 0.02 and abs(bias8["sink_mass"]) < 0.02
    assert np.nanmax(np.abs(np.nanmean(err[8.0]["bins"], axis=0))) < 0.01
    ratio = np.nanmean(err[4.0]["reach"]) / np.nanmean(err[8.0]["reach"])
    assert 1.4 < ratio < 3.0
    # the bias is real (not zero within noise): a ratio estimator, as documented
    se = np.nanstd(err[8.0]["reach"], ddof=1) / math.sqrt(200)
    assert bias8["reach"] > 3 * se
