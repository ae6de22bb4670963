"""The document-group jackknife (analysis ``uncertainty``, qkwh/analyses/jackknife.py) on
synthetic heads: leave-group-out values are the analyses' own values on the head without the
group, empty and too-small groups give NULL values, the SE formula has its closed form, and the
document SE follows the planted per-document spread."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qkwh import synth
from qkwh.analyses import jackknife, registry
from qkwh.analyses.declared.plasticity import PlasticityParams
from qkwh.analyses.declared.rotation import RotationParams
from qkwh.analyses.declared.uncertainty import UncertaintyParams
from qkwh.analyses.types import HeadData
from qkwh.bootstrap import jackknife_se
from qkwh.compute.work import run_analyses
from qkwh.params import RunConfig

G = 4
EXHAUSTIVE = {"plasticity": PlasticityParams(pairs="exhaustive", num_pairs_per_bucket=64)}


def _config(groups: int = G) -> RunConfig:
    params = dict(RunConfig().params)
    params.update(EXHAUSTIVE)
    params["uncertainty"] = UncertaintyParams(document_groups=groups)
    return RunConfig(params=tuple(params.items()))


def _head(seed: int = 0, **kw) -> HeadData:
    args = dict(n_q=500, n_k=500, d=12, n_examples=10, context_length=1024, bucket_size=256)
    args.update(kw)
    head, _ = synth.make_head(np.random.default_rng(seed), **args)
    return head


def _drop(head: HeadData, group: int, groups: int) -> HeadData:
    """The head rebuilt from scratch without the rows of the group's examples (the test's own
    filter, not the analysis's)."""
    q = [e % groups != group for e in head.q_example.tolist()]
    k = [e % groups != group for e in head.k_example.tolist()]
    return HeadData(
        q=np.array(head.q[q]),
        q_pos=np.array(head.q_pos[q]),
        q_example=np.array(head.q_example[q]),
        q_bucket=np.array(head.q_bucket[q]),
        k=np.array(head.k[k]),
        k_pos=np.array(head.k_pos[k]),
        k_example=np.array(head.k_example[k]),
        k_bucket=np.array(head.k_bucket[k]),
        context_length=head.context_length,
        bucket_size=head.bucket_size,
        layer=head.layer,
        q_head=head.q_head,
    )


def _tables(head: HeadData, config: RunConfig) -> dict[str, dict[str, np.ndarray]]:
    return run_analyses(head, ["uncertainty"], config)["uncertainty"].tables


def _floats(values) -> np.ndarray:
    return np.array([np.nan if v is None else float(v) for v in values])


def test_leave_group_out_is_a_fresh_run_without_the_group_to_the_last_bit():
    head = _head()
    cfg = _config()
    out = _tables(head, cfg)
    buckets, metrics = out["plasticity_buckets_jackknife"], out["head_jackknife"]
    for g in range(G):
        fresh = run_analyses(_drop(head, g, G), ["pca", "rotation", "plasticity"], cfg)
        # plasticity per bucket
        mine = buckets["doc_group"] == g
        ref = fresh["plasticity"].tables["plasticity_buckets"]
        assert buckets["q_bucket"][mine].tolist() == ref["q_bucket"].tolist()
        for c in jackknife.BUCKET_COLUMNS:
            got = _floats(buckets[c][mine])
            want = np.asarray(ref[c], np.float64)
            assert np.array_equal(got, want, equal_nan=True), (g, c, got, want)
        assert np.isfinite(_floats(buckets["ap_bucket"][mine])).any()
        # the head-level scalars of PCA, rotation and plasticity
        mine = metrics["doc_group"] == g
        got = dict(zip(metrics["metric"][mine].tolist(), _floats(metrics["value"][mine])))
        for name in ("pca", "rotation", "plasticity"):
            a = registry.get(name)
            row = fresh[name].tables[a.head_table.name]
            for metric in jackknife.metric_columns(a):
                want = float(row[metric][0])
                assert got[metric] == want or (math.isnan(got[metric]) and math.isnan(want)), (
                    g,
                    metric,
                )


def test_the_metrics_are_the_head_metrics_columns_of_the_declarations():
    out = _tables(_head(), _config())["head_jackknife"]
    per_group = out["metric"][out["doc_group"] == 0].tolist()
    declared = [
        c.name
        for name in ("pca", "rotation", "plasticity")
        for c in registry.get(name).head_table.columns
        if c.head_metric and c.type in ("DOUBLE", "INTEGER")
    ]
    assert per_group == declared
    assert {"ev0", "r_k_a", "bias_strength", "n_active_pairs", "q_R2_pos"} <= set(per_group)
    assert "pairs" not in per_group and "degenerate" not in per_group  # not numbers
    assert sorted(set(out["doc_group"].tolist())) == list(range(G))


def test_a_group_without_rows_is_one_null_row_per_table():
    head = _head(n_examples=6)  # examples 0..5; with 8 groups, groups 6 and 7 have no rows
    out = _tables(head, _config(groups=8))
    buckets, metrics = out["plasticity_buckets_jackknife"], out["head_jackknife"]
    for g in (6, 7):
        rows = buckets["doc_group"] == g
        assert rows.sum() == 1 and buckets["q_bucket"][rows].tolist() == [-1]
        assert all(buckets[c][rows][0] is None for c in jackknife.BUCKET_COLUMNS)
        rows = metrics["doc_group"] == g
        assert metrics["metric"][rows].tolist() == ["no_rows"]
        assert metrics["value"][rows].tolist() == [None]
    assert (buckets["doc_group"] == 5).sum() == 4  # the other groups: one row per bucket


