"""What `qkwh sql` may and may not do (issue 23, items 3 and 12; docs/guarantees.md).

One query statement runs; it reads, never writes a file (COPY, EXPORT, ATTACH refused), never
installs or loads an extension, never sees the CLI's Python variables.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import qkwh_cli as cli
from tests.conftest import small_synth_args, snapshot

MODEL = "synth-sql"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("sql-guarantees")
    data, db = tmp / MODEL, tmp / "wh.duckdb"
    for args in (
        small_synth_args(data),
        ["ingest", str(data), "--model-id", MODEL, "-w", str(db)],
    ):
        r = cli(*args)
        assert r.exit_code == 0, r.output
    return db


@pytest.fixture
def other(tmp_path: Path) -> Path:
    """Another file the query must not touch."""
    path = tmp_path / "other.duckdb"
    path.write_bytes(b"precious bytes\n" * 100)
    return path


def test_copy_to_a_file_is_refused_and_the_file_unchanged(
    warehouse: Path, other: Path, tmp_path: Path
):
    before = other.read_bytes()
    for query in (
        f"COPY (SELECT 'x') TO '{other}'",
        f"SELECT 1; COPY (SELECT 'x') TO '{other}'",
        f"COPY models TO '{tmp_path / 'new.csv'}'",
        f"EXPORT DATABASE '{tmp_path / 'dump'}'",
    ):
        r = cli("sql", query, "-w", str(warehouse))
        assert r.exit_code == 2, (query, r.output)
        assert "nothing was run" in r.stderr
    assert other.read_bytes() == before
    assert not (tmp_path / "new.csv").exists() and not (tmp_path / "dump").exists()


def test_several_statements_are_refused_none_runs(warehouse: Path):
    before = snapshot(warehouse)
    r = cli("sql", "SELECT 1 AS a; SELECT 2 AS b", "-w", str(warehouse))
    assert r.exit_code == 2 and "runs one statement" in r.stderr and "holds 2" in r.stderr
    assert r.stdout == ""
    r = cli("sql", "SELECT 42 AS answer;", "-w", str(warehouse))  # one statement, trailing ';'
    assert r.exit_code == 0 and "42" in r.stdout
    assert snapshot(warehouse) == before


def test_install_and_load_are_refused_without_a_network_attempt(warehouse: Path):
    """Refused before DuckDB runs them (DuckDB's own download would say "Failed to download")."""
    for query in ("INSTALL httpfs", "LOAD httpfs", "FORCE INSTALL httpfs"):
        r = cli("sql", query, "-w", str(warehouse))
        assert r.exit_code == 2 and "INSTALL/LOAD statement is refused" in r.stderr, (
            query,
            r.output,
        )
        assert "download" not in r.output.lower()
    # a query needing an extension neither fetches nor loads one (autoinstall and autoload off)
    r = cli(
        "sql", "SELECT * FROM read_parquet('https://example.com/x.parquet')", "-w", str(warehouse)
    )
    assert r.exit_code == 1 and "httpfs" in r.stderr and "download" not in r.stderr.lower()


def test_attach_for_writing_and_settings_are_refused(warehouse: Path, other: Path, tmp_path: Path):
    before = other.read_bytes()
    target = tmp_path / "new.duckdb"
    for query in (
        f"ATTACH '{other}' AS o",
        f"ATTACH '{target}' AS t",
        "SET enable_external_access = true",
        "PRAGMA enable_profiling",
        "CREATE TABLE t AS SELECT 1",
        "CALL checkpoint()",
        f"EXPLAIN ANALYZE COPY (SELECT 1) TO '{target}'",
    ):
        r = cli("sql", query, "-w", str(warehouse))
        assert r.exit_code == 2 and "only reads" in r.stderr, (query, r.output)
    assert other.read_bytes() == before and not target.exists()


def test_the_connection_is_locked(warehouse: Path):
    """Even a query cannot switch the guards back on (a SELECT cannot SET, and the settings are
    locked)."""
    r = cli(
        "sql",
        "SELECT current_setting('autoinstall_known_extensions') AS i, "
        "current_setting('autoload_known_extensions') AS l, "
        "current_setting('python_enable_replacements') AS p, "
        "current_setting('lock_configuration') AS c",
        "-w",
        str(warehouse),
        "-f",
        "csv",
    )
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == ["i,l,p,c", "False,False,False,True"]


def test_reading_local_files_is_allowed(warehouse: Path, tmp_path: Path):
    csv = tmp_path / "extra.csv"
    csv.write_text("model_id,score\nsynth-sql,0.5\n")
    r = cli(
        "sql",
        f"SELECT m.model_id, e.score FROM models m JOIN read_csv('{csv}') e USING (model_id)",
        "-w",
        str(warehouse),
        "-f",
        "csv",
    )
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == ["model_id,score", "synth-sql,0.5"]
    r = cli("sql", "SELECT count(*) AS n FROM vectors", "-w", str(warehouse), "-f", "csv")
    assert r.exit_code == 0 and r.stdout.splitlines()[1] != "0"


def test_python_variables_are_invisible(warehouse: Path):
    """`query`, `fmt`, `con` ... are locals of the CLI: a table name must never resolve to them."""
    for name in ("query", "fmt", "max_rows", "warehouse", "con"):
        r = cli("sql", f"SELECT * FROM {name}", "-w", str(warehouse))
        assert r.exit_code == 1 and f"Table with name {name} does not exist" in r.stderr, (
            name,
            r.output,
        )
