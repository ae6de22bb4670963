"""The interval marts: model_metric_ci, model_comparisons, family_correlations and
benchmark_correlations, built by the real dbt project.

* a simulation with a known truth: 95 % layer-cluster intervals cover it in 90-99 % of 400
  simulated models, and are wider than a naive per-head interval when heads of a layer move
  together (and not when they do not);
* the SQL replicate aggregation against an independent numpy recomputation from the draws;
* reruns (another dbt thread count) give identical tables;
* the correlations against scipy, and the planted Gaussian-minus-empirical gap.
"""

from __future__ import annotations

import math
import shutil

import interval_data
import numpy as np
import pytest
from interval_data import CI_VARS, SIM_BOOT, SIM_HEADS_PER_LAYER, SIM_LAYERS, SIM_MODELS
from scipy import stats

from qkwh.build import build

# ------------------------------------------------------------------------------------------
# simulation with a known truth
# ------------------------------------------------------------------------------------------


def _naive_halfwidth(values: np.ndarray, level: float = 0.95) -> float:
    """Half-width of the interval that treats heads as independent: z * sd / sqrt(n)."""
    return stats.norm.ppf(0.5 + level / 2) * values.std(ddof=1) / math.sqrt(len(values))


@pytest.mark.slow
def test_layer_cluster_intervals_cover_the_truth_and_widen_with_layer_correlation(simulation_build):
    assert simulation_build.result.success
    truth = simulation_build.notes["truth"]
    ci = {
        (r["model_id"], r["metric"]): r
        for r in simulation_build.dicts(
            "SELECT * FROM model_metric_ci WHERE metric IN ('bias_strength', 'separation_strength')"
        )
    }
    heads = simulation_build.dicts(
        "SELECT model_id, bias_strength, separation_strength FROM head_metrics"
    )
    by_model: dict[str, dict[str, list[float]]] = {}
    for h in heads:
        d = by_model.setdefault(h["model_id"], {"bias_strength": [], "separation_strength": []})
        d["bias_strength"].append(h["bias_strength"])
        d["separation_strength"].append(h["separation_strength"])
    assert len(truth) == SIM_MODELS
    for metric, k in (("bias_strength", 0), ("separation_strength", 1)):
        covered, ratios = 0, []
        for mid, mu in truth.items():
            row = ci[(mid, metric)]
            assert row["n_boot"] == SIM_BOOT and row["level"] == 0.95 and row["seed"] == 0
            assert (
                row["n_layers"] == SIM_LAYERS and row["n_heads"] == SIM_LAYERS * SIM_HEADS_PER_LAYER
            )
            assert row["method"] == "layer_cluster_bootstrap_percentile"
            vals = np.asarray(by_model[mid][metric])
            assert row["estimate"] == pytest.approx(vals.mean(), rel=1e-12)
            covered += row["ci_low"] <= mu[k] <= row["ci_high"]
            ratios.append((row["ci_high"] - row["ci_low"]) / (2 * _naive_halfwidth(vals)))
        coverage = covered / len(truth)
        assert 0.90 <= coverage <= 0.99, (metric, coverage)
        if metric == "bias_strength":
            # layer effect sd 0.02 against head noise 0.01 (3 heads a layer): ~1.6x wider
            assert np.median(ratios) > 1.4, np.median(ratios)
        else:
            # no layer effect: clustering costs little (bootstrap of the layers ~ naive)
            assert 0.8 < np.median(ratios) < 1.2, np.median(ratios)


# ------------------------------------------------------------------------------------------
# the replicate aggregation, recomputed independently
# ------------------------------------------------------------------------------------------


def _replicates(built, model_id: str, metric: str) -> np.ndarray:
    rows = built.query(
        "SELECT replicate, value FROM intermediate.int_model_metric_replicates WHERE model_id = ? "
        "AND metric = ? ORDER BY replicate",
        [model_id, metric],
    )
    assert [r[0] for r in rows] == list(range(len(rows)))
    return np.array([np.nan if r[1] is None else r[1] for r in rows])


