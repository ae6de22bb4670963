"""Write computed heads: every table of every analysis they ran, in batches.

Results reach the parent as Arrow tables (:func:`head_tables`, built in the worker with the head
key and config_id already in place), so writing is concatenation plus one ``INSERT`` per table.

A batch holds several units of work (the heads sharing a k file); it is written in one
transaction with its head_runs rows and the current_config update, each head whole, so an
interrupted run (Ctrl-C, kill -9) never leaves part of a head and the next run resumes.
:class:`BatchWriter` opens the warehouse for each batch and closes it afterwards, so other
processes (``qkwh sql``, ``qkwh report``, ``duckdb -readonly``) can read between batches; it
waits when one of them holds the file.

Rows are keyed by (head, config_id): a parameter set never replaces another set's rows.  Old
rows of the same set are deleted only for heads that had them before (a fresh run deletes
nothing).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from qkwh import store
from qkwh.analyses import registry
from qkwh.errors import InputError, QkwhError, is_interrupt
from qkwh.params import RunConfig
from qkwh.paths import SCHEMA_SQL

if TYPE_CHECKING:  # the results' module is imported when results arrive (unpickling them)
    from qkwh.compute.work import HeadOutcome


def __getattr__(name: str):
    """``ANALYSIS_TABLES``: analysis -> its output tables, read from the analysis registry."""
    if name == "ANALYSIS_TABLES":
        return registry.analysis_tables()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


HeadSet = tuple[str, int, int, str, str]  # (model_id, layer, q_head, analysis, config_id)

_RUN_COLUMNS = (
    "model_id",
    "layer",
    "q_head",
    "analysis",
    "config_id",
    "input_fingerprint",
    "computed_at",
    "seconds",
)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def record_configs(
    con: duckdb.DuckDBPyConnection,
    config: RunConfig,
    config_ids: dict[str, str],
    code_version: str | Mapping[str, str],
    name: str | None = None,
) -> None:
    """Insert the run_config rows of this run (once per config_id), named ``name`` if given;
    ``code_version`` is one string or one per analysis.

    A name labels one parameter set per analysis: raises :class:`InputError` when ``name``
    already labels another set of the same analysis, or when this set already has another name.
    """
    for analysis, cid in config_ids.items():
        if name is not None:
            other = con.execute(
                "SELECT config_id FROM run_config WHERE name = ? AND analysis = ? AND config_id <> ?",
                [name, analysis, cid],
            ).fetchone()
            if other:
                raise InputError(
                    f"the name {name!r} already labels another {analysis} parameter set "
                    f"({other[0]}): choose another name, or `qkwh runs drop {name}` first"
                )
        row = con.execute("SELECT name FROM run_config WHERE config_id = ?", [cid]).fetchone()
        cv = code_version if isinstance(code_version, str) else code_version[analysis]
        if row is None:
            con.execute(
                "INSERT INTO run_config (config_id, analysis, code_version, params_json, created_at, name) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [
                    cid,
                    analysis,
                    cv,
                    json.dumps(config.analysis_params(analysis), sort_keys=True),
                    _now(),
                    name,
                ],
            )
        elif name is not None and row[0] != name:
            if row[0] is not None:
                raise InputError(
                    f"these {analysis} parameters are already the set {row[0]!r} ({cid}): "
                    f"compute with --name {row[0]} or without --name"
                )
            con.execute("UPDATE run_config SET name = ? WHERE config_id = ?", [name, cid])


# ---------------------------------------------------------------------------------------------
# parent side
# ---------------------------------------------------------------------------------------------


def write_heads(
    con: duckdb.DuckDBPyConnection,
    outcomes: Iterable[HeadOutcome],
    config_ids: dict[str, str],
    previous: set[HeadSet],
    *,
    make_current: bool = True,
    made_current: set[tuple[str, str]] | None = None,
) -> int:
    """Write ``outcomes`` (whole heads) in one transaction: their rows, head_runs, current_config.

    ``previous`` holds the (head, analysis, config_id) that already have rows: those rows are
    deleted first (recompute of the same set); it is updated with what was written.  Other
    parameter sets are never touched.  ``make_current``: the set written becomes the one the
    marts report for each (model, analysis); else it becomes current only where none is.
    ``made_current`` (kept across the batches of a run) holds the (model, analysis) already
    settled by an earlier batch: they are left alone, so a `qkwh runs use` during the run holds.
    Returns the number of heads written.
    """
    outcomes = [o for o in outcomes if not o.error and o.analyses]
    if not outcomes:
        return 0
    import pyarrow as pa  # here, not at the top: a compute with nothing to do needs none

    parts: dict[str, list[pa.Table]] = {}
    runs: dict[str, list] = {k: [] for k in _RUN_COLUMNS}
    now = _now()
    written: list[HeadSet] = []
    for o in outcomes:
        u = o.unit
        for name, t in (o.tables or {}).items():
            parts.setdefault(name, []).append(t)
        fp = u.input_fingerprint()
        for analysis in o.analyses:
            written.append((*u.key, analysis, config_ids[analysis]))
            for col, value in zip(
                _RUN_COLUMNS,
                (u.model_id, u.layer, u.q_head, analysis, config_ids[analysis], fp, now, o.seconds),
            ):
                runs[col].append(value)
    unknown = set(parts) - {t for ts in registry.analysis_tables().values() for t in ts}
    if unknown:
        raise ValueError(f"results hold unknown table(s) {sorted(unknown)}")
    stale = [w for w in written if w in previous]
    with store.transaction(con):
        if stale:
            _delete_sets(con, stale)
        for name in [t for ts in registry.analysis_tables().values() for t in ts]:
            if name in parts:
                tables = parts[name]
                data = (
                    tables[0]
                    if len(tables) == 1
                    else pa.concat_tables(tables, promote_options="permissive").combine_chunks()
                )
                store.insert_columns(con, name, data)
        store.insert_head_runs(con, runs, now)  # not through Arrow: see there
        # the marts report each (model, analysis) under exactly one parameter set
        current = sorted(
            {(o.unit.model_id, a) for o in outcomes for a in o.analyses} - (made_current or set())
        )
        if current:
            sql = store.load_sql(
                "set_current_config" if make_current else "set_current_config_if_missing"
            )
            con.executemany(sql, [[m, a, config_ids[a], now] for m, a in current])
        _test_hold_commit(con)
    previous.update(written)
    if made_current is not None:
        made_current.update(current)
    return len(outcomes)


@contextlib.contextmanager
def warehouse_errors(warehouse: str | Path | None) -> Iterator[None]:
    """Raise what the user should see for an error of compute's reads and writes of
    ``warehouse``: KeyboardInterrupt for a Ctrl-C that DuckDB caught (it raises RuntimeError);
    one line (:class:`QkwhError`, exit 1) naming the file and the problem when the file system
    refuses a write (a full disk, a read-only folder: the transaction is rolled back, heads
    written before are kept) or a table no longer has what compute writes (altered by hand);
    any other error (a bug) as it is."""
    try:
        yield
    except Exception as exc:
        if is_interrupt(exc):
            raise KeyboardInterrupt from None
        problem = _write_problem(exc)
        if problem is None:
            raise
        raise QkwhError(
            f"cannot write warehouse {store.resolve_warehouse(warehouse)}: {problem}; heads written "
            "before are kept (each whole): fix this and run `qkwh compute` again to resume"
        ) from None


_DUCKDB_PREFIXES = (
    "TransactionContext Error: Failed to commit: ",
    "IO Error: ",
    "Permission Error: ",
    "FATAL Error: ",
    "Binder Error: ",
    "Catalog Error: ",
)


def _write_problem(exc: BaseException) -> str | None:
    """The first line of a file system or table-shape error, None for any other error."""
    if isinstance(exc, OSError):
        return f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc)
    io = (duckdb.IOException, duckdb.PermissionException, duckdb.FatalException)
    commit = isinstance(exc, duckdb.TransactionException) and "Failed to commit" in str(exc)
    shape = isinstance(exc, (duckdb.BinderException, duckdb.CatalogException))
    if not (isinstance(exc, io) or commit or shape):
        return None
    text = str(exc).strip().splitlines()[0]
    for prefix in _DUCKDB_PREFIXES:
        text = text.removeprefix(prefix)
    return f"{text} (a table altered outside qkwh?)" if shape else text


def check_result_tables(
    con: duckdb.DuckDBPyConnection, warehouse: str | Path | None, analyses: Iterable[str]
) -> None:
    """Raise :class:`QkwhError` (one line, before anything is computed or written) when a table
    compute writes for ``analyses`` lacks a column of the schema, e.g. dropped by hand."""
    tables: dict[str, str | None] = {t: a for a in analyses for t in registry.analysis_tables()[a]}
    tables.update({"head_runs": None, "current_config": None})
    expected = {t: _expected_columns(t) for t in tables}
    have = _columns(con)
    for table, analysis in tables.items():
        missing = [
            (c, t) for c, t in expected.get(table, {}).items() if c not in have.get(table, {})
        ]
        if missing:
            redo = (
                f"drop the table (`DROP TABLE {table}`; it is created again) and run "
                f"`qkwh compute -a {analysis} --force`"
                if analysis
                else "restore the warehouse from a copy"
            )
            raise QkwhError(
                f"warehouse {store.resolve_warehouse(warehouse)}: table {table} has no column "
                f"{missing[0][0]} ({missing[0][1]}), which compute writes (altered outside qkwh?); "
                f"nothing was written: {redo}"
            )


def _expected_columns(table: str) -> dict[str, str]:
    """column -> type of ``table`` as the schema makes it: its CREATE TABLE statement, then the
    columns warehouse/schema.sql adds to it with ``ALTER TABLE ... ADD COLUMN IF NOT EXISTS``."""
    cols = ddl_columns(store._schema_ddl(table))
    for name, col_type in re.findall(
        rf"^ALTER TABLE {re.escape(table)} ADD COLUMN IF NOT EXISTS (\w+) ([^;]+);",
        SCHEMA_SQL.read_text(),
        re.M,
    ):
        cols.setdefault(name, re.split(r"\s+DEFAULT\b", col_type.strip(), flags=re.I)[0].strip())
    return cols


def ddl_columns(ddl: str) -> dict[str, str]:
    """column -> type of a ``CREATE TABLE name (...)`` statement (comments, constraints and NOT
    NULL left out), read from its text: what a new table of that DDL would have, without
    creating one (a scratch DuckDB with the whole schema cost tens of milliseconds per compute)."""
    body = re.sub(r"--[^\n]*", "", ddl)
    body = body[body.index("(") + 1 : body.rindex(")")]
    items, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        depth += ch == "(" or -(ch == ")")
        if ch == "," and depth == 0:
            items.append(body[start:i])
            start = i + 1
    items.append(body[start:])
    out: dict[str, str] = {}
    for item in (x.strip() for x in items):
        if not item or re.match(r"(PRIMARY KEY|UNIQUE|CHECK|FOREIGN KEY)\b", item, re.I):
            continue
        name, _, rest = item.partition(" ")
        col_type = re.split(
            r"\s+(?:NOT NULL|NULL|DEFAULT|PRIMARY KEY)\b", rest.strip(), flags=re.I
        )[0]
        out[name.strip('"')] = col_type.strip()
    return out


def _columns(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, str]]:
    rows = con.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = 'main' AND table_catalog = current_database()"
    ).fetchall()
    out: dict[str, dict[str, str]] = {}
    for table, column, ctype in rows:
        out.setdefault(table, {})[column] = ctype
    return out


_held = False  # whether _test_hold_commit has held a commit in this process


def _test_hold_commit(con: duckdb.DuckDBPyConnection) -> None:
    """Test-only hook (tests/compute/test_faults.py), off unless ``$QKWH_TEST_HOLD_COMMIT`` names a
    file: the first batch's transaction, complete but not yet committed, creates that file and runs
    short DuckDB statements one after another until the process is interrupted (the file is
    removed when it ends), so a test can press Ctrl-C while DuckDB works inside the commit.  A
    Ctrl-C lands in a statement (DuckDB stops it) or between two (Python raises KeyboardInterrupt)."""
    global _held
    marker = os.environ.get("QKWH_TEST_HOLD_COMMIT")
    if marker and not _held:  # one DuckDB thread: the one that checks for Ctrl-C runs the statement
        # once per process: after the Ctrl-C the writer's close() writes the heads still queued,
        # and a second hold there would wait for a second Ctrl-C the test does not send
        _held = True
        con.execute("SET enable_progress_bar = false; SET threads TO 1")
        try:
            Path(marker).touch()
            while True:
                con.execute("SELECT count(*) FROM range(20000000)")
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(marker)


def _delete_sets(con: duckdb.DuckDBPyConnection, keys: list[HeadSet]) -> None:
    """Delete the rows of these (head, analysis, config_id) from their tables and head_runs."""
    import pyarrow as pa

    by_analysis: dict[str, list[HeadSet]] = {}
    for k in keys:
        by_analysis.setdefault(k[3], []).append(k)
    for analysis, ks in by_analysis.items():
        rel = pa.table(
            {
                "model_id": [k[0] for k in ks],
                "layer": [k[1] for k in ks],
                "q_head": [k[2] for k in ks],
                "config_id": [k[4] for k in ks],
            }
        )
        con.register("_qkwh_stale", rel)
        try:
            for table in (*registry.get(analysis).table_names, "head_runs"):
                extra = (
                    f" AND t.analysis = {store.quote_literal(analysis)}"
                    if table == "head_runs"
                    else ""
                )
                con.execute(
                    f"DELETE FROM {store.quote_ident(table)} AS t USING _qkwh_stale AS s "
                    "WHERE t.model_id = s.model_id AND t.layer = s.layer AND t.q_head = s.q_head "
                    f"AND t.config_id = s.config_id{extra}"
                )
        finally:
            with contextlib.suppress(
                duckdb.Error
            ):  # in a failed transaction: report the DELETE's error
                con.unregister("_qkwh_stale")


class BatchWriter:
    """Collect finished heads and write them in batches, holding the warehouse only while writing.

    A batch is written when it holds ``target`` heads or when ``max_seconds`` have passed since
    the last write.  The target starts at one head (so the first results are visible at once)
    and then is four times the last batch written, up to ``max_heads``: each batch costs a fixed
    ~0.05 s (open, one INSERT per table, commit, checkpoint on close), so large batches keep the
    cost per head low while readers still get the file between batches.  Each batch: open the warehouse (waiting
    up to ``lock_wait`` seconds while a reader holds it), check that the models were not
    re-ingested or removed since the run was planned (``catalog``: model_id -> source
    fingerprint), write one transaction (:func:`write_heads`), close.
    """

    def __init__(
        self,
        warehouse: str | Path | None,
        config_ids: dict[str, str],
        previous: set[HeadSet],
        *,
        catalog: dict[str, str],
        make_current: bool = True,
        max_heads: int = 1024,
        max_seconds: float = 30.0,
        lock_wait: float | None = None,
        threads: int | None = None,
    ):
        self.warehouse = warehouse
        self.config_ids = config_ids
        self.previous = previous
        self.catalog = catalog
        self.make_current = make_current
        self.max_heads = max(int(max_heads), 1)
        self.max_seconds = max_seconds
        self.lock_wait = store.lock_wait(600.0) if lock_wait is None else lock_wait
        self.threads = threads
        self.target = 1
        self.made_current: set[tuple[str, str]] = set()
        self.pending: list[HeadOutcome] = []
        self.n_written = 0
        self.n_batches = 0
        self.seconds = 0.0  # time spent writing (open, transaction, close)
        self._last = time.monotonic()

    def add(self, outcomes: Iterable[HeadOutcome]) -> None:
        """Queue finished heads (failed ones are ignored); write a batch when one is due."""
        self.pending += [o for o in outcomes if not o.error]
        n = len(self.pending)
        if n and (n >= self.target or time.monotonic() - self._last >= self.max_seconds):
            self.flush()

    def flush(self) -> int:
        """Write every queued head now (one transaction).  Returns the heads written."""
        batch, self.pending = (
            self.pending,
            [],
        )  # a failed write loses only this batch: recomputed next run
        if not batch:
            return 0
        t0 = time.perf_counter()
        try:
            with warehouse_errors(self.warehouse):
                con = store.connect(self.warehouse, wait=self.lock_wait, schema=False)
                try:
                    if self.threads:
                        con.execute(f"SET threads TO {int(self.threads)}")
                    self._check_catalog(con, {o.unit.model_id for o in batch})
                    n = write_heads(
                        con,
                        batch,
                        self.config_ids,
                        self.previous,
                        make_current=self.make_current,
                        made_current=self.made_current,
                    )
                except BaseException:
                    with contextlib.suppress(Exception):  # the first error is the one to report
                        con.close()
                    raise
                con.close()
        finally:
            self.seconds += time.perf_counter() - t0
            self._last = time.monotonic()
        self.n_written += n
        self.n_batches += 1
        self.target = min(max(self.target, len(batch)) * 4, self.max_heads)
        return n

    def _check_catalog(self, con: duckdb.DuckDBPyConnection, models: set[str]) -> None:
        rows = dict(
            con.execute(
                "SELECT model_id, source_fingerprint FROM models WHERE list_contains(?, model_id)",
                [sorted(models)],
            ).fetchall()
        )
        changed = sorted(m for m in models if rows.get(m) != self.catalog.get(m))
        if changed:
            raise QkwhError(
                f"model {', '.join(changed)} was re-ingested or removed while compute ran; "
                "its latest results were not written: run `qkwh compute` again"
            )

    def close(self) -> None:
        """Write what is still queued (also after Ctrl-C: the heads received are whole)."""
        self.flush()
