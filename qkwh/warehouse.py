"""Read a warehouse from Python without knowing DuckDB: ``qkwh.open``.

    import qkwh

    wh = qkwh.open("qkwh.duckdb")          # read-only; default: $QKWH_WAREHOUSE, else ./qkwh.duckdb
    wh.tables()                            # ['files', 'head_metrics', ..., 'model_summary', ...]
    heads = wh.table("head_metrics")       # a Result
    heads.to_arrow()                       # pyarrow.Table
    heads.to_numpy()["r_k_a"]              # {column: numpy array}
    heads.to_pandas()                      # pandas.DataFrame (when pandas is installed)
    wh.sql("SELECT model_id, ap_overall FROM model_summary WHERE ap_overall > ?", [0.5]).to_pylist()

Every call opens the file read-only, reads the whole result and closes it again, so an open
:class:`Warehouse` never holds the file: `qkwh compute` and `qkwh build` can write in between.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class Result:
    """The rows of a table, mart or query, read into memory (an Arrow table underneath)."""

    def __init__(self, table: Any):
        self._table = table

    @property
    def columns(self) -> list[str]:
        return list(self._table.column_names)

    @property
    def num_rows(self) -> int:
        return self._table.num_rows

    def __len__(self) -> int:
        return self._table.num_rows

    def to_arrow(self):
        """The rows as a ``pyarrow.Table``."""
        return self._table

    def to_numpy(self) -> dict[str, Any]:
        """``{column: numpy array}``; NULLs become NaN in float columns and None in object columns
        (list columns, such as vectors, are object arrays of arrays)."""
        return {
            name: col.to_numpy(zero_copy_only=False)
            for name, col in zip(self._table.column_names, self._table.columns)
        }

    def to_pylist(self) -> list[dict[str, Any]]:
        """One ``{column: value}`` dict per row."""
        return self._table.to_pylist()

    def to_pandas(self):
        """A ``pandas.DataFrame`` (needs pandas, which qkwh does not install: pip install pandas)."""
        try:
            import pandas  # noqa: F401
        except ImportError:
            raise ImportError(
                "Result.to_pandas() needs pandas (pip install pandas); to_arrow() and "
                "to_numpy() work without it"
            ) from None
        return self._table.to_pandas()

    def __repr__(self) -> str:
        cols = ", ".join(self.columns[:8]) + (", ..." if len(self.columns) > 8 else "")
        return f"<Result: {self.num_rows:,} rows x {len(self.columns)} columns ({cols})>"


class Warehouse:
    """A qkwh warehouse file, read-only.  See the module docstring."""

    def __init__(self, path: str | os.PathLike[str] | None = None):
        from qkwh import store
        from qkwh.errors import NotFoundError

        self.path: Path = store.resolve_warehouse(path)
        if not self.path.is_file():
            raise NotFoundError(
                f"no warehouse at {self.path}: run `qkwh demo` or `qkwh ingest SOURCE` first"
            )

    def _read(self, fn):
        from qkwh import store

        con = store.connect(self.path, read_only=True)
        try:
            return fn(con)
        finally:
            con.close()

    def tables(self) -> list[str]:
        """Names of every table, view and mart, sorted (docs/tables.md describes them)."""
        from qkwh import store

        return self._read(store.table_names)

    def table(self, name: str) -> Result:
        """Every row of the table, view or mart ``name``."""
        from qkwh import store
        from qkwh.errors import NotFoundError, unknown_names

        def read(con):
            known = store.table_names(con)
            if name not in known:
                hint = "" if known else " (run `qkwh build` for the marts)"
                raise NotFoundError(
                    unknown_names("table", [name], known, f" in {self.path}") + hint
                )
            return con.sql(f"SELECT * FROM {store.quote_ident(name)}").to_arrow_table()

        return Result(self._read(read))

    def sql(self, query: str, params: Sequence[Any] | None = None) -> Result:
        """The rows of one read-only SQL query; ``?`` placeholders take ``params``.

        The same policy as `qkwh sql` (:mod:`qkwh.readonly`, docs/guarantees.md): exactly one
        query (SELECT, WITH, FROM, VALUES, DESCRIBE, SHOW, SUMMARIZE); COPY, EXPORT, ATTACH,
        INSTALL/LOAD, SET, PRAGMA, CALL and every other statement raise
        :class:`~qkwh.errors.InputError` before anything runs, and the connection's configuration
        is locked (no extension installed or loaded, no Python variable visible)."""
        from qkwh.readonly import check_query, lock_down

        check_query(query, "Warehouse.sql")

        def read(con):
            lock_down(con)
            rel = con.sql(query, params=list(params) if params else None)
            if rel is None:
                raise ValueError(
                    "Warehouse.sql runs queries that return rows (SELECT, SHOW, DESCRIBE)"
                )
            return rel.to_arrow_table()

        return Result(self._read(read))

    def __repr__(self) -> str:
        return f"<qkwh warehouse {self.path} (read-only)>"


def open(
    path: str | os.PathLike[str] | None = None,
) -> Warehouse:  # qkwh.warehouse.open, like io.open
    """Open a warehouse read-only: ``path``, else ``$QKWH_WAREHOUSE``, else ./qkwh.duckdb."""
    return Warehouse(path)
