"""`qkwh build`: the dbt project on empty, synthetic and extended warehouses.

Mart values are checked against plain-Python arithmetic on the planted rows (synthetic_marts),
not against the SQL that produced them.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pytest
import synthetic_marts as sm

from qkwh import build as build_mod
from qkwh import mart_names
from qkwh.errors import NotFoundError, QkwhError, WarehouseLockedError
from qkwh.paths import DBT_PROJECT_DIR, REGISTRY_CSV

#: every mart (the generated list the reports read) but taxonomy_classes, which holds the class
#: definitions of the dbt var even on an empty warehouse
MARTS = sorted(mart_names.MARTS - {"taxonomy_classes"})
SPECS = {s.model_id: s for s in sm.BASE_MODELS}
QWEN, MINISTRAL = SPECS["qwen3-4b"], SPECS["ministral3-3b"]
SMOL = [s for s in sm.BASE_MODELS if s.family == "SmolLM3"]
TOL = 1e-12


#: raw tables without a dbt test: DuckDB enforces the keys of files, rope_frequencies and
#: run_config (PRIMARY KEY in warehouse/schema.sql); ingest_findings is a log without a key
UNTESTED_SOURCES = {"files", "rope_frequencies", "run_config", "ingest_findings"}


def close(a: float | None, b: float | None, tol: float = TOL) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= tol * max(1.0, abs(b))


# ------------------------------------------------------------------------------------------
# the builds themselves
# ------------------------------------------------------------------------------------------


def test_empty_warehouse_builds_every_mart_and_passes_every_test(empty_build):
    res = empty_build.result
    assert res.success and not res.failed
    assert res.n_unit_tests >= 15
    assert res.n_models >= 30
    # every model, seed and source table has a data test; each table_checks test is one node
    manifest = json.loads((res.target_path / "manifest.json").read_text())
    tested = {
        parent
        for n in manifest["nodes"].values()
        if n["resource_type"] == "test"
        for parent in n["depends_on"]["nodes"]
        if n.get("attached_node") in (None, parent)
    }
    tables = {
        uid
        for uid, n in {**manifest["nodes"], **manifest["sources"]}.items()
        if n["resource_type"] in ("model", "seed")
        or (n["resource_type"] == "source" and n["name"] not in UNTESTED_SOURCES)
    }
    assert sorted(tables - tested) == []
    assert res.n_tests >= 100
    for mart in MARTS:
        assert empty_build.query(f'SELECT count(*) FROM "{mart}"') == [(0,)], mart


def test_synthetic_build_passes_every_test_and_unit_test(synthetic_build):
    res = synthetic_build.result
    assert res.success, res.summary
    assert not res.failed
    assert res.count("unit_test", "pass") == res.n_unit_tests >= 15
    assert res.count("test", "pass") == res.n_tests
    assert "dbt build ok" in res.summary == str(res)
    # marts and seeds in main beside the raw tables; staging and intermediate models in schemas
    # named exactly `staging` / `intermediate` (not dbt's default main_staging)
    schemas = dict(
        synthetic_build.query(
            "SELECT table_name, table_schema FROM information_schema.tables WHERE table_name IN "
            "('model_summary', 'stg_models', 'int_models', 'int_model_metric_replicates', "
            "'model_registry', 'models')"
        )
    )
    assert schemas == {
        "model_summary": "main",
        "model_registry": "main",
        "models": "main",
        "stg_models": "staging",
        "int_models": "intermediate",
        "int_model_metric_replicates": "intermediate",
    }
    assert _layer_objects_in_main(synthetic_build.warehouse) == []


def _layer_objects_in_main(warehouse: Path) -> list[str]:
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        return [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
                "AND (table_name LIKE 'stg\\_%' ESCAPE '\\' OR table_name LIKE 'int\\_%' ESCAPE '\\') "
                "ORDER BY 1"
            ).fetchall()
        ]
    finally:
        con.close()


@pytest.mark.slow  # a second full build
def test_a_warehouse_of_the_old_layout_is_migrated_on_build(synthetic_build, tmp_path):
    """Builds before the schema split left stg_* views and int_* tables in main: the next build
    drops exactly those (not a user's own relation of a similar name) and keeps every mart."""
    wh = tmp_path / "old.duckdb"
    shutil.copy(synthetic_build.warehouse, wh)
    con = duckdb.connect(str(wh))
    try:
        moved = con.execute(
            "SELECT table_schema, table_name, table_type FROM information_schema.tables "
            "WHERE table_schema IN ('staging', 'intermediate') ORDER BY 2"
        ).fetchall()
        assert len(moved) > 20
        for schema, name, kind in moved:  # the layout of earlier builds: everything in main
            if kind == "VIEW":
                sql = con.execute(
                    "SELECT sql FROM duckdb_views() WHERE schema_name = ? AND view_name = ?",
                    [schema, name],
                ).fetchone()[0]
                con.execute(
                    sql.replace(f"CREATE VIEW {schema}.", "CREATE VIEW main.", 1).replace(
                        f'CREATE VIEW "{schema}".', "CREATE VIEW main.", 1
                    )
                )
            else:
                con.execute(f'CREATE TABLE main."{name}" AS SELECT * FROM "{schema}"."{name}"')
        con.execute("DROP SCHEMA staging CASCADE")
        con.execute("DROP SCHEMA intermediate CASCADE")
        con.execute("CREATE TABLE main.int_my_notes AS SELECT 1 AS x")  # not dbt's: must stay
        marts = {m: con.execute(f'SELECT count(*) FROM "{m}"').fetchone()[0] for m in MARTS}
    finally:
        con.close()
    assert set(_layer_objects_in_main(wh)) == {n for _, n, _ in moved} | {"int_my_notes"}

    res = build_mod.build(wh, target_dir=tmp_path / "target", log_sink=lambda _m: None)
    assert res.success, res.summary
    assert _layer_objects_in_main(wh) == ["int_my_notes"]
    con = duckdb.connect(str(wh), read_only=True)
    try:
        assert {m: con.execute(f'SELECT count(*) FROM "{m}"').fetchone()[0] for m in MARTS} == marts
        assert con.execute("SELECT count(*) FROM staging.stg_models").fetchone()[0] == len(
            sm.BASE_MODELS
        )
    finally:
        con.close()


def test_build_reports_a_locked_warehouse_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("QKWH_LOCK_TIMEOUT", "0.5")  # the holder never lets go: no use waiting 10 s
    wh = tmp_path / "locked.duckdb"
    duckdb.connect(str(wh)).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import duckdb, sys, time
            con = duckdb.connect({str(wh)!r})
            print("ready", flush=True)
            sys.stdin.read()
        """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(WarehouseLockedError) as exc:
            build_mod.build(wh, target_dir=tmp_path / "target")
        message = str(exc.value)
        assert "locked" in message and "\n" not in message
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_build_of_a_missing_warehouse_is_not_found(tmp_path):
    with pytest.raises(NotFoundError):
        build_mod.build(tmp_path / "nope.duckdb", target_dir=tmp_path / "target")


@pytest.mark.slow  # a build of its own
def test_failing_test_is_named_in_the_error(synthetic_build, tmp_path):
    """Component weights of a head that no longer sum to 1 fail the invariant test, by name;
    bucket APs above 1 fail the staging view's column checks, which name the column, the check
    and the rows that fail it."""
    wh = tmp_path / "corrupt.duckdb"
    shutil.copy(synthetic_build.warehouse, wh)
    con = duckdb.connect(str(wh))
    con.execute(
        "UPDATE plasticity_components SET component_weight = component_weight + 0.01 "
        "WHERE model_id = 'qwen3-4b' AND layer = 0 AND q_head = 0 AND component = 3"
    )
    con.execute(
        "UPDATE plasticity_buckets SET ap_bucket = 1.5 WHERE model_id = 'qwen3-4b' "
        "AND layer = 0 AND q_head = 0 AND q_bucket IN (0, 1)"
    )
    copied = con.execute(  # one bucket's row twice
        "INSERT INTO plasticity_buckets SELECT * FROM plasticity_buckets WHERE model_id = "
        "'qwen3-4b' AND layer = 0 AND q_head = 0 AND q_bucket = 2"
    ).fetchone()
    assert copied == (1,)
    con.close()
    with pytest.raises(QkwhError) as exc:
        build_mod.build(
            wh,
            select="+assert_component_weights_sum_to_one stg_plasticity_buckets",
            target_dir=tmp_path / "target",
            log_sink=lambda m: None,
        )
    message = str(exc.value)
    assert "\n" not in message
    failed = {n.name: n for n in exc.value.result.failed}
    assert failed["assert_component_weights_sum_to_one"].failures == 1
    assert "assert_component_weights_sum_to_one (1 failing row)" in message
    (checks,) = [n for n in failed.values() if n.name.startswith("table_checks_stg_plasticity_b")]
    detail = (
        "primary_key(model_id, layer, q_head, q_bucket) is shared: 2 rows; "
        "in_range(ap_bucket, 0, 1): 2 rows"
    )
    assert checks.failures == 2  # two failing checks, each with its rows
    assert checks.detail == detail
    assert f"{checks.name} ({detail})" in message


@pytest.mark.slow  # a build of its own
def test_a_table_is_replaced_in_place_over_leftovers_and_a_view_of_its_name(
    synthetic_build, tmp_path
):
    """The project's table materialization (macros/materializations/table.sql): leftovers of an
    interrupted dbt-duckdb build (`<model>__dbt_tmp`, `<model>__dbt_backup`) are dropped, a view
    holding the model's name is replaced by the table in one statement (no table built aside and
    renamed in), and the build's provenance is recorded."""
    wh = tmp_path / "leftovers.duckdb"
    shutil.copy(synthetic_build.warehouse, wh)
    con = duckdb.connect(str(wh))
    models = con.execute("SELECT model_id FROM model_summary ORDER BY 1").fetchall()
    con.execute("CREATE TABLE model_summary__dbt_tmp AS SELECT 1 AS x")
    con.execute("CREATE TABLE model_summary__dbt_backup AS SELECT 1 AS x")
    con.execute("DROP TABLE model_summary")
    con.execute("CREATE VIEW model_summary AS SELECT 1 AS x")
    con.close()
    res = build_mod.build(
        wh, select="model_summary", target_dir=tmp_path / "target", log_sink=lambda m: None
    )
    assert res.success
    # one statement writes the table: nothing is built aside and renamed in (dbt's SQL log)
    sql = (tmp_path / "logs" / "dbt.log").read_text().lower()
    assert 'create or replace table "leftovers"."main"."model_summary"' in sql
    assert "rename to" not in sql
    con = duckdb.connect(str(wh), read_only=True)
    try:
        kinds = con.execute(
            "SELECT table_name, table_type FROM information_schema.tables "
            "WHERE table_schema = 'main' AND table_name LIKE 'model_summary%'"
        ).fetchall()
        assert kinds == [("model_summary", "BASE TABLE")]
        assert con.execute("SELECT model_id FROM model_summary ORDER BY 1").fetchall() == models
        recorded = con.execute(  # this build: the latest one started (ids are random)
            "SELECT build_id FROM mart_relations WHERE relation = 'model_summary'"
        ).fetchall()
        latest = con.execute("SELECT arg_max(build_id, built_at) FROM mart_builds").fetchone()
        assert latest[0] is not None and recorded == [latest]
    finally:
        con.close()


