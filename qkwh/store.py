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

from qkwh.ablate.tables import (
    ABLATION_TABLE_NAMES,
    ablation_table_ddls,
    create_ablation_tables,
)
from qkwh.analyses import registry
from qkwh.analyses.registry import Table
from qkwh.errors import NotAWarehouseError, NotFoundError, QkwhError, WarehouseLockedError
from qkwh.paths import DEFAULT_WAREHOUSE, SCHEMA_SQL, SQL_DIR
from qkwh.sniffed.globs import escape_glob

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


def connect(
    path: str | os.PathLike[str] | None = None,
    *,
    read_only: bool = False,
    wait: float | None = None,
    schema: bool = True,
) -> duckdb.DuckDBPyConnection:
    """Open the warehouse (creating it and its schema when writable).

    When another process holds the file (DuckDB lets one process write, or several read), the
    open is retried for ``wait`` seconds (default :func:`lock_wait`) before
    :class:`WarehouseLockedError` is raised with one line.  A writable open applies the schema
    and migrates tables created with older keys (:func:`migrate`) unless ``schema`` is False.
    Every open but ``schema=False`` also brings the ``vectors`` views up to date with the files
    (:func:`refresh_vectors_view`), after refusing a DuckDB file that is not a qkwh warehouse
    (:class:`~qkwh.errors.NotAWarehouseError`) before anything is written to it.
    """
    wh = resolve_warehouse(path)
    if read_only and not wh.exists():
        raise NotFoundError(
            f"no warehouse at {wh}: run `qkwh ingest SOURCE` first, or pass --warehouse"
        )
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
    if schema:
        try:
            _check_is_warehouse(con, wh, read_only=read_only)
        except BaseException:
            con.close()
            raise
    if not read_only and schema:
        try:
            apply_schema(con)
        except BaseException:
            con.close()
            raise
    _register_remote(con)
    if schema:  # schema=False: the compute writer's per-batch open, which never reads vectors
        refresh_vectors_view(con, read_only=read_only)
    return con


def _schema_stamp() -> str:
    """What :func:`apply_schema` leaves in the comment of ``head_runs``: a hash of the schema
    (warehouse/schema.sql and the DDL of every registered analysis table)."""
    import hashlib

    h = hashlib.sha256(SCHEMA_SQL.read_bytes())
    for table in registry.tables():
        h.update(b"\0" + analysis_table_ddl(table).encode())
    for ddl in ablation_table_ddls():
        h.update(b"\0" + ddl.encode())
    return f"qkwh schema {h.hexdigest()[:16]}"


def _schema_tables() -> set[str]:
    """The tables the schema creates (warehouse/schema.sql, the analysis and ablation tables)."""
    sql = SCHEMA_SQL.read_text()
    return (
        set(re.findall(r"^CREATE TABLE IF NOT EXISTS (\w+)", sql, re.M))
        | set(registry.result_tables())
        | set(ABLATION_TABLE_NAMES)
    )


