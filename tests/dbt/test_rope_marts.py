"""The RoPE band marts (rope_band_energy, rope_energy_spectrum, rope_band_plasticity_model,
rope_band_logits_model) and the rope_* metrics of model_metric_ci / model_comparisons, built by
the real dbt project on planted rope rows (rope_data): a band that behaves like every dim
reproduces the full head's values and intervals bit for bit, energy shares sum to 1, logits pool
exactly, and a warehouse without rope rows keeps every other interval row as it was.
"""

from __future__ import annotations

import math
from pathlib import Path

import interval_data
import numpy as np
import pytest
import rope_data

from qkwh import store
from qkwh.build import build
from tests.dbt.conftest import Built

pytestmark = pytest.mark.slow  # the tests share dbt builds of their own (make test-fast skips them)

PROFILE = (
    ["ap_overall"]
    + [f"decile_{k}" for k in range(10)]
    + [f"quintile_{k}" for k in range(5)]
    + ["ap_first_20pct", "ap_last_20pct", "ap_drop"]
)


def _build(root: Path, with_rope: bool) -> Built:
    wh = root / "qkwh.duckdb"
    con = store.connect(wh)
    try:
        truth = rope_data.fill(con, with_rope=with_rope)
    finally:
        con.close()
    res = build(
        wh, target_dir=root / "target", log_sink=lambda _m: None, dbt_vars=interval_data.CI_VARS
    )
    return Built(wh, res, truth)  # notes: the planted rows (rope_data.fill)


@pytest.fixture(scope="module")
def rope_build(tmp_path_factory) -> Built:
    return _build(tmp_path_factory.mktemp("rope_marts"), with_rope=True)


@pytest.fixture(scope="module")
def plain_build(tmp_path_factory) -> Built:
    """The same models without any rope row."""
    return _build(tmp_path_factory.mktemp("rope_marts_plain"), with_rope=False)


def test_energy_shares_of_a_model_sum_to_one_and_average_the_heads(rope_build):
    assert rope_build.result.success
    rows = rope_build.dicts("SELECT * FROM rope_band_energy")
    planted: dict[tuple, dict[str, float]] = {}
    heads: dict[str, set] = {}
    for p in rope_build.notes["planes"]:
        heads.setdefault(p["model_id"], set()).add((p["layer"], p["q_head"]))
        s = planted.setdefault((p["model_id"], p["band"]), {})
        s[(p["layer"], p["q_head"])] = s.get((p["layer"], p["q_head"]), 0.0) + p["q_energy_share"]
    assert {(r["model_id"], r["band"]) for r in rows} == set(planted)
    for mid in heads:
        mine = [r for r in rows if r["model_id"] == mid]
        assert sum(r["q_energy_share"] for r in mine) == pytest.approx(1.0, abs=1e-12)
        assert sum(r["k_energy_share"] for r in mine) == pytest.approx(1.0, abs=1e-12)
        for r in mine:
            by_head = planted[(mid, r["band"])]
            # heads without the band (the NoPE layer's) count 0
            assert r["q_energy_share"] == pytest.approx(
                sum(by_head.values()) / len(heads[mid]), rel=1e-12
            )
            assert r["n_heads"] == len(by_head) and r["n_heads_model"] == len(heads[mid])
    nope = {r["band"]: r for r in rows if r["model_id"] == rope_data.NOPE_MODEL}
    assert nope["unrotated"]["n_planes"] == 8 and nope["unrotated"]["wavelength_max"] is None
    assert nope["high"]["n_planes"] == 2
    assert nope["high"]["wavelength_min"] == pytest.approx(2 * math.pi / rope_data.INV_FREQ[0])
    assert nope["high"]["wavelength_max"] == pytest.approx(2 * math.pi / rope_data.INV_FREQ[1])


