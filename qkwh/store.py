"""The warehouse: one way to open it, its schema, transactions and catalog queries.

Path resolution: ``--warehouse``, then ``$QKWH_WAREHOUSE``, then ``./qkwh.duckdb`` in the working
directory (never a file inside the installed package).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb

from qkwh.errors import QkwhError, WarehouseLockedError
from qkwh.paths import DEFAULT_WAREHOUSE, SCHEMA_SQL, SQL_DIR

log = logging.getLogger("qkwh.store")

_LOCK_RE = re.compile(r"(Could not set lock|Conflicting lock)", re.IGNORECASE)
_PID_RE = re.compile(r"PID (\d+)")


def resolve_warehouse(path: str | os.PathLike[str] | None = None) -> Path:
    """The warehouse file (absolute): ``path`` if given, else ``$QKWH_WAREHOUSE``, else
    ``qkwh.duckdb`` in the working directory."""
    chosen = path or os.environ.get("QKWH_WAREHOUSE") or DEFAULT_WAREHOUSE
    return Path(chosen).expanduser().resolve()


#: Seconds a command waits for a warehouse another process holds before it gives up
#: (``$QKWH_LOCK_TIMEOUT`` overrides it).  `qkwh compute` holds the file only while it writes a
#: batch, so readers and other commands get in between its batches.
DEFAULT_LOCK_WAIT = 10.0


def lock_wait(default: float = DEFAULT_LOCK_WAIT) -> float:
    """Seconds to wait for a held warehouse: ``$QKWH_LOCK_TIMEOUT`` if set, else ``default``."""
    raw = os.environ.get("QKWH_LOCK_TIMEOUT")
    if raw:
        try:
            return max(float(raw), 0.0)
        except ValueError:
            raise QkwhError(f"QKWH_LOCK_TIMEOUT={raw!r} is not a number of seconds") from None
    return default


def connect(path: str | os.PathLike[str] | None = None, *, read_only: bool = False,
            wait: float | None = None, schema: bool = True) -> duckdb.DuckDBPyConnection:
    """Open the warehouse (creating it and its schema when writable).

    When another process holds the file (DuckDB lets one process write, or several read), the
    open is retried for ``wait`` seconds (default :func:`lock_wait`) before
    :class:`WarehouseLockedError` is raised with one line.  A writable open applies the schema
    and migrates tables created with older keys (:func:`migrate`) unless ``schema`` is False.
    """
    wh = resolve_warehouse(path)
    if read_only and not wh.exists():
        raise QkwhError(f"no warehouse at {wh}: run `qkwh ingest SOURCE` first, or pass --warehouse")
    if not read_only:
        wh.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + (lock_wait() if wait is None else wait)
    pause = 0.02
    while True:
        try:
            con = duckdb.connect(str(wh), read_only=read_only)
            break
        except duckdb.IOException as exc:  # the file lock of another process
            error = _lock_error(wh, exc, lock_wait() if wait is None else wait)
            if not isinstance(error, WarehouseLockedError) or time.monotonic() + pause > deadline:
                raise error from None
            time.sleep(pause)
            pause = min(pause * 1.5, 0.25)
    if not read_only and schema:
        try:
            con.execute(SCHEMA_SQL.read_text())
            migrate(con)
        except BaseException:
            con.close()
            raise
    _register_remote(con)
    return con


# ---------------------------------------------------------------------------------------------
# migration of warehouses created with older keys
# ---------------------------------------------------------------------------------------------


def _schema_ddl(table: str) -> str:
    """The ``CREATE TABLE`` statement of ``table`` in warehouse/schema.sql."""
    m = re.search(rf"CREATE TABLE IF NOT EXISTS {re.escape(table)} \((.*?)\n\);", SCHEMA_SQL.read_text(), re.S)
    if not m:  # pragma: no cover - every migrated table is in the schema
        raise QkwhError(f"schema.sql has no table {table}")
    return m.group(0)


def _primary_keys(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    rows = con.execute(
        "SELECT table_name, constraint_column_names FROM duckdb_constraints() "
        "WHERE constraint_type = 'PRIMARY KEY' AND schema_name = 'main' AND database_name = current_database()"
    ).fetchall()
    return {t: list(cols) for t, cols in rows}


def tables_to_migrate(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Per-head result tables (and head_runs) whose primary key lacks config_id: created by a qkwh
    that kept one parameter set per head."""
    keys = _primary_keys(con)
    return [t for t in COMPUTE_TABLES if t in keys and "config_id" not in keys[t]]


def migrate(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Give every per-head table and head_runs the key with config_id, in one transaction.

    Each such table is rebuilt from the schema and its rows copied (nothing is lost: the old key
    was stricter than the new one).  Returns the tables migrated (none on a current warehouse).
    """
    old = tables_to_migrate(con)
    if not old:
        return []
    with transaction(con):
        for table in old:
            new = f"{table}__qkwh_migrating"
            con.execute(_schema_ddl(table).replace(f"CREATE TABLE IF NOT EXISTS {table} (",
                                                   f"CREATE TABLE {quote_ident(new)} (", 1))
            have = {r[0] for r in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' "
                "AND table_name = ?", [table]).fetchall()}
            cols = [r[0] for r in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' "
                "AND table_name = ? ORDER BY ordinal_position", [new]).fetchall() if r[0] in have]
            names = ", ".join(quote_ident(c) for c in cols)
            con.execute(f"INSERT INTO {quote_ident(new)} ({names}) SELECT {names} FROM {quote_ident(table)}")
            con.execute(f"DROP TABLE {quote_ident(table)}")
            con.execute(f"ALTER TABLE {quote_ident(new)} RENAME TO {quote_ident(table)}")
    log.info("migrated %s to keys with config_id", ", ".join(old))
    return old


def _register_remote(con: duckdb.DuckDBPyConnection) -> None:
    """When files are cataloged by hf:// URI (``ingest --remote``), let DuckDB read them (the
    ``vectors`` view) through huggingface_hub's file system."""
    try:
        remote = con.execute("SELECT 1 FROM files WHERE path LIKE 'hf://%' LIMIT 1").fetchone()
    except duckdb.CatalogException:  # not a qkwh warehouse (yet)
        return
    if remote:
        from qkwh.sniffed.remote import register

        register(con)


