"""A writable open applies the schema only when the warehouse does not have it already."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from qkwh import store


def _stamp(db: Path) -> str | None:
    con = duckdb.connect(str(db), read_only=True)
    try:
        row = con.execute(
            "SELECT comment FROM duckdb_tables() WHERE table_name = 'head_runs'"
        ).fetchone()
    finally:
        con.close()
    return None if row is None else row[0]


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    db = tmp_path / "w.duckdb"
    store.connect(db).close()
    return db


def test_a_new_warehouse_is_stamped_with_its_schema(warehouse: Path):
    assert _stamp(warehouse) == store._schema_stamp()
    assert store._schema_tables() >= {"models", "head_runs", "pca_heads", "plasticity_heatmap"}


def test_a_stamped_warehouse_runs_no_ddl(warehouse: Path, monkeypatch):
    def fail(*_a, **_k):
        raise AssertionError("the schema was applied again")

    monkeypatch.setattr(store, "create_analysis_tables", fail)
    monkeypatch.setattr(store, "migrate", fail)
    store.connect(warehouse).close()


def test_a_dropped_table_is_created_again(warehouse: Path):
    con = duckdb.connect(str(warehouse))
    con.execute("DROP TABLE pca_heads")
    con.close()
    con = store.connect(warehouse)
    try:
        assert "pca_heads" in store.table_names(con)
    finally:
        con.close()


def test_another_schema_stamp_applies_the_schema_and_migrates(warehouse: Path):
    con = duckdb.connect(str(warehouse))
    # an older qkwh's head_runs: its primary key lacked config_id, and no stamp
    con.execute("DROP TABLE head_runs")
    con.execute(
        "CREATE TABLE head_runs (model_id VARCHAR, layer INTEGER, q_head INTEGER, "
        "analysis VARCHAR, config_id VARCHAR, input_fingerprint VARCHAR, computed_at TIMESTAMP, "
        "seconds DOUBLE, PRIMARY KEY (model_id, layer, q_head, analysis))"
    )
    con.close()
    assert _stamp(warehouse) != store._schema_stamp()
    con = store.connect(warehouse)
    try:
        assert store.tables_to_migrate(con) == []
    finally:
        con.close()
    assert _stamp(warehouse) == store._schema_stamp()


def test_expected_columns_read_from_the_ddl_match_a_table_made_from_it():
    from qkwh.analyses import registry
    from qkwh.compute import writer
    from qkwh.paths import SCHEMA_SQL

    ref = duckdb.connect(":memory:")
    ref.execute(SCHEMA_SQL.read_text())
    store.create_analysis_tables(ref)
    made = writer._columns(ref)
    ref.close()
    tables = [*registry.result_tables(), "head_runs", "current_config", "models", "mart_builds"]
    for table in tables:
        assert writer._expected_columns(table) == made[table], table


def test_a_column_dropped_by_hand_is_named_before_anything_is_computed(warehouse: Path):
    from qkwh.compute import writer
    from qkwh.errors import QkwhError

    con = duckdb.connect(str(warehouse))
    con.execute("ALTER TABLE pca_heads DROP COLUMN config_id")
    with pytest.raises(QkwhError, match=r"table pca_heads has no column config_id \(VARCHAR\)"):
        writer.check_result_tables(con, warehouse, ("pca",))
    writer.check_result_tables(con, warehouse, ("rotation",))  # the other tables are whole
    con.close()