def test_energy_share_intervals_are_the_layer_bootstrap_of_the_head_shares(rope_build):
    """The band energy shares get the layer-cluster bootstrap every mean-over-heads metric gets:
    recomputed here from the planted planes and the build's own layer draws, the percentile
    interval matches model_metric_ci, and rope_band_energy carries the same bounds."""
    level = interval_data.CI_VARS.get("ci_level", 0.95)
    energy = rope_build.dicts("SELECT * FROM rope_band_energy")
    ci = {
        (r["model_id"], r["metric"]): r
        for r in rope_build.dicts("SELECT * FROM model_metric_ci WHERE metric LIKE 'rope_%energy%'")
    }
    heads: dict[str, set] = {}
    share: dict[tuple, float] = {}  # (model, band, side, layer, q_head) -> planted share
    for p in rope_build.notes["planes"]:
        heads.setdefault(p["model_id"], set()).add((p["layer"], p["q_head"]))
        for side in ("q", "k"):
            key = (p["model_id"], p["band"], side, p["layer"], p["q_head"])
            share[key] = share.get(key, 0.0) + p[f"{side}_energy_share"]
    assert len(ci) == 2 * len(energy)
    for r in energy:
        mid, band = r["model_id"], r["band"]
        layers = sorted({layer for layer, _ in heads[mid]})
        clusters = {
            c["layer"]: c["cluster_index"]
            for c in rope_build.dicts(
                "SELECT layer, cluster_index FROM intermediate.int_bootstrap_clusters "
                "WHERE model_id = ?",
                [mid],
            )
        }
        order = sorted(layers, key=clusters.__getitem__)
        draws = rope_build.dicts(
            "SELECT replicate, multiplicity FROM intermediate.int_bootstrap_draws "
            "WHERE model_id = ? AND replicate > 0 ORDER BY replicate",
            [mid],
        )
        for side in ("q", "k"):
            row = ci[(mid, f"rope_{side}_energy_share_{band}")]
            # a head without a plane in the band counts 0
            per_layer = [
                [
                    share.get((mid, band, side, layer, h), 0.0)
                    for lh, h in sorted(heads[mid])
                    if lh == layer
                ]
                for layer in order
            ]
            sums = np.array([sum(v) for v in per_layer])
            ns = np.array([len(v) for v in per_layer], dtype=float)
            assert row["estimate"] == pytest.approx(sums.sum() / ns.sum(), rel=1e-12)
            assert r[f"{side}_energy_share"] == pytest.approx(row["estimate"], rel=1e-12)
            reps = [np.dot(d["multiplicity"], sums) / np.dot(d["multiplicity"], ns) for d in draws]
            lo, hi = np.quantile(reps, [0.5 - level / 2, 0.5 + level / 2])
            assert row["ci_low"] == pytest.approx(lo, rel=1e-9, abs=1e-12)
            assert row["ci_high"] == pytest.approx(hi, rel=1e-9, abs=1e-12)
            assert row["n_layers"] == len(layers) and row["metric_group"] == "rope"
            assert (r[f"{side}_energy_share_ci_low"], r[f"{side}_energy_share_ci_high"]) == (
                row["ci_low"],
                row["ci_high"],
            )
    # shares that differ between layers give intervals of positive width
    assert any(r["ci_high"] > r["ci_low"] for r in ci.values())


def test_energy_spectrum_is_the_mean_over_heads_per_plane(rope_build):
    rows = rope_build.dicts("SELECT * FROM rope_energy_spectrum")
    planted: dict[tuple, list[float]] = {}
    for p in rope_build.notes["planes"]:
        planted.setdefault((p["model_id"], p["band"], p["plane"]), []).append(p["k_energy_share"])
    assert {(r["model_id"], r["band"], r["plane"]) for r in rows} == set(planted)
    for r in rows:
        v = planted[(r["model_id"], r["band"], r["plane"])]
        assert r["n_heads"] == len(v)
        assert r["k_energy_share"] == pytest.approx(np.mean(v), rel=1e-12)
        if r["band"] == "unrotated":
            assert r["wavelength"] is None and r["inv_freq"] == 0 and r["dim_b"] is None
        else:
            assert r["wavelength"] == pytest.approx(2 * math.pi / r["inv_freq"])