def apply_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create what is missing of the schema and migrate older tables (:func:`migrate`), unless
    the warehouse already has this very schema: every table of it, and ``head_runs`` stamped
    with its hash (:func:`_schema_stamp`) by an earlier open.  The check is one catalog query,
    where the DDL and the migration checks cost tens of milliseconds on every writable open."""
    stamp = _schema_stamp()
    have = dict(
        con.execute(
            "SELECT table_name, comment FROM duckdb_tables() WHERE database_name = "
            "current_database() AND schema_name = 'main'"
        ).fetchall()
    )
    if have.get("head_runs") == stamp and _schema_tables() <= have.keys():
        return
    con.execute(SCHEMA_SQL.read_text())
    create_analysis_tables(con)
    create_ablation_tables(con)
    migrate(con)
    con.execute(f"COMMENT ON TABLE head_runs IS {quote_literal(stamp)}")


#: tables every qkwh warehouse has (a DuckDB file without them is someone else's database)
WAREHOUSE_MARKERS = ("models", "files", "heads")


def _check_is_warehouse(con: duckdb.DuckDBPyConnection, wh: Path, *, read_only: bool) -> None:
    """Refuse a DuckDB file that is not a qkwh warehouse before anything is written to it: one
    with tables but not qkwh's catalog, or (read-only) an empty one.  An empty file opened for
    writing becomes a warehouse."""
    names = {
        r[0]
        for r in con.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_catalog = current_database()"
        ).fetchall()
    }
    if set(WAREHOUSE_MARKERS) <= names or (not names and not read_only):
        return
    what = (
        "an empty DuckDB database"
        if not names
        else "a DuckDB database without qkwh's tables (models, files, heads)"
    )
    raise NotAWarehouseError(
        f"{wh} is not a qkwh warehouse: it is {what}; nothing was written. Pass the "
        "warehouse with --warehouse (or $QKWH_WAREHOUSE), or `qkwh ingest SOURCE` into a new "
        "file",
        empty=not names,
    )


# ---------------------------------------------------------------------------------------------
# migration of warehouses created with older keys
# ---------------------------------------------------------------------------------------------


def _schema_ddl(table: str) -> str:
    """The ``CREATE TABLE IF NOT EXISTS`` statement of ``table``: generated from its declaration
    for an analysis table, else the one in warehouse/schema.sql."""
    if table in registry.result_tables():
        return analysis_table_ddl(registry.table(table))
    m = re.search(
        rf"CREATE TABLE IF NOT EXISTS {re.escape(table)} \((.*?)\n\);", SCHEMA_SQL.read_text(), re.S
    )
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
    """Tables created by an older qkwh: head_runs when its primary key lacks config_id (one
    parameter set per head), and the per-head result tables that still have a PRIMARY KEY index
    (their keys are now guaranteed by the writer and tested by dbt)."""
    keys = _primary_keys(con)
    return [
        t
        for t in compute_tables()
        if t in keys and (t != "head_runs" or "config_id" not in keys[t])
    ]


def migrate(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Bring the tables of :func:`tables_to_migrate` to the current schema, in one transaction.

    Each such table is rebuilt from the schema and its rows copied (nothing is lost: the old keys
    were stricter than the new ones).  Returns the tables migrated (none on a current warehouse).
    """
    old = tables_to_migrate(con)
    if not old:
        return []
    with transaction(con):
        for table in old:
            new = f"{table}__qkwh_migrating"
            con.execute(
                re.sub(
                    rf'^CREATE TABLE IF NOT EXISTS ("?){re.escape(table)}\1 \(',
                    f"CREATE TABLE {quote_ident(new)} (",
                    _schema_ddl(table),
                    count=1,
                    flags=re.M,
                )
            )
            have = {
                r[0]
                for r in con.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' "
                    "AND table_name = ?",
                    [table],
                ).fetchall()
            }
            cols = [
                r[0]
                for r in con.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' "
                    "AND table_name = ? ORDER BY ordinal_position",
                    [new],
                ).fetchall()
                if r[0] in have
            ]
            names = ", ".join(quote_ident(c) for c in cols)
            con.execute(
                f"INSERT INTO {quote_ident(new)} ({names}) SELECT {names} FROM {quote_ident(table)}"
            )
            con.execute(f"DROP TABLE {quote_ident(table)}")
            con.execute(f"ALTER TABLE {quote_ident(new)} RENAME TO {quote_ident(table)}")
    log.info("migrated %s to the current schema", ", ".join(old))
    return old


def _register_remote(con: duckdb.DuckDBPyConnection) -> None:
    """When files are cataloged by hf:// URI (``ingest --remote``), let DuckDB read them (the
    ``vectors`` view) through huggingface_hub's file system."""
    try:
        remote = con.execute("SELECT 1 FROM files WHERE path LIKE 'hf://%' LIMIT 1").fetchone()
    except duckdb.CatalogException:  # not a qkwh warehouse (yet)
        return
    if remote:
        from qkwh.sniffed.hubfs import register

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


CATALOG_TABLES: tuple[str, ...] = (
    "models",
    "files",
    "heads",
    "ingest_findings",
    "rope_frequencies",
)


def compute_tables() -> tuple[str, ...]:
    """The per-head result tables of every registered analysis (qkwh.analyses.registry), written
    by `qkwh compute`, plus its bookkeeping table head_runs."""
    return (*registry.result_tables(), "head_runs")


def __getattr__(name: str):
    """``COMPUTE_TABLES``: :func:`compute_tables`, read from the analysis registry when asked."""
    if name == "COMPUTE_TABLES":
        return compute_tables()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def analysis_table_ddl(table: Table) -> str:
    """The ``CREATE TABLE IF NOT EXISTS`` statement of an analysis table, from its declaration
    (``qkwh/sql/analysis_table.sql``): the head key, the declared columns (key columns NOT NULL)
    and ``config_id``."""
    return load_sql("analysis_table").format(
        table=quote_ident(table.name),
        columns=",\n    ".join(
            f"{quote_ident(c.name)} {c.type}{' NOT NULL' if c.name in table.key else ''}"
            for c in table.columns
        ),
        key="".join(f", {c}" for c in table.key),
    )