def _lock_error(wh: Path, exc: Exception, waited: float = 0.0) -> Exception:
    text = str(exc)
    if _LOCK_RE.search(text):
        pid = _PID_RE.search(text)
        who = f" (process {pid.group(1)})" if pid else ""
        return WarehouseLockedError(
            f"warehouse {wh} is locked by another process{who}; close that process and retry "
            f"(waited {waited:g} s; $QKWH_LOCK_TIMEOUT sets how long)"
        )
    return QkwhError(f"cannot open warehouse {wh}: {text.splitlines()[0]}")


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """``BEGIN`` ... ``COMMIT``; ``ROLLBACK`` on any exception (including KeyboardInterrupt)."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


def load_sql(name: str) -> str:
    """Text of ``qkwh/sql/<name>.sql``."""
    return (SQL_DIR / f"{name}.sql").read_text()


def quote_literal(text: str) -> str:
    """A SQL string literal (single quotes doubled)."""
    return "'" + str(text).replace("'", "''") + "'"


def quote_ident(name: str) -> str:
    """A SQL identifier in double quotes (double quotes doubled)."""
    return '"' + str(name).replace('"', '""') + '"'


def table_names(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Tables and views of the ``main`` schema."""
    rows = con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' ORDER BY 1"
    ).fetchall()
    return [r[0] for r in rows]


def tables_with_column(con: duckdb.DuckDBPyConnection, column: str) -> list[str]:
    """Base tables of ``main`` that have ``column`` (views are left out: they hold no rows)."""
    rows = con.execute(
        """SELECT c.table_name FROM information_schema.columns c
           JOIN information_schema.tables t USING (table_catalog, table_schema, table_name)
           WHERE c.table_schema = 'main' AND c.column_name = ? AND t.table_type = 'BASE TABLE'
           ORDER BY 1""",
        [column],
    ).fetchall()
    return [r[0] for r in rows]


# Per-head result tables written by `qkwh compute` (spec §2) plus its bookkeeping.
COMPUTE_TABLES: tuple[str, ...] = (
    "pca_components", "pca_heads", "pca_axes",
    "rotation_heads", "rotation_pairs", "rotation_axes",
    "plasticity_heads", "plasticity_buckets", "plasticity_heatmap", "plasticity_components",
    "head_runs",
)
CATALOG_TABLES: tuple[str, ...] = ("models", "files", "heads", "ingest_findings")


def insert_columns(con: duckdb.DuckDBPyConnection, table: str, columns) -> int:
    """Insert rows given as an Arrow table or as columns (lists or numpy/arrow arrays), by
    column name."""
    import pyarrow as pa

    if table not in CATALOG_TABLES + COMPUTE_TABLES + ("run_config", "current_config", "mart_builds"):
        raise ValueError(f"not a qkwh table: {table!r}")
    data = columns if isinstance(columns, pa.Table) else pa.table({k: _as_arrow(v) for k, v in columns.items()})
    if data.num_rows == 0:
        return 0
    con.register("_qkwh_insert", data)
    try:
        con.execute(f"INSERT INTO {quote_ident(table)} BY NAME SELECT * FROM _qkwh_insert")
    finally:
        con.unregister("_qkwh_insert")
    return data.num_rows


def _as_arrow(values: object):
    import numpy as np
    import pyarrow as pa

    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values
    if isinstance(values, np.ndarray) and values.ndim == 2:  # rows of vectors -> list column
        flat = pa.array(np.ascontiguousarray(values, dtype=np.float32).ravel())
        return pa.FixedSizeListArray.from_arrays(flat, values.shape[1]).cast(pa.list_(pa.float32()))
    if isinstance(values, np.ndarray) and values.dtype == object:
        return pa.array(values.tolist())
    return pa.array(values)


def rebuild_vectors_view(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)create the ``vectors`` view over every cataloged file, reading parquet in place.

    Vectors are ``FLOAT[d]`` when every model has the same d, else ``FLOAT[]``.
    """
    models = con.execute(
        "SELECT model_id, max(d) FROM files GROUP BY model_id ORDER BY model_id"
    ).fetchall()
    if not models:
        body = load_sql("vectors_empty")
    else:
        dims = {d for _, d in models}
        parts = []
        for model_id, d in models:
            paths = [r[0] for r in con.execute(
                "SELECT path FROM files WHERE model_id = ? ORDER BY path", [model_id]).fetchall()]
            vtype = f"FLOAT[{d}]" if len(dims) == 1 else "FLOAT[]"
            parts.append(load_sql("vectors_model").format(
                paths="[" + ", ".join(quote_literal(p) for p in paths) + "]",
                model_id=quote_literal(model_id),
                vector_type=vtype,
            ))
        body = "\nUNION ALL\n".join(parts)
    con.execute("CREATE OR REPLACE VIEW vectors AS\n" + body)
    con.execute(load_sql("head_inputs_macro"))


def delete_model(con: duckdb.DuckDBPyConnection, model_id: str, *, tables: list[str]) -> dict[str, int]:
    """Delete a model's rows from ``tables``; returns the rows deleted per table."""
    return {table: con.execute(f"DELETE FROM {quote_ident(table)} WHERE model_id = ?", [model_id]).fetchone()[0]
            for table in tables}
