"""Compare the computed results of two warehouses, row by row and bit for bit.

    python bench/compare_results.py OLD.duckdb NEW.duckdb [--export DIR]

Every table of ``main`` that carries a ``config_id`` and a head key (every per-head result table
of every analysis, and ``head_runs``) is compared, plus the schema of every table (``DESCRIBE``).
The tables are found in the files themselves, so the script needs no qkwh import and works on
warehouses written by any version.

* A row's parameter set is identified by its ``run_config.analysis`` and ``params_json``, not by
  its ``config_id``: the config id hashes the code version, which changes with the source even
  when the numbers do not (reported, not counted as a difference).
* Rows are sorted by every column that is not a float or a list (the keys are among them).
* Values must be exactly equal: floats are compared by their bits (NaN positions, signed zeros
  and all), lists element by element.  ``head_runs.computed_at`` and ``seconds`` are skipped.

``--export DIR`` also writes each table of OLD, sorted as compared, to ``DIR/<table>.parquet``.
Exit status 0 when everything matches, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SKIP = {"head_runs": ("computed_at", "seconds")}
HEAD = ("model_id", "layer", "q_head")


def result_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    rows = con.execute(
        """SELECT table_name FROM information_schema.columns c
           JOIN information_schema.tables t USING (table_catalog, table_schema, table_name)
           WHERE c.table_schema = 'main' AND t.table_type = 'BASE TABLE'
           GROUP BY table_name
           HAVING bool_or(column_name = 'config_id') AND bool_or(column_name = 'q_head')
           ORDER BY 1"""
    ).fetchall()
    return [r[0] for r in rows]


def schemas(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple]]:
    rows = con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
        "AND table_type = 'BASE TABLE' ORDER BY 1"
    ).fetchall()
    return {t: [tuple(r) for r in con.execute(f'DESCRIBE "{t}"').fetchall()] for (t,) in rows}


def sorted_rows(con: duckdb.DuckDBPyConnection, table: str) -> pa.Table:
    cols = con.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = 'main' "
        "AND table_name = ? ORDER BY ordinal_position",
        [table],
    ).fetchall()
    keep = [(c, t) for c, t in cols if c not in SKIP.get(table, ()) and c != "config_id"]
    order = [
        c for c, t in keep if t.upper() not in ("DOUBLE", "FLOAT", "REAL") and not t.endswith("]")
    ]
    select = ", ".join(f'x."{c}"' for c, _ in keep)
    order_by = ", ".join(["rc.analysis", "rc.params_json", *(f'x."{c}"' for c in order)])
    analysis = "x.analysis" if table == "head_runs" else "rc.analysis"
    sql = (
        f'SELECT {analysis} AS _analysis, rc.params_json AS _params, {select} FROM "{table}" x '
        f"JOIN run_config rc USING (config_id) ORDER BY {order_by}"
    )
    return con.sql(sql).to_arrow_table()


def _bits(values: np.ndarray) -> np.ndarray:
    if values.dtype.kind == "f":
        return values.view(np.uint64 if values.itemsize == 8 else np.uint32)
    return values


def column_diff(a: pa.ChunkedArray, b: pa.ChunkedArray) -> int | None:
    """Index of the first row where the columns differ (None when identical)."""
    if a.type != b.type:
        return 0
    a, b = a.combine_chunks(), b.combine_chunks()
    if (
        pa.types.is_list(a.type)
        or pa.types.is_large_list(a.type)
        or pa.types.is_fixed_size_list(a.type)
    ):
        if a.is_null().to_pylist() != b.is_null().to_pylist():
            return _first(np.array(a.is_null()) != np.array(b.is_null()))
        for i, (x, y) in enumerate(zip(a, b)):
            if (
                x.is_valid
                and column_diff(pa.chunked_array([x.values]), pa.chunked_array([y.values]))
                is not None
            ):
                return i
        return None
    na, nb = np.array(a.is_null()), np.array(b.is_null())
    if (na != nb).any():
        return _first(na != nb)
    if pa.types.is_floating(a.type):
        xa = _bits(a.fill_null(0).to_numpy(zero_copy_only=False))
        xb = _bits(b.fill_null(0).to_numpy(zero_copy_only=False))
        return _first(xa != xb) if (xa != xb).any() else None
    la, lb = a.to_pylist(), b.to_pylist()
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return i
    return None


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def compare(old: Path, new: Path, export: Path | None = None) -> list[str]:
    """Differences between the results of ``old`` and ``new`` (empty when identical)."""
    problems: list[str] = []
    with (
        duckdb.connect(str(old), read_only=True) as a,
        duckdb.connect(str(new), read_only=True) as b,
    ):
        sa, sb = schemas(a), schemas(b)
        for t in sorted(set(sa) | set(sb)):
            if sa.get(t) != sb.get(t):
                problems.append(f"schema of {t}: {sa.get(t)} != {sb.get(t)}")
        ta, tb = result_tables(a), result_tables(b)
        if ta != tb:
            problems.append(f"result tables differ: {ta} != {tb}")
        codes = {
            c
            for con in (a, b)
            for (c,) in con.execute("SELECT DISTINCT code_version FROM run_config").fetchall()
        }
        if len(codes) > 1:
            print(
                f"note: code versions differ ({', '.join(sorted(codes))}), so config_ids may too; "
                "rows are matched by analysis and params_json"
            )
        for t in ta:
            if t not in tb:
                continue
            ra, rb = sorted_rows(a, t), sorted_rows(b, t)
            if export is not None:
                export.mkdir(parents=True, exist_ok=True)
                pq.write_table(ra, export / f"{t}.parquet")
            if ra.num_rows != rb.num_rows:
                problems.append(f"{t}: {ra.num_rows} rows != {rb.num_rows} rows")
                continue
            if ra.column_names != rb.column_names:
                problems.append(f"{t}: columns {ra.column_names} != {rb.column_names}")
                continue
            bad = []
            for name in ra.column_names:
                i = column_diff(ra.column(name), rb.column(name))
                if i is not None:
                    head = {k: ra.column(k)[i].as_py() for k in HEAD}
                    bad.append(
                        f"{name} (first at row {i}, {head}: {ra.column(name)[i].as_py()!r} != "
                        f"{rb.column(name)[i].as_py()!r})"
                    )
            if bad:
                problems.append(f"{t}: {'; '.join(bad)}")
            else:
                print(f"{t}: {ra.num_rows} rows identical")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--export", type=Path, help="write OLD's sorted tables to DIR/<table>.parquet")
    args = ap.parse_args(argv)
    problems = compare(args.old, args.new, args.export)
    for p in problems:
        print("DIFFERENT:", p)
    print("identical" if not problems else f"{len(problems)} difference(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