def test_a_group_whose_removal_leaves_too_little_is_null_not_a_failed_head():
    head = _head(n_examples=2, n_q=200, n_k=200)
    keep_q, keep_k = head.q_example == 0, head.k_example == 0
    # example 0 and two queries and two keys of example 1: without group 0, 2 rows are left
    keep_q[np.flatnonzero(head.q_example == 1)[:2]] = True
    keep_k[np.flatnonzero(head.k_example == 1)[:2]] = True
    head = head.select(keep_q, keep_k)
    out = _tables(head, _config(groups=2))
    metrics = out["head_jackknife"]
    g0 = metrics["doc_group"] == 0
    pca = set(jackknife.metric_columns(registry.get("pca")))
    values = dict(zip(metrics["metric"][g0].tolist(), metrics["value"][g0].tolist()))
    assert pca <= set(values) and all(values[m] is None for m in pca)
    g1 = metrics["doc_group"] == 1  # without group 1 the head is almost whole
    assert all(v is not None for v in metrics["value"][g1])


def test_document_groups_below_two_are_refused():
    with pytest.raises(ValueError, match="document_groups"):
        jackknife.analyse(_head(), UncertaintyParams(document_groups=1), seed=0, uses={})


# ---------------------------------------------------------------------------------------------
# the SE formula
# ---------------------------------------------------------------------------------------------


def test_jackknife_se_of_a_mean_is_the_se_of_the_group_means():
    """For the mean of G equal groups of m values, θ_(g) = (G x̄ - x̄_g) / (G - 1), so
    θ_(g) - θ̄ = -(x̄_g - x̄) / (G - 1) and SE_jack = sd(x̄_g, ddof=1) / sqrt(G)."""
    rng = np.random.default_rng(3)
    for groups, m in ((2, 5), (10, 7), (25, 3)):
        x = rng.normal(2.0, 1.5, size=(groups, m))
        leave_out = np.array([np.delete(x, g, axis=0).mean() for g in range(groups)])
        closed = x.mean(axis=1).std(ddof=1) / math.sqrt(groups)
        assert jackknife_se(leave_out) == pytest.approx(closed, rel=1e-12)


def test_jackknife_se_leaves_out_groups_without_a_value():
    assert jackknife_se(np.array([1.0, np.nan, 3.0])) == pytest.approx(math.sqrt(0.5 * 2.0))
    assert math.isnan(jackknife_se(np.array([1.0, np.nan])))
    assert jackknife_se(np.array([2.0, 2.0, 2.0])) == 0.0


# ---------------------------------------------------------------------------------------------
# planted document spread
# ---------------------------------------------------------------------------------------------


def _model_se(spread: float, metric: str, *, heads: int = 4, groups: int = 10) -> float:
    """SE_doc of the mean over ``heads`` heads of ``metric`` (a rotation scalar): the heads share
    the documents (one doc_seed), as the heads of one model do."""
    per_group = np.zeros(groups)
    for h in range(heads):
        head, _ = synth.make_head(
            np.random.default_rng(100 + h),
            n_q=800,
            n_k=800,
            d=12,
            n_examples=20,
            context_length=1024,
            bucket_size=256,
            rope_planes=(),
            drift_scale=10.0,  # a clear drift axis, so that mu_q_a is estimated well
            doc_spread=spread,
            doc_seed=7,
            q_head=h,
        )
        out = jackknife.analyse(
            head,
            UncertaintyParams(document_groups=groups),
            seed=0,
            uses={"rotation": RotationParams()},
        ).tables["head_jackknife"]
        rows = out["metric"] == metric
        per_group += _floats(out["value"][rows]) / heads
    return jackknife_se(per_group)


def test_se_documents_grows_with_the_planted_spread_and_is_small_without_it():
    se = [_model_se(s, "mu_q_a") for s in (0.0, 0.2, 0.5)]
    assert se[0] < se[1] < se[2]
    # mu_q_a ~ 4.7 here. With identical documents only the row noise of 800 rows per head (and
    # its effect on the fitted axis a) is left: SE ~ 0.05, tolerance 0.1 (about 2 % of the
    # value). With doc_spread 0.5 the model mean moves with the retained documents' factors,
    # SE ~ 4 sd(exp(0.5 z)) / sqrt(20) ~ 0.5 (0.85 for this draw).
    assert se[0] < 0.1
    assert se[2] > 10 * se[0]


def test_sampled_pairs_and_the_empirical_estimator_are_mirrored_too():
    """With sampled pairs the left-out head draws its pairs as a fresh run would (same seed, same
    layer and head), so the values match a fresh run too; ap_bucket_empirical is filled when
    plasticity.empirical is on."""
    head = _head(seed=1)
    params = dict(_config().params)
    params["plasticity"] = PlasticityParams(num_pairs_per_bucket=128, empirical=True)
    cfg = RunConfig(params=tuple(params.items()))
    buckets = _tables(head, cfg)["plasticity_buckets_jackknife"]
    g = 2
    ref = run_analyses(_drop(head, g, G), ["plasticity"], cfg)["plasticity"]
    ref_b = ref.tables["plasticity_buckets"]
    mine = buckets["doc_group"] == g
    for c in ("ap_bucket", "ap_bucket_empirical", "n_pairs"):
        got, want = _floats(buckets[c][mine]), np.asarray(ref_b[c], np.float64)
        assert np.array_equal(got, want, equal_nan=True), c
    assert np.isfinite(_floats(buckets["ap_bucket_empirical"][mine])).any()
