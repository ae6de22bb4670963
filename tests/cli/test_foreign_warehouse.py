"""Commands check the warehouse before they write (issue 23, items 9 and 12).

A missing path is never created by a command that needs data, and a DuckDB file that is not a
qkwh warehouse (someone else's database) is refused with one line and exit 2, without a table
added to it; `qkwh status` on it no longer fails with a NoneType message.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from qkwh.cli import app
from tests.conftest import snapshot

runner = CliRunner()

COMMANDS = (
    ["status"],
    ["models"],
    ["findings"],
    ["runs"],
    ["runs", "list"],
    ["runs", "use", "d717"],
    ["runs", "drop", "d717", "--yes"],
    ["runs", "diff", "a", "b"],
    ["remove", "x", "--yes"],
    ["compute"],
    ["sql", "SELECT 1"],
    ["export", "models"],
    ["compare", "a", "b"],
    ["report"],
    ["build"],
    ["docs"],
)


def _names(db: Path) -> list[str]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables ORDER BY 1"
            ).fetchall()
        ]
    finally:
        con.close()


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    """Someone else's DuckDB database: one table, two rows."""
    db = tmp_path / "theirs.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE measurements (id INTEGER, value DOUBLE)")
    con.execute("INSERT INTO measurements VALUES (1, 0.5), (2, 1.5)")
    con.close()
    return db


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a))
def test_a_foreign_duckdb_file_is_refused_untouched(foreign: Path, tmp_path: Path, args: list[str]):
    before = snapshot(foreign)
    extra = ["-o", str(tmp_path / "report")] if args == ["report"] else []
    r = runner.invoke(app, [*args, *extra, "-w", str(foreign)])
    assert r.exit_code == 2, r.output
    assert f"{foreign} is not a qkwh warehouse" in r.stderr and "Traceback" not in r.output
    assert "NoneType" not in r.output
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert _names(foreign) == ["measurements"] and snapshot(foreign) == before
    assert not (tmp_path / "theirs.dbt").exists()


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a))
def test_a_missing_warehouse_is_not_created(tmp_path: Path, args: list[str]):
    missing = tmp_path / "absent.duckdb"
    extra = ["-o", str(tmp_path / "report")] if args == ["report"] else []
    r = runner.invoke(app, [*args, *extra, "-w", str(missing)])
    assert r.exit_code == 4, r.output
    assert f"no warehouse at {missing}" in r.stderr, r.stderr
    assert not missing.exists() and list(tmp_path.iterdir()) == []


def test_an_empty_duckdb_file_is_not_a_warehouse_to_read(tmp_path: Path):
    db = tmp_path / "empty.duckdb"
    duckdb.connect(str(db)).close()
    r = runner.invoke(app, ["status", "-w", str(db)])
    assert (
        r.exit_code == 2 and "is not a qkwh warehouse: it is an empty DuckDB database" in r.stderr
    )
