"""Write warehouse tables, views and marts to files: ``qkwh export``.

``export()`` writes any relation of the warehouse (source tables and marts in ``main``, dbt's
staging views and intermediate tables in the schemas ``staging`` and ``intermediate``) to one
parquet or CSV file per name.  ``export_legacy()`` writes the per-head files
under the names and column names older tools read, so existing notebooks keep
working.  Both stream through DuckDB's COPY; the only identifiers placed in SQL are relation
names that were first looked up in ``information_schema``, and file paths travel as parameters.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import duckdb

from qkwh import store
from qkwh.errors import InputError, NotFoundError
from qkwh.paths import DBT_PROJECT_DIR

Format = Literal["parquet", "csv"]
ConOrPath = duckdb.DuckDBPyConnection | str | os.PathLike[str]

# Per-head legacy files: file name -> SQL file under qkwh/sql/ (each takes $1 = model id or NULL).
LEGACY_FILES: dict[str, str] = {
    "head_metrics.csv": "export_legacy_head_metrics",
    "head_bucket_plasticity.csv": "export_legacy_head_bucket_plasticity",
    "head_component_weights.csv": "export_legacy_head_component_weights",
    "rotated.csv": "export_legacy_rotated",
    "qk.csv": "export_legacy_qk",
}

_COPY_OPTIONS = {
    "parquet": "(FORMAT parquet, COMPRESSION zstd)",
    "csv": "(FORMAT csv, HEADER true)",
}


def export(con_or_path: ConOrPath, names: list[str], fmt: Format, out: Path) -> list[Path]:
    """Write tables, views or marts to OUT, one file per NAME (NAME.parquet or NAME.csv).

    NAME is any table or view of the warehouse: a mart (model_summary, head_metrics, ...),
    a source table (plasticity_buckets, ...), or a staging view / intermediate table
    (stg_*, int_*, optionally written staging.stg_* / intermediate.int_*).  Unknown names are
    reported with the closest existing ones and nothing is written.  Returns the files written.
    """
    if fmt not in _COPY_OPTIONS:
        raise InputError(f"export format must be parquet or csv, not {fmt!r}")
    if not names:
        raise InputError("name at least one table, view or mart to export")
    with _connection(con_or_path) as con:
        relations = _resolve_names(con, names)
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for schema, name in relations:
            path = out / f"{name}.{fmt}"
            sql = f"COPY (SELECT * FROM {schema}.{store.quote_ident(name)}) TO $1 {_COPY_OPTIONS[fmt]}"
            con.execute(sql, [str(path)])
            written.append(path)
        return written


def export_legacy(con_or_path: ConOrPath, out: Path, model_id: str | None = None) -> list[Path]:
    """Write the per-head CSVs older tools read, under their old names, to OUT.

    head_metrics.csv (plasticity per head; n_q_tokens, n_k_tokens, d_model), head_bucket_
    plasticity.csv (per query bucket; `plasticity` = ap_bucket, `bucket` = q_bucket, n_pairs),
    head_component_weights.csv (`weight` = component_weight), rotated.csv (planar rotation per
    head) and qk.csv (combined PCA per head and component).  Every file starts with a `model`
    column; with --model only that model's rows are written, otherwise every model's.
    """
    with _connection(con_or_path) as con:
        if model_id is not None:
            known = [r[0] for r in con.execute("SELECT model_id FROM models ORDER BY 1").fetchall()]
            if model_id not in known:
                raise NotFoundError(_unknown_message("model", [model_id], known))
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for filename, sql_name in LEGACY_FILES.items():
            path = out / filename
            query = legacy_sql(sql_name).strip().rstrip(";")
            con.execute(f"COPY (\n{query}\n) TO $2 {_COPY_OPTIONS['csv']}", [model_id, str(path)])
            written.append(path)
        return written


def legacy_sql(sql_name: str) -> str:
    """The query of one legacy file: ``qkwh/sql/<sql_name>.sql`` rendered with the dbt macro
    ``is_current_config`` (``dbt_project/macros/current_config.sql``), so the rule "the parameter
    set the marts report" has one definition, shared with the dbt staging views."""
    import jinja2  # a dependency of dbt-core

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
    # in dbt, source('qkwh', t) is the warehouse table t of schema main
    env.globals["source"] = lambda _source, table: f"main.{store.quote_ident(table)}"
    macros = env.from_string((DBT_PROJECT_DIR / "macros" / "current_config.sql").read_text()).module
    return env.from_string(store.load_sql(sql_name)).render(
        is_current_config=macros.is_current_config  # type: ignore[attr-defined]
    )


# ------------------------------------------------------------------------------------------


@contextmanager
def _connection(con_or_path: ConOrPath) -> Iterator[duckdb.DuckDBPyConnection]:
    if isinstance(con_or_path, duckdb.DuckDBPyConnection):
        yield con_or_path
        return
    con = store.connect(con_or_path, read_only=True)
    try:
        yield con
    finally:
        con.close()


# dbt's own layers, exported by name too (a name of main wins)
_LAYER_SCHEMAS = ("staging", "intermediate")


def _resolve_names(con: duckdb.DuckDBPyConnection, names: list[str]) -> list[tuple[str, str]]:
    """Map requested names to (schema, relation) pairs: a relation of `main` (exact, else
    case-insensitive), else a staging view or intermediate table (bare or schema-qualified)."""
    available = store.table_names(con)
    layer = {
        f"{schema}.{name}": (schema, name)
        for schema, name in con.execute(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_catalog = current_database() AND table_schema IN (?, ?) ORDER BY 2",
            list(_LAYER_SCHEMAS),
        ).fetchall()
    }
    for schema, name in list(layer.values()):
        layer.setdefault(name, (schema, name))
    by_lower: dict[str, list[tuple[str, str]]] = {}
    for name in available:
        by_lower.setdefault(name.lower(), []).append(("main", name))
    for key, rel in layer.items():
        by_lower.setdefault(key.lower(), []).append(rel)
    resolved: list[tuple[str, str]] = []
    unknown: list[str] = []
    for raw in names:
        name = raw.strip()
        if name in available:
            hit = ("main", name)
        elif name in layer:
            hit = layer[name]
        elif len(set(by_lower.get(name.lower(), []))) == 1:
            hit = by_lower[name.lower()][0]
        else:
            unknown.append(raw)
            continue
        if hit not in resolved:
            resolved.append(hit)
    if unknown:
        raise NotFoundError(_unknown_message("table or mart", unknown, available, list(layer)))
    return resolved


def _unknown_message(
    kind: str, unknown: list[str], available: list[str], also: list[str] | None = None
) -> str:
    """``no <kind> named 'x' (did you mean a, b?)``, else every available name (none left out:
    the one line is the list).  ``also`` are further names a close match may come from (the
    staging views and intermediate tables)."""
    parts = []
    candidates = list(dict.fromkeys([*available, *(also or [])]))
    for name in unknown:
        close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.5)
        if not close:  # a name the user half remembers: a candidate that contains it, or it them
            low = name.lower()
            close = [c for c in candidates if low in c.lower() or c.lower() in low][:3]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        parts.append(f"{name!r}{hint}")
    plural = "s" if len(unknown) > 1 else ""
    tail = (
        ""
        if any("did you mean" in p for p in parts)
        else (f"; available: {', '.join(available)}" if available else "; the warehouse has none")
    )
    return f"no {kind}{plural} named {'; '.join(parts)}{tail}"