def test_registry_seed_is_byte_identical_to_configs_models_csv():
    seed = DBT_PROJECT_DIR / "seeds" / "model_registry.csv"
    assert seed.read_bytes() == REGISTRY_CSV.read_bytes()


# ------------------------------------------------------------------------------------------
# plasticity: planted decay, deciles, first/last 20 %, length bins
# ------------------------------------------------------------------------------------------


def test_marts_rank_models_by_planted_plasticity_decay(synthetic_build):
    rows = synthetic_build.query(
        "SELECT model_id FROM model_summary "
        "WHERE model_id IN ('qwen3-4b', 'ministral3-3b', 'synth-noreg') ORDER BY ap_drop DESC"
    )
    # planted slopes: qwen3-4b 0.24 > synth-noreg 0.15 > ministral3-3b 0.08
    assert [r[0] for r in rows] == ["qwen3-4b", "synth-noreg", "ministral3-3b"]
    summary = dict(synthetic_build.query("SELECT model_id, ap_drop FROM model_summary"))
    assert summary["qwen3-4b"] > 2 * summary["ministral3-3b"] > 0


@pytest.mark.parametrize("model_id", list(SPECS))
def test_model_profile_matches_hand_computation(synthetic_build, model_id):
    expected = sm.expected_model_plasticity(SPECS[model_id])
    row = synthetic_build.dicts("SELECT * FROM model_summary WHERE model_id = ?", [model_id])[0]
    for key, value in expected.items():
        assert close(row[key], value), (key, row[key], value)
    for k in range(5):
        assert close(
            row[f"quintile_{k}"],
            (expected[f"decile_{2 * k}"] + expected[f"decile_{2 * k + 1}"]) / 2,
        )
    assert row["n_heads_plasticity"] == len(SPECS[model_id].heads)
    # no empirical estimator in these rows: its columns stay empty
    assert row["ap_overall_empirical"] is None and row["gauss_gap"] is None
    assert row["n_heads_empirical"] == 0