def _band(built, model_id: str, band: str, variant: str, estimator: str = "gaussian") -> dict:
    rows = built.dicts(
        "SELECT * FROM rope_band_plasticity_model WHERE model_id = ? AND band = ? AND variant = ? "
        "AND estimator = ?",
        [model_id, band, variant, estimator],
    )
    assert len(rows) == 1
    return rows[0]


def test_a_band_covering_every_dim_reproduces_the_full_head_and_its_intervals(rope_build):
    """Band low / only of FULL_MODEL holds the full head's buckets: every model value equals
    model_summary's bit for bit, and its intervals are the full head's (same replicates)."""
    mid = rope_data.FULL_MODEL
    summary = rope_build.dicts("SELECT * FROM model_summary WHERE model_id = ?", [mid])[0]
    ci = {
        r["metric"]: r
        for r in rope_build.dicts("SELECT * FROM model_metric_ci WHERE model_id = ?", [mid])
    }
    for est, suffix in (("gaussian", ""), ("empirical", "_empirical")):
        band = _band(rope_build, mid, "low", "only", est)
        for c in PROFILE:
            assert band[c] is not None and band[c] == ci[c + suffix]["estimate"], (est, c)
            if c + suffix in summary:
                assert band[c] == summary[c + suffix], (est, c)
        for c in ("ap_overall", "ap_drop", "decile_3", "ap_first_20pct"):
            assert band[c + "_full"] == pytest.approx(band[c], rel=1e-12)
    for full, rope in (
        ("ap_drop", "rope_ap_drop_low_only"),
        ("ap_overall", "rope_ap_overall_low_only"),
        ("decile_9", "rope_decile_9_low_only"),
        ("ap_drop_empirical", "rope_ap_drop_low_only_empirical"),
    ):
        a, b = ci[full], ci[rope]
        assert b["metric_group"] == "rope"
        for c in ("estimate", "ci_low", "ci_high", "se", "n_heads", "n_layers", "n_boot_valid"):
            assert a[c] is not None and a[c] == b[c], (rope, c)
    band = _band(rope_build, mid, "low", "only")
    assert (band["ap_drop_ci_low"], band["ap_drop_ci_high"]) == (
        ci["ap_drop"]["ci_low"],
        ci["ap_drop"]["ci_high"],
    )
    heads = rope_build.dicts(
        "SELECT b.ap_overall AS band, f.ap_overall AS full, b.ap_drop AS band_drop, "
        "f.ap_drop AS full_drop FROM intermediate.int_rope_band_head_plasticity AS b "
        "JOIN intermediate.int_head_plasticity AS f USING (model_id, layer, q_head, estimator) "
        "WHERE b.band = 'low' AND b.variant = 'only'"
    )
    assert len(heads) == 2 * (16 + 14)  # two estimators; the NoPE layer has no low band
    assert all(h["band"] == h["full"] and h["band_drop"] == h["full_drop"] for h in heads)


def test_band_values_follow_the_planted_scale_and_compare_over_the_same_heads(rope_build):
    for mid in (rope_data.FULL_MODEL, rope_data.NOPE_MODEL):
        for (band, variant), s in rope_data.SCALES.items():
            r = _band(rope_build, mid, band, variant)
            for c in ("ap_overall", "decile_0", "decile_9", "ap_drop"):
                assert r[c] == pytest.approx(s * r[c + "_full"], rel=1e-9), (mid, band, c)
            assert r["ap_drop_ci_low"] < r["ap_drop"] < r["ap_drop_ci_high"]
    # the NoPE model's rotated bands leave out its NoPE layer: the full head over the same heads
    full = rope_build.dicts(
        "SELECT avg(ap_overall) AS v FROM intermediate.int_head_plasticity WHERE model_id = ? "
        "AND estimator = 'gaussian' AND layer <> ?",
        [rope_data.NOPE_MODEL, rope_data.NOPE_LAYER],
    )[0]["v"]
    r = _band(rope_build, rope_data.NOPE_MODEL, "high", "only")
    assert r["n_heads"] == 14 and r["n_layers"] == 7
    assert r["ap_overall_full"] == pytest.approx(full, rel=1e-12)