def _draws(built, model_id: str) -> tuple[list[int], np.ndarray]:
    layers = [
        r[0]
        for r in built.query(
            "SELECT layer FROM intermediate.int_bootstrap_clusters WHERE model_id = ? ORDER BY cluster_index",
            [model_id],
        )
    ]
    mult = np.array(
        [
            r[0]
            for r in built.query(
                "SELECT multiplicity FROM intermediate.int_bootstrap_draws WHERE model_id = ? ORDER BY replicate",
                [model_id],
            )
        ]
    )
    return layers, mult


def test_replicates_recompute_every_drawn_head_from_the_draws(ci_build):
    """Replicate b of a mean, a median and ap_drop equals numpy on the heads of the drawn
    layers, each head counted once per draw of its layer; replicate 0 is the plain value."""
    mid = "ministral3-8b"
    layers, mult = _draws(ci_build, mid)
    assert mult.shape == (CI_VARS["n_boot"] + 1, 8)
    assert (mult[0] == 1).all() and (mult[1:].sum(axis=1) == 8).all()
    heads = ci_build.dicts(
        "SELECT * FROM head_metrics WHERE model_id = ? ORDER BY layer, q_head", [mid]
    )
    idx = np.array([layers.index(h["layer"]) for h in heads])
    w = mult[:, idx]  # (B + 1, heads): copies of each head per replicate

    bias = np.array([h["bias_strength"] for h in heads])
    assert np.allclose(
        _replicates(ci_build, mid, "bias_strength"), (w @ bias) / w.sum(axis=1), rtol=1e-12
    )

    got_median = _replicates(ci_build, mid, "bias_strength_median")
    for b in (0, 1, 57, 200):
        assert got_median[b] == pytest.approx(
            np.median(np.repeat(bias, w[b].astype(int))), rel=1e-12
        )

    dec = np.array([[h[f"decile_{k}"] for k in range(10)] for h in heads], dtype=float)
    has = ~np.isnan(dec)
    model_dec = (w @ np.where(has, dec, 0.0)) / (w @ has)
    drop = (model_dec[:, 0] + model_dec[:, 1]) / 2 - (model_dec[:, 8] + model_dec[:, 9]) / 2
    assert np.allclose(_replicates(ci_build, mid, "ap_drop"), drop, rtol=1e-12, atol=1e-15)

    ci = ci_build.dicts(
        "SELECT * FROM model_metric_ci WHERE model_id = ? AND metric = 'ap_drop'", [mid]
    )[0]
    lo, hi = np.quantile(drop[1:], [0.025, 0.975])
    assert ci["estimate"] == pytest.approx(drop[0], rel=1e-12)
    assert ci["ci_low"] == pytest.approx(lo, rel=1e-12) and ci["ci_high"] == pytest.approx(
        hi, rel=1e-12
    )
    assert ci["se"] == pytest.approx(drop[1:].std(ddof=1), rel=1e-9)


def test_model_streams_are_independent_of_the_other_models(ci_build):
    """Each model's draws come from default_rng([seed, hash(model_id)]): different models draw
    differently, and the draws do not depend on which other models are in the warehouse."""
    _, a = _draws(ci_build, "qwen3-4b")
    _, b = _draws(ci_build, "qwen3-8b")
    assert not np.array_equal(a[1:], b[1:])
    from qkwh.bootstrap import draw_layers, stream

    again = draw_layers(8, CI_VARS["n_boot"], stream(0, "qwen3-4b"))
    assert np.array_equal(again, a)