def test_head_profile_handles_a_bucket_without_pairs(synthetic_build):
    """qwen3-4b L10H3 has no AP in bucket 0: decile 0 comes from bucket 1 alone."""
    spec = QWEN
    idx = spec.heads.index((10, 3))
    buckets = sm.bucket_rows(spec, idx, 10, 3)
    d0 = synthetic_build.query(
        "SELECT decile_0, ap_first_20pct, head_label FROM head_metrics "
        "WHERE model_id = 'qwen3-4b' AND layer = 10 AND q_head = 3"
    )[0]
    assert close(d0[0], buckets[1]["ap_bucket"])
    assert d0[2] == "L10H3"


def test_length_bins_follow_the_bin_table(synthetic_build):
    bins = synthetic_build.dicts("SELECT * FROM plasticity_length_bins")
    by_model: dict[str, set[str]] = {}
    for b in bins:
        by_model.setdefault(b["model_id"], set()).add(b["bin_set"])
    assert by_model["qwen3-4b"] == {"lbp", "ruler"}
    assert by_model["synth-noreg"] == {"lbp", "ruler"}
    assert by_model["smollm3-3b-stage1-step-40000"] == {"lbp", "ruler", "smollm3_4k"}
    assert by_model["smollm3-3b-stage3-step-4720000"] == {"lbp", "ruler", "smollm3_4k"}
    assert by_model["smollm3-3b-lc-32k-to-64k-step-4000"] == {"lbp", "ruler", "smollm3_lc"}

    checked = 0
    for b in bins:
        spec = SPECS[b["model_id"]]
        want = sm.expected_bin(spec, b["lo_tokens"], b["hi_tokens"], b["hi_inclusive"])
        assert close(b["ap"], want), (b["model_id"], b["metric_name"], b["ap"], want)
        checked += want is not None
    assert checked > 40
    lc = {
        b["label"]: b["ap"]
        for b in bins
        if b["model_id"] == "smollm3-3b-lc-32k-to-64k-step-4000" and b["bin_set"] == "smollm3_lc"
    }
    assert lc["0-1K"] is None and lc["1K-2K"] is not None  # tau_0 ~ m/2 = 2048 (Table 7's "-")
    qwen = {b["metric_name"]: b for b in bins if b["model_id"] == "qwen3-4b"}
    assert qwen["len_bin_65536_131072"]["ap"] is not None  # right-closed last LBP bin
    assert qwen["len_bin_0_8192"]["ap"] > qwen["len_bin_65536_131072"]["ap"]