def test_band_logits_pool_every_head_s_pairs_exactly(rope_build):
    rows = rope_build.dicts("SELECT * FROM rope_band_logits_model")
    pooled: dict[tuple, list[np.ndarray]] = {}
    for (mid, _layer, _head, band, dbin), v in rope_build.notes["pairs"].items():
        pooled.setdefault((mid, band, dbin), []).append(v)
    assert {(r["model_id"], r["band"], r["distance_bin"]) for r in rows} == set(pooled)
    bucket = {m.model_id: m.bucket_size for m in rope_data.MODELS}
    for r in rows:
        v = np.concatenate(pooled[(r["model_id"], r["band"], r["distance_bin"])])
        assert r["n_pairs"] == len(v) and r["n_heads"] == len(
            pooled[(r["model_id"], r["band"], r["distance_bin"])]
        )
        assert r["logit_mean"] == pytest.approx(v.mean(), rel=1e-12)
        assert r["logit_sd"] == pytest.approx(v.std(ddof=1), rel=1e-9)
        assert r["distance_lo"] == r["distance_bin"] * bucket[r["model_id"]]
        assert r["distance_hi"] == r["distance_lo"] + bucket[r["model_id"]]


def test_rope_metrics_get_intervals_and_comparisons(rope_build):
    ci = rope_build.dicts("SELECT * FROM model_metric_ci WHERE metric_group = 'rope'")
    by = {(r["model_id"], r["metric"]): r for r in ci}
    for mid in (rope_data.FULL_MODEL, rope_data.NOPE_MODEL):
        for band, variant in rope_data.SCALES:
            for base in ("ap_overall", "ap_drop", "ap_first_20pct", "quintile_2", "decile_4"):
                r = by[(mid, f"rope_{base}_{band}_{variant}")]
                assert r["ci_low"] <= r["estimate"] <= r["ci_high"], r
    # the NoPE layer's unrotated band sits in one layer: a value but no interval, and a note
    r = by[(rope_data.NOPE_MODEL, "rope_ap_drop_unrotated_only")]
    assert r["n_layers"] == 1 and r["ci_low"] is None and "fewer than" in r["note"]
    assert not any(
        m.startswith("rope_") and "unrotated" in m for (mid, m) in by if mid == rope_data.FULL_MODEL
    )
    cmp = rope_build.dicts("SELECT * FROM model_comparisons WHERE metric LIKE 'rope_%'")
    assert {r["metric"] for r in cmp} == {
        "rope_ap_drop_high_only",
        "rope_ap_drop_mid_only",
        "rope_ap_drop_low_only",
    }
    for r in cmp:
        a = by[(r["model_a"], r["metric"])]["estimate"]
        b = by[(r["model_b"], r["metric"])]["estimate"]
        assert (
            r["difference"] == pytest.approx(a - b, abs=1e-15)
            and r["ci_low"] <= r["difference"] <= r["ci_high"]
        )


def test_without_rope_rows_the_rope_marts_are_empty_and_other_intervals_unchanged(
    rope_build, plain_build
):
    assert plain_build.result.success
    for mart in (
        "rope_band_energy",
        "rope_energy_spectrum",
        "rope_band_plasticity_model",
        "rope_band_logits_model",
    ):
        assert plain_build.dicts(f"SELECT count(*) AS n FROM {mart}")[0]["n"] == 0
    sql = "SELECT * EXCLUDE (label) FROM model_metric_ci WHERE metric_group <> 'rope' ORDER BY model_id, metric"
    plain, rope = plain_build.dicts(sql), rope_build.dicts(sql)
    assert len(plain) > 100 and plain == rope
    assert not plain_build.dicts("SELECT * FROM model_metric_ci WHERE metric LIKE 'rope%'")
    sql = "SELECT * FROM model_comparisons WHERE metric NOT LIKE 'rope%' ORDER BY metric, model_a, model_b"
    assert plain_build.dicts(sql) == rope_build.dicts(sql)