def test_the_draws_model_uses_the_library_stream_and_draws():
    """int_bootstrap_draws has no random-number code of its own: the reproducible draws depend on
    the dbt model and qkwh.bootstrap staying equal, so the model imports them."""
    import ast

    from qkwh.paths import DBT_PROJECT_DIR

    path = DBT_PROJECT_DIR / "models" / "intervals" / "int_bootstrap_draws.py"
    tree = ast.parse(path.read_text())
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert defined == {"model"}
    imported = {
        a.name
        for n in tree.body
        if isinstance(n, ast.ImportFrom) and n.module == "qkwh.bootstrap"
        for a in n.names
    }
    assert {"stream", "draw_layers"} <= imported
    names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not names & {"default_rng", "integers", "hashlib"}


def test_comparisons_are_differences_of_paired_replicates(ci_build):
    rows = {
        (r["model_a"], r["model_b"], r["metric"]): r
        for r in ci_build.dicts("SELECT * FROM model_comparisons")
    }
    r = rows[("ministral3-3b", "qwen3-4b", "ap_drop")]
    a = _replicates(ci_build, "ministral3-3b", "ap_drop")
    b = _replicates(ci_build, "qwen3-4b", "ap_drop")
    lo, hi = np.quantile(a[1:] - b[1:], [0.025, 0.975])
    assert r["difference"] == pytest.approx(a[0] - b[0], rel=1e-12)
    assert r["ci_low"] == pytest.approx(lo, rel=1e-12) and r["ci_high"] == pytest.approx(
        hi, rel=1e-12
    )
    # planted decay 0.08 vs 0.24 of the relative position: far apart
    assert r["distinguishable"] and r["ci_high"] < 0
    assert r["label_b"] == "Qwen3 4B" and r["label_a"] == "ministral3-3b"
    n_models = 5
    n_metrics = len({m for (_, _, m) in rows})
    assert len(rows) == n_models * (n_models - 1) // 2 * n_metrics
    assert {
        "ap_drop",
        "ap_overall",
        "bias_strength",
        "abs_r_k_a",
        "plane_var_fraction",
        "gauss_gap",
    } <= {m for (_, _, m) in rows}


def test_planted_gauss_gap_is_found_and_told_apart(ci_build):
    """qwen3-4b's empirical buckets sit 0.02 below the Gaussian ones, the others' only wiggle."""
    gap = {
        r["model_id"]: r
        for r in ci_build.dicts("SELECT * FROM model_metric_ci WHERE metric = 'gauss_gap'")
    }
    assert set(gap) == {s.model_id for s in interval_data.CI_MODELS}
    assert gap["qwen3-4b"]["estimate"] == pytest.approx(0.02, abs=0.002)
    assert gap["qwen3-4b"]["ci_low"] > 0.015
    for mid in ("qwen3-8b", "ministral3-3b"):
        assert abs(gap[mid]["estimate"]) < 0.002
    cmp = ci_build.dicts(
        "SELECT * FROM model_comparisons WHERE metric = 'gauss_gap' "
        "AND model_a = 'qwen3-4b' AND model_b = 'qwen3-8b'"
    )[0]
    assert cmp["distinguishable"] and cmp["ci_low"] > 0
    heads = ci_build.dicts(
        "SELECT gauss_gap, gauss_gap_sampled_se, ap_overall_empirical, ap_drop_empirical "
        "FROM head_metrics WHERE model_id = 'qwen3-4b'"
    )
    assert all(h["gauss_gap"] == pytest.approx(0.02, abs=0.003) for h in heads)
    # 16 buckets with gap SE 0.003, n-weighted: about 0.003 / 4
    assert all(0.0005 < h["gauss_gap_sampled_se"] < 0.001 for h in heads)
    buckets = ci_build.query(
        "SELECT count(*), avg(gauss_gap) FROM plasticity_buckets_gap WHERE model_id = 'qwen3-4b'"
    )
    assert buckets[0][0] == 16 * 16 and buckets[0][1] == pytest.approx(0.02, abs=0.001)


