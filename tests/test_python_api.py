"""The Python entry point: `qkwh.open(path)` reads a warehouse read-only, lists its tables, and
returns tables, marts and query results as Arrow, numpy or pandas, without DuckDB's API.  (The
installed wheel's own environment is checked in tests/packaging/test_wheel.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

import qkwh
from qkwh import store
from qkwh.cli import app
from qkwh.errors import InputError, NotFoundError
from tests.conftest import small_synth_args

MODEL = "synth-py"


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("api")
    data, db = tmp / MODEL, tmp / "wh.duckdb"
    runner = CliRunner()
    for args in (
        small_synth_args(data),
        ["ingest", str(data), "--model-id", MODEL, "-w", str(db)],
        ["compute", "-w", str(db), "-a", "pca", "-j", "1"],
    ):
        r = runner.invoke(app, args)
        assert r.exit_code == 0, r.output + r.stderr
    return db


def test_open_lists_tables_and_reads_them_as_arrow_numpy_and_rows(db):
    wh = qkwh.open(db)
    names = wh.tables()
    assert {"models", "heads", "pca_heads"} <= set(names) and names == sorted(names)
    heads = wh.table("pca_heads")
    assert isinstance(heads.to_arrow(), pa.Table) and len(heads) == 4
    arrays = heads.to_numpy()
    assert set(arrays) == set(heads.columns) and isinstance(arrays["layer"], np.ndarray)
    assert sorted(arrays["layer"].tolist()) == [0, 0, 1, 1]
    rows = wh.sql(
        "SELECT model_id, count(*) AS n FROM heads WHERE layer >= ? GROUP BY 1", [0]
    ).to_pylist()
    assert rows == [{"model_id": MODEL, "n": 4}]


def test_open_is_read_only_and_holds_no_lock(db):
    wh = qkwh.open(db)
    wh.table("models")
    with pytest.raises(InputError, match="only reads"):
        wh.sql("CREATE TABLE x AS SELECT 1")
    con = store.connect(db)  # a writer gets in while `wh` is alive
    con.close()
    assert "x" not in wh.tables()


def test_default_path_and_clear_errors(db, tmp_path, monkeypatch):
    monkeypatch.setenv("QKWH_WAREHOUSE", str(db))
    assert qkwh.open().path == db
    with pytest.raises(NotFoundError, match="did you mean 'models'"):
        qkwh.open(db).table("modls")
    with pytest.raises(NotFoundError, match="no warehouse at"):
        qkwh.open(tmp_path / "absent.duckdb")
    assert not (tmp_path / "absent.duckdb").exists()


def test_pandas_when_present(db):
    pd = pytest.importorskip("pandas")
    frame = qkwh.open(db).table("heads").to_pandas()
    assert isinstance(frame, pd.DataFrame) and len(frame) == 4


def test_sql_has_the_same_statement_guard_as_qkwh_sql(db, tmp_path):
    """qkwh.open().sql() is documented read-only: COPY, EXPORT, SET, INSTALL, ATTACH and two
    statements are refused before anything runs (no file written), and a query cannot unlock
    the connection's configuration or reach Python variables."""
    wh = qkwh.open(db)
    out = tmp_path / "out.csv"
    refused = {
        f"COPY (SELECT * FROM models) TO '{out}'": "COPY",
        f"EXPORT DATABASE '{tmp_path / 'dump'}'": "EXPORT",
        "SET threads = 1": "SET",
        "INSTALL httpfs": "INSTALL/LOAD",
        "LOAD httpfs": "INSTALL/LOAD",
        f"ATTACH '{tmp_path / 'other.duckdb'}' AS o": "ATTACH",
        "PRAGMA enable_profiling": "PRAGMA",
        f"SELECT 1; COPY (SELECT 1) TO '{out}'": "runs one statement",
    }
    for query, name in refused.items():
        with pytest.raises(InputError, match=r"Warehouse\.sql") as info:
            wh.sql(query)
        assert name in str(info.value) and "nothing was run" in str(info.value), query
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    # the configuration is locked and Python variables stay invisible
    locked = wh.sql("SELECT current_setting('lock_configuration') AS v").to_pylist()
    assert locked == [{"v": True}]
    secret = pa.table({"x": [1]})  # noqa: F841  (a replacement scan would find it)
    with pytest.raises(Exception, match="secret"):
        wh.sql("SELECT * FROM secret")
    # reading still works, with parameters
    assert wh.sql("SELECT ? + 1 AS y", [1]).to_pylist() == [{"y": 2}]
