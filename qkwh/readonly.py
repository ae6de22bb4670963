"""What `qkwh sql` and ``qkwh.open().sql()`` may run: one query, on a connection that can read
but never write.  Both entry points go through :func:`check_query` and :func:`lock_down` (one
implementation of the policy).

The policy (docs/guarantees.md):

* exactly one statement, and it must be a query: ``SELECT``, ``WITH ... SELECT``, ``FROM ...``,
  ``VALUES``, ``DESCRIBE``, ``SHOW``, ``SUMMARIZE``.  Everything else (``COPY``, ``EXPORT``,
  ``ATTACH``/``DETACH``, ``INSTALL``/``LOAD``, ``SET``, ``PRAGMA``, ``CALL``, ``EXPLAIN``, DDL,
  DML) is refused before anything runs (:class:`InputError`, exit 2);
* the warehouse is opened read-only; local files may be read (``read_parquet``, ``read_csv``; the
  ``vectors`` views read the cataloged parquet files), no file is ever written;
* extensions are never installed or loaded on demand, and the configuration is locked, so a
  query cannot switch any of this back on;
* Python variables of the qkwh process are invisible (no replacement scans).
"""

from __future__ import annotations

import duckdb

from qkwh.errors import InputError, QkwhError

#: statement types `qkwh sql` runs (DuckDB parses DESCRIBE, SHOW, SUMMARIZE, VALUES and
#: FROM-first queries as SELECT)
ALLOWED = frozenset({duckdb.StatementType.SELECT})

#: settings applied to the connection before the query runs; ``lock_configuration`` comes last
LOCKDOWN = (
    ("python_enable_replacements", "false"),
    ("autoinstall_known_extensions", "false"),
    ("autoload_known_extensions", "false"),
    ("allow_community_extensions", "false"),
    ("lock_configuration", "true"),
)


def error_text(exc: Exception) -> str:
    """DuckDB's whole message: its later lines hold the hints a SQL user needs ("Did you mean
    "head_metrics"?", "Candidate bindings: ...", the LINE/caret of a syntax error).  Blank lines
    are dropped; the caret lines keep their indentation."""
    return "\n".join(line.rstrip() for line in str(exc).splitlines() if line.strip())


#: how the CLI's messages name the entry point (``qkwh.open().sql()`` passes its own name)
CLI = "`qkwh sql`"


def check_query(query: str, entry: str = CLI) -> None:
    """Raise unless ``query`` is exactly one read statement (see the module docstring).

    ``entry`` names the entry point in the messages (`qkwh sql`, ``Warehouse.sql``)."""
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:  # the whole message: its LINE/caret lines show where
        raise QkwhError(error_text(exc)) from None
    if not statements:
        example = '`qkwh sql "SELECT ..."`' if entry == CLI else f'{entry}("SELECT ...")'
        raise InputError(f"no SQL statement given: {example}")
    if len(statements) > 1:
        raise InputError(
            f"{entry} runs one statement; this holds {len(statements)}: run them one at a "
            "time (nothing was run)"
        )
    kind = statements[0].type
    if kind not in ALLOWED:
        name = {
            "LOAD": "INSTALL/LOAD",
            "MULTI": "multi-statement (e.g. a PIVOT without `IN (...)` values)",
        }.get(kind.name, kind.name)
        raise InputError(
            f"{entry} only reads: a {name} statement is refused (one SELECT, WITH, FROM, "
            "VALUES, DESCRIBE, SHOW or SUMMARIZE query; nothing was run)"
        )


def lock_down(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """Apply :data:`LOCKDOWN` to ``con`` (a read-only warehouse connection) and return it."""
    for name, value in LOCKDOWN:
        con.execute(f"SET {name} = {value}")
    return con