def test_model_summary_has_a_column_per_bin_metric(synthetic_build):
    row = synthetic_build.dicts("SELECT * FROM model_summary WHERE model_id = 'qwen3-4b'")[0]
    for name in (
        "len_bin_0_8192",
        "len_bin_65536_131072",
        "ruler_bin_4096",
        "len_bin_0_256",
        "len_bin_49152_65536",
        "len_bin_total_drop",
        "lbp_overall",
    ):
        assert name in row
    assert close(row["len_bin_0_8192"], sm.expected_bin(QWEN, 0, 8192, False))
    assert close(
        row["len_bin_total_drop"],
        sm.expected_bin(QWEN, 65536, 131072, True) - sm.expected_bin(QWEN, 0, 8192, False),
    )
    assert row["len_bin_0_256"] is None  # smollm3 short-context set does not apply
    assert row["lbp_overall"] == 31.26
    assert row["n_heads"] == 4 and row["family"] == "Qwen3"


# ------------------------------------------------------------------------------------------
# rotation: bias decomposition and the training trajectory
# ------------------------------------------------------------------------------------------


def test_training_trajectory_orders_checkpoints(synthetic_build):
    rows = synthetic_build.dicts("SELECT * FROM training_trajectory ORDER BY trajectory_rank")
    assert [r["model_id"] for r in rows] == [s.model_id for s in SMOL]
    assert [r["trajectory_rank"] for r in rows] == [1, 2, 3]
    assert [r["checkpoint_phase"] for r in rows] == ["pretrain", "anneal", "lc_32k_64k"]
    for r, spec in zip(rows, SMOL):
        exp = sm.expected_model_plasticity(spec)
        assert close(r["ap_drop"], exp["ap_drop"])
        assert close(r["bias_strength"], sm.expected_bias(spec)["bias_strength"])