def test_labels_fall_back_to_the_model_id(ci_build):
    labels = dict(ci_build.query("SELECT model_id, label FROM model_summary"))
    assert labels["qwen3-4b"] == "Qwen3 4B" and labels["qwen3-8b"] == "qwen3-8b"
    assert {
        r[0]
        for r in ci_build.query(
            "SELECT DISTINCT label FROM head_metrics WHERE model_id = 'qwen3-4b'"
        )
    } == {"Qwen3 4B"}


# ------------------------------------------------------------------------------------------
# correlations
# ------------------------------------------------------------------------------------------


def test_benchmark_correlation_matches_scipy_with_both_intervals(ci_build):
    rows = ci_build.dicts(
        "SELECT * FROM benchmark_correlations WHERE benchmark = 'longbench_pro' "
        "AND mode = 'non-thinking' AND length_scope = 'overall' AND metric = 'ap_drop'"
    )
    assert len(rows) == 1
    r = rows[0]
    pairs = ci_build.query(
        "SELECT s.ap_drop, j.score FROM model_summary AS s JOIN benchmark_joins AS j "
        "USING (model_id) WHERE j.benchmark = 'longbench_pro' AND j.mode = 'non-thinking' "
        "AND j.length_scope = 'overall' AND j.metric = 'ap_drop'"
    )
    x, y = np.array(pairs).T
    want = stats.pearsonr(x, y)
    assert r["n"] == 5 and r["n_models"] == 5
    assert r["pearson_r"] == pytest.approx(want.statistic, abs=1e-12)
    assert r["p_value"] == pytest.approx(want.pvalue, rel=1e-9)
    z = math.atanh(want.statistic)
    half = stats.norm.ppf(0.975) / math.sqrt(5 - 3)
    assert r["fisher_ci_low"] == pytest.approx(math.tanh(z - half), rel=1e-12)
    assert r["fisher_ci_high"] == pytest.approx(math.tanh(z + half), rel=1e-12)
    assert -1 <= r["boot_ci_low"] < r["boot_ci_high"] <= 1
    assert r["n_boot"] == CI_VARS["n_boot"] and r["method"].endswith(
        "two_stage_bootstrap_percentile"
    )


def test_family_correlations_carry_a_layer_bootstrap_interval(ci_build):
    rows = {
        (r["scope_kind"], r["scope"]): r
        for r in ci_build.dicts(
            "SELECT * FROM family_correlations WHERE x_metric = 'bias_strength'"
        )
    }
    assert rows[("all", "all")]["n"] == 5 * 16
    for key in (("all", "all"), ("family", "Qwen3"), ("model", "qwen3-4b")):
        r = rows[key]
        assert r["boot_ci_low"] is not None and r["boot_ci_low"] <= r["boot_ci_high"], key
        assert r["fisher_ci_low"] <= r["pearson_r"] <= r["fisher_ci_high"], key
        assert r["note"] is None


# ------------------------------------------------------------------------------------------
# reproducibility
# ------------------------------------------------------------------------------------------

CI_TABLES = (
    "intermediate.int_bootstrap_draws",
    "intermediate.int_model_metric_replicates",
    "model_metric_ci",
    "model_comparisons",
    "family_correlations",
    "benchmark_correlations",
    "model_summary",
)


@pytest.mark.slow
def test_a_rerun_gives_identical_interval_tables(ci_build, tmp_path):
    """The same warehouse rebuilt (one dbt thread instead of two) gives bit-identical tables."""
    wh = tmp_path / "again.duckdb"
    shutil.copy(ci_build.warehouse, wh)
    res = build(
        wh,
        select="int_bootstrap_draws+",
        target_dir=tmp_path / "target",
        log_sink=lambda m: None,
        dbt_vars=CI_VARS,
        threads=1,
    )
    again = type(ci_build)(wh, res)
    for table in CI_TABLES:
        before = ci_build.query(f"SELECT * FROM {table} ORDER BY ALL")
        after = again.query(f"SELECT * FROM {table} ORDER BY ALL")
        assert before and before == after, table
