"""The softmax reach figures (qkwh/reports/reach.py) on marts planted in an in-memory
warehouse: each draws the planted values, the estimate-vs-exact figure only where exact values
exist, and every figure is left out silently (Absent) without reach results."""

from __future__ import annotations

import duckdb
import pytest

from qkwh.reports import reach
from qkwh.reports.base import Absent, Drawn, Marts


def _spec(chart) -> dict:
    chart = chart.chart if isinstance(chart, Drawn) else chart
    return chart.to_dict()


def _values(spec: dict) -> list[dict]:
    return [v for d in spec.get("datasets", {}).values() for v in d]


@pytest.fixture
def con():
    c = duckdb.connect()
    c.execute(
        "CREATE TABLE model_summary AS SELECT * FROM (VALUES ('a', 'A', 'fam'), ('b', 'B', 'fam'))"
        " t(model_id, label, family)"
    )
    c.execute(
        "CREATE TABLE reach_mass_by_distance AS SELECT 'a' AS model_id, 1 AS q_bucket, "
        "r AS distance_bin, 3 AS n_heads, 30 AS n_queries, m AS mass, 0.5e0 AS uniform_mass, "
        "m / 0.5e0 AS lift, NULL::DOUBLE AS mass_exact FROM (VALUES (0, 0.8e0), (1, 0.2e0)) t(r, m)"
    )
    c.execute(
        "CREATE TABLE reach_head_metrics AS SELECT * FROM (VALUES "
        "('a', 0, 0, 'L0H0', 0.3e0, 0.31e0, 0.7e0, 0.2e0, 1), ('b', 0, 1, 'L0H1', 0.6e0, NULL, 0.4e0, 0.1e0, 0))"
        " t(model_id, layer, q_head, head_label, reach, reach_exact, ap_overall, ap_drop, "
        "globality_gap)"
    )
    c.execute(
        "CREATE TABLE model_metric_ci AS SELECT * FROM (VALUES "
        "('a', 'reach_drop', 0.2e0, 0.1e0, 0.3e0), ('a', 'ap_drop', 0.05e0, 0.0e0, 0.1e0)) "
        "t(model_id, metric, estimate, ci_low, ci_high)"
    )
    c.execute(
        "CREATE TABLE model_reach_limits AS SELECT 'a' AS model_id, 8192 AS measured_context, "
        "4096 AS trained_context, 0 AS windowed_layers, NULL::INT AS min_window, "
        "92 AS critical_dim, 4711.7e0 AS extrapolation_bound"
    )
    yield c
    c.close()


def test_figures_draw_the_planted_marts(con):
    marts = Marts(con, ["a", "b"])
    heat = _values(_spec(reach.mass_heatmap(marts, "a")))
    assert sorted((v["distance_bin"], v["mass"]) for v in heat) == [(0, 0.8), (1, 0.2)]
    pts = _values(_spec(reach.reach_vs_ap(marts)))
    assert sorted((v["model_id"], v["reach"], v["ap_overall"]) for v in pts) == [
        ("a", 0.3, 0.7),
        ("b", 0.6, 0.4),
    ]
    drop = _values(_spec(reach.drop_vs_drop(marts)))
    assert [(v["reach_drop"], v["ap_drop"]) for v in drop if "reach_drop" in v] == [(0.2, 0.05)]
    exact = reach.estimate_vs_exact(marts)
    assert [
        (v["reach"], v["reach_exact"]) for v in _values(_spec(exact)) if "reach_exact" in v
    ] == [(0.3, 0.31)]
    cells = {v["column"]: v["text"] for v in _values(_spec(reach.limits_table(marts)))}
    assert cells["critical dim"] == "92" and cells["smallest window"] == "—"


def test_without_reach_results_the_figures_are_absent(con):
    for t in ("reach_mass_by_distance", "reach_head_metrics"):
        con.execute(f"DELETE FROM {t}")
    con.execute("DELETE FROM model_metric_ci")
    marts = Marts(con, ["a", "b"])
    for build in (reach.reach_vs_ap, reach.drop_vs_drop, reach.estimate_vs_exact):
        with pytest.raises(Absent):
            build(marts)
    with pytest.raises(Absent):
        reach.mass_heatmap(marts, "a")


def test_benchmark_flags_table_lists_each_length_once_with_the_limits_it_exceeds(con):
    """Per-length rows of benchmark_joins (one per metric) become one row per (model, benchmark,
    length) naming the limits exceeded; overall scores are not listed; a model without limits
    shows a dash; benchmark_joins without the flag columns leaves the figure out."""
    con.execute(
        "CREATE TABLE benchmark_joins AS SELECT * FROM (VALUES "
        "('ruler', '', 'length', 4096, 'ap_drop', 'a', false, false, false, true), "
        "('ruler', '', 'length', 4096, 'matched_len_bin', 'a', false, false, false, true), "
        "('ruler', '', 'length', 16384, 'ap_drop', 'a', true, false, true, false), "
        "('ruler', '', 'overall', NULL, 'ap_drop', 'a', NULL, NULL, NULL, NULL), "
        "('longbench_pro', 'thinking', 'length', 8192, 'ap_drop', 'b', NULL, NULL, NULL, NULL)) "
        "t(benchmark, mode, length_scope, context_length_tokens, metric, model_id, "
        "beyond_measured, beyond_window, beyond_extrapolation, measurable)"
    )
    marts = Marts(con, ["a", "b"])
    assert [
        (r["model_id"], r["benchmark"], r["length"], r["beyond"]) for r in reach.flag_rows(marts)
    ] == [
        ("a", "ruler", 4096, ""),
        ("a", "ruler", 16384, "measured context, extrapolation bound"),
        ("b", "longbench_pro (thinking)", 8192, None),
    ]
    drawn = reach.benchmark_flags_table(marts)
    texts = [v["text"] for v in _values(_spec(drawn)) if v["column"] == "beyond"]
    assert texts == ["measurable", "measured context, extrapolation bound", "—"]
    assert drawn.caption == "1 of 3 benchmark lengths beyond a limit."
    con.execute("ALTER TABLE benchmark_joins DROP COLUMN measurable")
    with pytest.raises(Absent):
        reach.benchmark_flags_table(Marts(con, ["a", "b"]))