def test_bias_decomposition_changes_between_consecutive_checkpoints(synthetic_build):
    rows = {r["model_id"]: r for r in synthetic_build.dicts("SELECT * FROM bias_decomposition")}
    assert set(rows) == set(SPECS)
    for prev, cur in itertools.pairwise(SMOL):
        r = rows[cur.model_id]
        e_prev, e_cur = sm.expected_bias(prev), sm.expected_bias(cur)
        assert r["previous_model_id"] == prev.model_id
        for key in ("mu_q_a", "alpha_k", "bias_strength", "bias_strength_ctx"):
            assert close(r[key], e_cur[key]), key
            assert close(r[f"delta_{key}"], e_cur[key] - e_prev[key]), key
            assert close(r[f"rel_change_{key}"], (e_cur[key] - e_prev[key]) / abs(e_prev[key])), key
    first = rows[SMOL[0].model_id]
    assert first["previous_model_id"] is None and first["delta_bias_strength"] is None
    assert rows["qwen3-4b"]["delta_bias_strength"] is None
    # the degenerate head of synth-noreg drops out of the means
    assert close(
        rows["synth-noreg"]["bias_strength"],
        sm.expected_bias(SPECS["synth-noreg"])["bias_strength"],
    )
    # LC extension: per-token bias collapses while bias x L_ctx grows (I-32)
    lc, anneal = rows[SMOL[2].model_id], rows[SMOL[1].model_id]
    assert lc["bias_strength"] < anneal["bias_strength"]
    assert lc["bias_strength_ctx"] > anneal["bias_strength_ctx"]


# ------------------------------------------------------------------------------------------
# PCA taxonomy, layers, correlations, heatmap, components
# ------------------------------------------------------------------------------------------


def test_head_taxonomy_and_fractions(synthetic_build):
    rows = synthetic_build.query("SELECT r_q0, r_k0, taxonomy FROM head_taxonomy")
    assert len(rows) == sum(len(s.heads) for s in sm.BASE_MODELS)
    for r_q, r_k, tax in rows:
        assert tax == sm.taxonomy(r_q, r_k)
    fr = synthetic_build.query(
        "SELECT taxonomy, n_heads, n_total, fraction FROM taxonomy_fractions WHERE scope_kind = 'all'"
    )
    assert len(fr) == 5
    counts = {}
    for _r_q, _r_k, tax in rows:
        counts[tax] = counts.get(tax, 0) + 1
    for tax, n, total, frac in fr:
        assert n == counts.get(tax, 0) and total == len(rows) and close(frac, n / total)


def test_layer_profile_flags_nope_and_cross_attention_layers(synthetic_build):
    smol = {
        r["layer"]: r
        for r in synthetic_build.dicts(
            "SELECT * FROM layer_profile WHERE model_id = 'smollm3-3b-stage1-step-40000'"
        )
    }
    assert set(smol) == {3, 4, 7}
    assert smol[3]["is_nope"] and smol[7]["is_nope"] and not smol[4]["is_nope"]
    assert smol[4]["nope_adjacency"] == "after_no_rope"
    noreg = {
        r["layer"]: r
        for r in synthetic_build.dicts("SELECT * FROM layer_profile WHERE model_id = 'synth-noreg'")
    }
    assert set(noreg) == {0, 1, 3}  # no heads in cross-attention layer 2
    assert noreg[1]["nope_adjacency"] == "before_no_rope"
    assert noreg[3]["nope_adjacency"] == "after_no_rope"
    for r in list(smol.values()) + list(noreg.values()):
        if r["decile_4"] is not None:
            want = (r["decile_6"] + r["decile_7"]) / 2 - (r["decile_4"] + r["decile_5"]) / 2
            assert close(r["recovery"], want)


