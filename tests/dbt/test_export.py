"""`qkwh export`: any table / view / mart to parquet or CSV, and the legacy per-head CSVs."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from qkwh.errors import InputError, NotFoundError
from qkwh.export import LEGACY_FILES, export, export_legacy


def _csv(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_export_marts_views_and_tables_to_parquet(synthetic_build, tmp_path):
    names = ["model_summary", "stg_plasticity_buckets", "rotation_axes", "intermediate.int_models"]
    paths = export(synthetic_build.warehouse, names, "parquet", tmp_path / "out")
    assert [p.name for p in paths] == [f"{n.split('.')[-1]}.parquet" for n in names]
    relations = [
        "main.model_summary",
        "staging.stg_plasticity_buckets",
        "main.rotation_axes",
        "intermediate.int_models",
    ]
    for name, path in zip(relations, paths):
        table = pq.read_table(path)
        want = synthetic_build.query(f"SELECT count(*) FROM {name}")[0][0]
        assert table.num_rows == want > 0
    ms = pq.read_table(paths[0]).to_pylist()
    db = synthetic_build.dicts("SELECT model_id, ap_drop FROM model_summary")
    assert {r["model_id"]: r["ap_drop"] for r in ms} == {r["model_id"]: r["ap_drop"] for r in db}


def test_export_csv_through_an_open_connection(synthetic_build, tmp_path):
    con = duckdb.connect(str(synthetic_build.warehouse), read_only=True)
    try:
        paths = export(con, ["head_metrics", "Head_Metrics"], "csv", tmp_path)
    finally:
        con.close()
    assert len(paths) == 1  # case-insensitive match, duplicates written once
    rows = _csv(paths[0])
    assert len(rows) == synthetic_build.query("SELECT count(*) FROM head_metrics")[0][0]
    assert {"ap_first_20pct", "ap_drop_empirical", "gauss_gap", "taxonomy", "label"} <= set(rows[0])


def test_unknown_names_are_reported_with_close_matches(synthetic_build, tmp_path):
    with pytest.raises(NotFoundError) as exc:
        export(synthetic_build.warehouse, ["model_sumary", "model_summary"], "csv", tmp_path / "x")
    assert "model_summary" in str(exc.value) and "model_sumary" in str(exc.value)
    assert not (tmp_path / "x").exists()  # nothing written when a name is unknown
    with pytest.raises(NotFoundError):
        export(synthetic_build.warehouse, ['models"; DROP TABLE models; --'], "csv", tmp_path)
    assert synthetic_build.query("SELECT count(*) FROM models")[0][0] > 0
    with pytest.raises(InputError):
        export(synthetic_build.warehouse, ["models"], "xlsx", tmp_path)  # type: ignore[arg-type]


def test_legacy_export_for_one_model(synthetic_build, tmp_path):
    paths = export_legacy(synthetic_build.warehouse, tmp_path, "qwen3-4b")
    assert sorted(p.name for p in paths) == sorted(LEGACY_FILES)
    metrics = _csv(tmp_path / "head_metrics.csv")
    assert len(metrics) == 4 and {r["model"] for r in metrics} == {"qwen3-4b"}
    assert {
        "layer",
        "q_head",
        "k_head",
        "n_q_tokens",
        "n_k_tokens",
        "d_model",
        "q_R2_pos",
        "ap_overall",
        "ap_first_20pct",
        "ap_drop",
    } <= set(metrics[0])
    buckets = _csv(tmp_path / "head_bucket_plasticity.csv")
    assert len(buckets) == 4 * 16
    for r in buckets:
        assert r["plasticity"] == r["ap_bucket"] and r["bucket"] == r["q_bucket"]
        assert "n_pairs" in r
    no_pairs = [
        r for r in buckets if r["layer"] == "10" and r["q_head"] == "3" and r["bucket"] == "0"
    ]
    assert no_pairs[0]["n_pairs"] == "0" and math.isnan(float(no_pairs[0]["plasticity"]))
    weights = _csv(tmp_path / "head_component_weights.csv")
    assert len(weights) == 4 * 8
    assert all(r["weight"] == r["component_weight"] for r in weights)
    rotated = _csv(tmp_path / "rotated.csv")
    assert len(rotated) == 4 and {
        "model",
        "layer",
        "head",
        "bias_strength",
        "separation_strength",
    } <= set(rotated[0])
    qk = _csv(tmp_path / "qk.csv")
    assert len(qk) == 4 * 10
    assert {
        "model",
        "layer",
        "head",
        "pc",
        "explained_variance_ratio",
        "r_q",
        "r_k",
        "taxonomy",
    } <= set(qk[0])


def test_legacy_export_for_every_model_and_unknown_model(synthetic_build, tmp_path):
    export_legacy(synthetic_build.warehouse, tmp_path, None)
    n_heads = synthetic_build.query("SELECT count(*) FROM plasticity_heads")[0][0]
    assert len(_csv(tmp_path / "head_metrics.csv")) == n_heads
    models = {r["model"] for r in _csv(tmp_path / "qk.csv")}
    assert models == {r[0] for r in synthetic_build.query("SELECT model_id FROM models")}
    with pytest.raises(NotFoundError) as exc:
        export_legacy(synthetic_build.warehouse, tmp_path / "y", "qwen3-4")
    assert "qwen3-4b" in str(exc.value)


def test_legacy_export_writes_only_the_current_parameter_set(synthetic_build, tmp_path):
    """Rows of a parameter set that is not current stay out of every legacy file; the filter is
    the dbt macro is_current_config, rendered into the legacy SQL (one definition)."""
    import shutil

    from qkwh.export import legacy_sql

    wh = tmp_path / "two_sets.duckdb"
    shutil.copy(synthetic_build.warehouse, wh)
    con = duckdb.connect(str(wh))
    try:
        for table in (
            "rotation_heads",
            "pca_components",
            "plasticity_buckets",
            "plasticity_components",
            "plasticity_heads",
        ):
            con.execute(
                f"INSERT INTO {table} SELECT * REPLACE ('not-current' AS config_id) "
                f"FROM {table} WHERE model_id = 'qwen3-4b'"
            )
    finally:
        con.close()
    export_legacy(wh, tmp_path / "out", "qwen3-4b")
    for name in LEGACY_FILES:
        rows = _csv(tmp_path / "out" / name)
        assert rows and {r["config_id"] for r in rows} != set(), name
        assert "not-current" not in {r["config_id"] for r in rows}, name
    for sql_name in LEGACY_FILES.values():
        raw = (Path(__file__).parents[2] / "qkwh" / "sql" / f"{sql_name}.sql").read_text()
        assert "{{ is_current_config(" in raw and "FROM current_config" not in raw, sql_name
        assert 'from main."current_config" as cc' in legacy_sql(sql_name), sql_name