def create_analysis_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Create the result table of every registered analysis from its declaration; idempotent."""
    for table in registry.tables():
        con.execute(analysis_table_ddl(table))


def insert_columns(con: duckdb.DuckDBPyConnection, table: str, columns) -> int:
    """Insert rows given as an Arrow table or as columns (lists or numpy/arrow arrays), by
    column name."""
    import pyarrow as pa

    from qkwh.columns import as_arrow  # numpy and pyarrow: only where rows are written

    if table not in CATALOG_TABLES + compute_tables() + (
        "run_config",
        "current_config",
        "mart_builds",
    ):
        raise ValueError(f"not a qkwh table: {table!r}")
    data = (
        columns
        if isinstance(columns, pa.Table)
        else pa.table({k: as_arrow(v) for k, v in columns.items()})
    )
    if data.num_rows == 0:
        return 0
    con.register("_qkwh_insert", data)
    try:
        con.execute(f"INSERT INTO {quote_ident(table)} BY NAME SELECT * FROM _qkwh_insert")
    finally:
        with contextlib.suppress(
            duckdb.Error
        ):  # in a failed transaction: report the INSERT's error
            con.unregister("_qkwh_insert")
    return data.num_rows


def insert_head_runs(con: duckdb.DuckDBPyConnection, runs: dict[str, list], computed_at) -> int:
    """Insert head_runs rows given as one list per column (``computed_at``: one timestamp for
    all of them), by DuckDB from the Python values: converting them to Arrow first would import
    pandas (pyarrow does on its first conversion of Python or numpy values), ~0.4 s of the
    compute's own time while its workers run."""
    cols = ("model_id", "layer", "q_head", "analysis", "config_id", "input_fingerprint")
    con.execute(
        load_sql("insert_head_runs"), [runs[c] for c in cols] + [computed_at, runs["seconds"]]
    )
    return len(runs["model_id"])


VECTORS_VIEW_PREFIX = "vectors_"  # one view per model: vectors_<model_id>
_PRESENT = "qkwh vectors: files present"


def vectors_view_names(model_ids: list[str]) -> dict[str, str]:
    """The per-model view of each model's vectors: ``vectors_<model_id>`` (quote it in SQL).

    DuckDB identifiers ignore case, so ids that differ only in case (refused at ingest since,
    but a warehouse written by an older qkwh may hold them) would share one view: each of them
    gets ``vectors_<model_id>#<n>`` instead, n = 1, 2, ... in sorted order of the ids (``#``
    is never in a model id, so no other model's view can have that name).
    """
    from qkwh.ids import model_id_key

    groups: dict[str, list[str]] = {}
    for m in sorted(set(model_ids)):
        groups.setdefault(model_id_key(m), []).append(m)
    names = {}
    for ids in groups.values():
        for n, m in enumerate(ids, 1):
            names[m] = VECTORS_VIEW_PREFIX + m + (f"#{n}" if len(ids) > 1 else "")
    return names


def missing_vector_files(
    con: duckdb.DuckDBPyConnection, models: list[str] | None = None, kind: str | None = None
) -> dict[str, tuple[int, int, str]]:
    """``model_id -> (files missing, files cataloged, first missing path)`` for the models (default:
    all) with a cataloged local file (of ``kind`` 'q' or 'k', default both) that no longer exists.
    ``hf://`` files are never checked (that would be a network call on every connection)."""
    rows = con.execute(
        "SELECT model_id, path FROM files WHERE ($1 IS NULL OR list_contains($1, model_id)) "
        "AND ($2 IS NULL OR kind = $2) ORDER BY model_id, path",
        [models or None, kind],
    ).fetchall()
    total: dict[str, int] = {}
    gone: dict[str, list[str]] = {}
    for model_id, path in rows:
        total[model_id] = total.get(model_id, 0) + 1
        if not path.startswith("hf://") and not os.path.exists(path):
            gone.setdefault(model_id, []).append(path)
    return {m: (len(paths), total[m], paths[0]) for m, paths in gone.items()}


def missing_files_message(model_id: str, n_missing: int, n_files: int, example: str) -> str:
    """One line naming the model, a missing file and the two fixes."""
    return (
        f"the vectors of model {model_id!r} are unavailable: {n_missing} of {n_files} cataloged files "
        f"are missing (e.g. {example}); re-ingest it from its new place (`qkwh ingest NEW_FOLDER "
        f"--model-id {model_id}`) or drop it (`qkwh remove {model_id}`)"
    )


def _vectors_state(missing: tuple[int, int, str] | None) -> str:
    if missing is None:
        return _PRESENT
    n_missing, n_files, example = missing
    return f"qkwh vectors: {n_missing} of {n_files} files missing, e.g. {example}"