def test_family_correlations_match_hand_computed_pearson(synthetic_build):
    pts = sm.head_points(sm.BASE_MODELS)
    rows = {
        (r[0], r[1]): (r[2], r[3])
        for r in synthetic_build.query(
            "SELECT scope_kind, scope, n, pearson_r FROM family_correlations "
            "WHERE x_metric = 'bias_strength' AND y_metric = 'separation_strength'"
        )
    }
    n, r = rows[("all", "all")]
    assert n == len(pts)
    assert abs(r - sm.pearson([p[1] for p in pts], [p[2] for p in pts])) < 1e-11
    for family in ("Qwen3", "SmolLM3"):
        sub = [p for p in pts if p[0] == family]
        n, r = rows[("family", family)]
        assert n == len(sub)
        assert abs(r - sm.pearson([p[1] for p in sub], [p[2] for p in sub])) < 1e-11
    assert rows[("family", "Synth")] == (2, None)  # the degenerate head leaves 2 < 3 points


def test_heatmap_pools_over_heads_and_masks_small_cells(synthetic_build):
    rows = {
        (r[0], r[1]): r[2:]
        for r in synthetic_build.query(
            "SELECT model_id, dx_bin, n, masked, ap_mean, dx_tokens FROM plasticity_heatmap_model"
        )
    }
    n, masked, ap, _ = rows[("qwen3-4b", 0)]
    assert n == 4 * 2 * 40 and not masked and close(ap, 0.5)
    n, masked, ap, dx_tokens = rows[("qwen3-4b", 1)]
    assert n == 4 * 2 * 5 and masked and ap is None and dx_tokens == 8192


def test_component_weights_average_over_heads(synthetic_build):
    rows = synthetic_build.query(
        "SELECT component, component_weight, n_heads, rope_pair_index FROM component_weights_model "
        "WHERE model_id = 'ministral3-3b' ORDER BY component"
    )
    assert len(rows) == 8
    for c, w, n, pair in rows:
        assert close(w, (c + 1) / 36) and n == 3 and pair == c % 4


# ------------------------------------------------------------------------------------------
# benchmarks and published numbers
# ------------------------------------------------------------------------------------------


def test_benchmark_joins_pair_scores_with_metrics(synthetic_build):
    obs = synthetic_build.dicts(
        "SELECT * FROM benchmark_joins WHERE benchmark = 'longbench_pro' "
        "AND length_scope = 'overall' AND metric = 'ap_drop' ORDER BY model_id"
    )
    assert [(o["model_id"], o["score"]) for o in obs] == [
        ("ministral3-3b", 30.18),
        ("qwen3-4b", 31.26),
    ]
    assert close(obs[1]["metric_value"], sm.expected_model_plasticity(QWEN)["ap_drop"])
    corr = synthetic_build.query(
        "SELECT n, pearson_r, fisher_ci_low, boot_ci_low, p_value FROM benchmark_correlations "
        "WHERE benchmark = 'longbench_pro' AND length_scope = 'overall' AND metric = 'ap_drop'"
    )
    assert corr == [(2, None, None, None, None)]  # two models: n reported, r withheld