def rebuild_vectors_view(
    con: duckdb.DuckDBPyConnection,
    *,
    temporary: bool = False,
    missing: dict[str, tuple[int, int, str]] | None = None,
) -> None:
    """(Re)create the per-model views ``vectors_<model_id>`` (:func:`vectors_view_names`) and the
    ``vectors`` view over them, reading the parquet files in place.

    A model whose local files are missing (``missing``; default: checked now) gets a view with no
    data that fails with one line naming the model, a missing file and the fix when a query needs
    its rows; a query filtered on other models (``WHERE model_id = ...``) never touches it.
    Vectors are ``FLOAT[d]`` when every model has the same d, else ``FLOAT[]``.
    ``temporary``: create TEMP views that shadow the stored ones for this connection only (a
    read-only connection that finds the files changed since the views were written).
    Each stored per-model view records whether its files were present in its comment.
    """
    models = con.execute(
        "SELECT model_id, max(d) FROM files GROUP BY model_id ORDER BY model_id"
    ).fetchall()
    if missing is None:
        missing = missing_vector_files(con)
    kind = "TEMP VIEW" if temporary else "VIEW"
    dims = {d for _, d in models}
    names = vectors_view_names([m for m, _ in models])
    if not temporary:  # views of removed models, and names that changed (DuckDB ignores their case)
        for name in _stored_vectors_views(con):
            if name not in names.values():
                con.execute(f"DROP VIEW IF EXISTS {quote_ident(name)}")
    for model_id, d in models:
        vtype = f"FLOAT[{d}]" if len(dims) == 1 else "FLOAT[]"
        view = quote_ident(names[model_id])
        if model_id in missing:
            body = load_sql("vectors_missing").format(
                model_id=quote_literal(model_id),
                vector_type=vtype,
                message=quote_literal(missing_files_message(model_id, *missing[model_id])),
            )
        else:
            paths = [
                r[0]
                for r in con.execute(
                    "SELECT path FROM files WHERE model_id = ? ORDER BY path", [model_id]
                ).fetchall()
            ]
            body = load_sql("vectors_model").format(
                paths="[" + ", ".join(quote_literal(escape_glob(p)) for p in paths) + "]",
                model_id=quote_literal(model_id),
                vector_type=vtype,
            )
        con.execute(f"CREATE OR REPLACE {kind} {view} AS\n{body}")
        if not temporary:
            con.execute(
                f"COMMENT ON VIEW {view} IS {quote_literal(_vectors_state(missing.get(model_id)))}"
            )
    if models:
        body = "\nUNION ALL\n".join(f"SELECT * FROM {quote_ident(names[m])}" for m, _ in models)
    else:
        body = load_sql("vectors_empty")
    con.execute(f"CREATE OR REPLACE {kind} vectors AS\n{body}")
    if not temporary:
        con.execute(load_sql("head_inputs_macro"))


def _stored_vectors_views(con: duckdb.DuckDBPyConnection) -> dict[str, str | None]:
    """Stored (not temporary) per-model vectors views of this database, with their comments (the
    views qkwh wrote: their comment starts with ``qkwh vectors:``)."""
    rows = con.execute(
        "SELECT view_name, comment FROM duckdb_views() WHERE NOT temporary AND NOT internal "
        "AND database_name = current_database() AND schema_name = 'main' AND starts_with(view_name, ?) "
        "AND starts_with(comment, 'qkwh vectors:')",
        [VECTORS_VIEW_PREFIX],
    ).fetchall()
    return dict(rows)


def refresh_vectors_view(con: duckdb.DuckDBPyConnection, *, read_only: bool) -> None:
    """Make the ``vectors`` views match the files as they are now (called on every connection).

    Local files are checked for existence (``hf://`` files never are).  When a model's files went
    missing or came back since the views were written, the views are rewritten: stored ones on a
    writable connection, TEMP ones shadowing them for this connection on a read-only one.  Nothing
    is done when they match (the common case).
    """
    try:
        models = [
            r[0] for r in con.execute("SELECT DISTINCT model_id FROM files ORDER BY 1").fetchall()
        ]
    except duckdb.CatalogException:  # not a qkwh warehouse (yet)
        return
    missing = missing_vector_files(con)
    expected = {
        name: _vectors_state(missing.get(m)) for m, name in vectors_view_names(models).items()
    }
    stored = _stored_vectors_views(con)
    if stored == expected and (models or "vectors" in table_names(con)):
        return
    if (
        read_only
        and not missing
        and all(v == _PRESENT for v in stored.values())
        and stored.keys() <= expected.keys()
    ):
        # every file is there and no stored view says otherwise or has a name of the past (e.g. a
        # warehouse written before per-model views): the stored views work; the next writable
        # connection updates them
        return
    if read_only:
        rebuild_vectors_view(con, temporary=True, missing=missing)
    else:
        with transaction(con):
            rebuild_vectors_view(con, missing=missing)


def delete_model(
    con: duckdb.DuckDBPyConnection, model_id: str, *, tables: list[str]
) -> dict[str, int]:
    """Delete a model's rows from ``tables``; returns the rows deleted per table."""
    return {
        table: con.execute(
            f"DELETE FROM {quote_ident(table)} WHERE model_id = ?", [model_id]
        ).fetchone()[0]  # type: ignore[index]
        for table in tables
    }