def test_benchmark_joins_flag_lengths_against_the_model_limits(synthetic_build):
    """The flag columns are BOOLEAN; every per-length row carries the flags of its (model,
    length) against model_reach_limits, recomputed here; overall rows carry none; the join does
    not multiply the rows.  (The synthetic seeds give these models overall scores only: the
    per-length logic is the unit test benchmark_joins_pairs_scores_with_metrics.)"""
    types = dict(
        synthetic_build.query(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = 'benchmark_joins' AND column_name IN "
            "('beyond_measured', 'beyond_window', 'beyond_extrapolation', 'measurable')"
        )
    )
    assert types == dict.fromkeys(
        ("beyond_measured", "beyond_window", "beyond_extrapolation", "measurable"), "BOOLEAN"
    )
    rows = synthetic_build.dicts(
        "SELECT j.*, l.measured_context, l.min_window, l.extrapolation_bound "
        "FROM benchmark_joins AS j LEFT JOIN model_reach_limits AS l USING (model_id)"
    )
    assert any(r["length_scope"] == "overall" for r in rows)
    per_length = [r for r in rows if r["length_scope"] == "length"]
    for r in per_length:
        n = r["context_length_tokens"]
        want = (
            n > r["measured_context"],
            r["min_window"] is not None and n > r["min_window"],
            r["extrapolation_bound"] is not None and n > r["extrapolation_bound"],
        )
        got = (r["beyond_measured"], r["beyond_window"], r["beyond_extrapolation"])
        assert got == want and r["measurable"] == (not any(want)), r
    for r in rows:
        if r["length_scope"] == "overall":
            assert (r["beyond_measured"], r["measurable"]) == (None, None)
    assert synthetic_build.query(
        "SELECT count(*) FROM (SELECT DISTINCT benchmark, mode, length_scope, "
        "context_length_tokens, metric, model_id FROM benchmark_joins)"
    ) == [(len(rows),)]


def test_published_comparison_covers_ingested_registry_models_only(synthetic_build):
    ref = DBT_PROJECT_DIR / "seeds" / "published_model_metrics.csv"
    lines = ref.read_text().splitlines()[1:]
    ingested = {s.model_id for s in sm.BASE_MODELS}
    expected = [ln.split(",") for ln in lines if ln.split(",")[0] in ingested]
    rows = synthetic_build.dicts("SELECT * FROM published_comparison WHERE level = 'model'")
    assert len(rows) == len(expected) > 0
    assert {r["model_id"] for r in rows} <= ingested - {"synth-noreg"}
    drop = [
        r
        for r in rows
        if r["model_id"] == "qwen3-4b" and r["metric"] == "ap_drop" and r["is_preferred"]
    ]
    assert len(drop) == 1
    ours = sm.expected_model_plasticity(QWEN)["ap_drop"]
    assert close(drop[0]["our_value"], ours)
    assert close(drop[0]["difference"], ours - drop[0]["published_value"])
    assert drop[0]["tolerance"] == 0.01
    assert drop[0]["within_tolerance"] == (abs(ours - drop[0]["published_value"]) <= 0.01)
    bins = [
        r
        for r in rows
        if r["model_id"] == "smollm3-3b-stage1-step-40000" and r["metric"] == "len_bin_0_256"
    ]
    assert bins and bins[0]["our_value"] is not None


# ------------------------------------------------------------------------------------------
# adding a model changes only what depends on it
# ------------------------------------------------------------------------------------------

PER_MODEL_MARTS = {
    "head_taxonomy": "model_id",
    "model_summary": "model_id",
    "head_metrics": "model_id",
    "model_metric_ci": "model_id",
    "plasticity_length_bins": "model_id",
    "plasticity_heatmap_model": "model_id",
    "component_weights_model": "model_id",
    "bias_decomposition": "model_id",
    "training_trajectory": "model_id",
    "layer_profile": "model_id",
    "published_comparison": "model_id",
    "head_rotation_pairs": "model_id",
}


def _rows(built, table: str, where: str = "true") -> list[tuple]:
    return built.query(f'SELECT * FROM "{table}" WHERE {where} ORDER BY ALL')


def _same_rows(a: list[tuple], b: list[tuple]) -> bool:
    """Equal, except that floats may differ in the last bits: DuckDB's parallel aggregates
    sum in an order that depends on the data around them (1e-12 relative is far below any
    metric's precision)."""
    if len(a) != len(b):
        return False
    for ra, rb in zip(a, b):
        for x, y in zip(ra, rb):
            if isinstance(x, float) and isinstance(y, float):
                if not (x == y or abs(x - y) <= 1e-12 * max(abs(x), abs(y))):
                    return False
            elif x != y:
                return False
    return True


@pytest.mark.slow  # a second build of the synthetic warehouse
def test_adding_a_model_changes_only_what_depends_on_it(synthetic_build, extended_build):
    assert extended_build.result.success
    assert extended_build.notes["stg_models_rows_after_copy"] == len(sm.BASE_MODELS)
    old_ids = ", ".join(f"'{s.model_id}'" for s in sm.BASE_MODELS)
    new_id = sm.EXTRA_MODEL.model_id
    for mart in PER_MODEL_MARTS:
        before = _rows(synthetic_build, mart)
        after = _rows(extended_build, mart, f"model_id IN ({old_ids})")
        assert before and _same_rows(after, before), f"{mart}: rows of existing models changed"
    assert _same_rows(
        _rows(synthetic_build, "taxonomy_fractions", "scope_kind = 'model'"),
        _rows(
            extended_build, "taxonomy_fractions", f"scope_kind = 'model' AND scope <> '{new_id}'"
        ),
    )
    assert _same_rows(
        _rows(synthetic_build, "family_correlations", "scope_kind <> 'all'"),
        _rows(
            extended_build,
            "family_correlations",
            f"scope_kind <> 'all' AND scope NOT IN ('{new_id}', 'Llama3.2')",
        ),
    )
    # the new model is everywhere it should be
    for mart in (
        "model_summary",
        "head_metrics",
        "head_taxonomy",
        "layer_profile",
        "model_metric_ci",
    ):
        assert (
            extended_build.query(f'SELECT count(*) FROM "{mart}" WHERE model_id = ?', [new_id])[0][
                0
            ]
            > 0
        )
    # cross-model rows do change: pooled taxonomy, pooled correlation, benchmark correlation
    assert not _same_rows(
        _rows(synthetic_build, "taxonomy_fractions", "scope_kind = 'all'"),
        _rows(extended_build, "taxonomy_fractions", "scope_kind = 'all'"),
    )
    corr = extended_build.query(
        "SELECT n, pearson_r FROM benchmark_correlations "
        "WHERE benchmark = 'longbench_pro' AND length_scope = 'overall' AND metric = 'ap_drop'"
    )
    drops = [sm.expected_model_plasticity(s)["ap_drop"] for s in (MINISTRAL, QWEN, sm.EXTRA_MODEL)]
    lbp = [30.18, 31.26, 15.71]
    assert corr[0][0] == 3
    assert abs(corr[0][1] - sm.pearson(drops, lbp)) < 1e-11


# ------------------------------------------------------------------------------------------
# docs
# ------------------------------------------------------------------------------------------


@pytest.mark.slow  # dbt docs generate
def test_docs_generate_writes_a_static_page(synthetic_build, tmp_path):
    t0 = time.perf_counter()
    page = build_mod.docs_generate(
        synthetic_build.warehouse, target_dir=tmp_path / "target", log_sink=lambda m: None
    )
    assert page.name == "static_index.html" and page.exists()
    text = page.read_text(errors="ignore")
    assert "model_summary" in text and "model_metric_ci" in text
    assert time.perf_counter() - t0 < 300


# ------------------------------------------------------------------------------------------
# the real pipeline on the embedded sample
# ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_build_on_a_really_computed_warehouse(real_build):
    """ingest + compute on warehouse/sample/smollm2-135m, then every dbt test passes - including
    the cross-checks of dbt's head deciles and taxonomy against compute's own values."""
    assert real_build.result.success and not real_build.result.failed
    heads = real_build.notes["heads_computed"]
    row = real_build.dicts("SELECT * FROM model_summary")[0]
    assert row["model_id"] == "smollm2-135m" and row["family"] == "SmolLM2"
    assert (
        row["n_heads"]
        == row["n_heads_pca"]
        == row["n_heads_rotation"]
        == row["n_heads_plasticity"]
        == heads
    )
    assert 0 < row["ap_last_20pct"] < row["ap_first_20pct"] < 1
    assert 0 < row["abs_r_k_a"] <= 1
    profile = real_build.query("SELECT count(*) FROM head_metrics WHERE has_plasticity")[0][0]
    assert profile == heads
    bins = dict(
        real_build.query("SELECT label, n_heads FROM plasticity_length_bins WHERE bin_set = 'lbp'")
    )
    assert bins["0-8K"] == heads and bins["8K-16K"] == 0  # 8K context: one LBP bin
    assert real_build.query("SELECT count(*) FROM published_comparison")[0][0] == 0
