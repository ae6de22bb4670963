"""The analyses as DuckDB SQL functions: one Arrow-vectorised Python UDF per registered analysis.

>>> import duckdb, qkwh.udf
>>> con = duckdb.connect("qkwh.duckdb", read_only=True)
>>> qkwh.udf.register(con)
>>> con.sql("SELECT layer, q_head, qkwh_rotation(h).bias_strength FROM head_inputs('smollm2-135m') AS h")

``qkwh_<analysis>(head)`` takes one row of the table macro ``head_inputs(model_id)`` as a STRUCT
(:data:`HEAD_STRUCT`: the head key, its q and k rows in file order with their positions,
examples and buckets, the model's context length and bucket size, and the head's sliding
window) and returns a STRUCT: the columns of the analysis' one-row-per-head table
(``pca_heads``, ``rotation_heads``, ``plasticity_heads``), plus one list field per other output
table holding that table's rows for the head (e.g. ``components``, ``buckets``; the field names
are declared in :mod:`qkwh.analyses.registry`).  The head key and ``config_id`` are left out.

The functions build the head with the bulk path's builder
(:func:`qkwh.compute.work.build_head`, including the max_tokens_per_head cap) and run it with
the bulk path's dispatch (:func:`qkwh.compute.work.run_analyses`) under the run config given to
:func:`register` (default: the shipped ``configs/run.yaml``), so they return exactly the rows
``qkwh compute`` stores for the same head and parameters.  ``qkwh_rope(head)`` reads the RoPE
planes of the head's layer from the catalog table ``rope_frequencies`` of the connection (loaded
at :func:`register`); for a head whose model has no frequencies its lists are empty (no rows,
as ``qkwh compute`` stores none).
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

from qkwh.analyses import registry
from qkwh.analyses.registry import Analysis, Table
from qkwh.analyses.types import AnalysisResult
from qkwh.compute.frequencies import ROPE_ANALYSIS, load_rope_planes
from qkwh.params import RunConfig
from qkwh.reach_inputs import REACH_ANALYSIS, load_attention_facts

#: the argument of every analysis function: one row of ``head_inputs(model_id)``
HEAD_STRUCT = (
    "STRUCT(model_id VARCHAR, layer INTEGER, q_head INTEGER, k_head INTEGER, "
    "q FLOAT[][], t BIGINT[], q_example BIGINT[], q_bucket BIGINT[], "
    "k FLOAT[][], s BIGINT[], k_example BIGINT[], k_bucket BIGINT[], "
    "context_length INTEGER, bucket_size INTEGER, sliding_window INTEGER)"
)


def table_columns(tables: tuple[Table, ...]) -> dict[str, list[tuple[str, str]]]:
    """Result columns ``(name, SQL type)`` of ``tables`` (head key and config_id left out), as
    declared."""
    return {table.name: [(c.name, c.type) for c in table.columns] for table in tables}


def return_type(analysis: Analysis, columns: dict[str, list[tuple[str, str]]]) -> str:
    """The SQL STRUCT type that ``qkwh_<analysis>`` returns."""

    def struct(cols: list[tuple[str, str]]) -> str:
        return "STRUCT(" + ", ".join(f'"{n}" {t}' for n, t in cols) + ")"

    fields: list[tuple[str, str]] = []
    for table in analysis.tables:
        if table.per_head:
            fields += columns[table.name]
        else:
            fields.append((table.udf_field, struct(columns[table.name]) + "[]"))
    return struct(fields)


def _arrow_type(sql_type: str) -> pa.DataType:
    """The Arrow type DuckDB exchanges for ``sql_type``."""
    con = duckdb.connect()
    try:
        return con.sql(f"SELECT NULL::{sql_type} AS x").to_arrow_table().schema.field("x").type
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------
# Arrow in: one head per row
# ---------------------------------------------------------------------------------------------


def _matrix(vectors: pa.Array) -> np.ndarray:
    """(n, d) float32 from one row's list of vectors."""
    n = len(vectors)
    flat = np.asarray(vectors.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
    return flat.reshape(n, -1) if n else np.empty((0, 0), dtype=np.float32)


def _ints(values: pa.Array) -> np.ndarray:
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.int64)


def _head(row: dict[str, pa.Scalar], config: RunConfig, rope=None, attention=None):
    """The :class:`HeadData` of one ``head_inputs`` row, or None when it has no q or no k rows.
    ``rope``: (model_id, layer) -> RoPE planes (:func:`qkwh.compute.frequencies.load_rope_planes`)."""
    from qkwh.compute.work import build_head

    if not row["q"].is_valid or not row["k"].is_valid:
        return None
    q = (
        _matrix(row["q"].values),
        _ints(row["t"].values),
        _ints(row["q_example"].values),
        _ints(row["q_bucket"].values),
    )
    k = (
        _matrix(row["k"].values),
        _ints(row["s"].values),
        _ints(row["k_example"].values),
        _ints(row["k_bucket"].values),
    )
    layer, q_head = row["layer"].as_py(), row["q_head"].as_py()
    model_id = row["model_id"].as_py()
    return build_head(
        q,
        k,
        context_length=row["context_length"].as_py(),
        bucket_size=row["bucket_size"].as_py(),
        sliding_window=row["sliding_window"].as_py(),
        layer=layer,
        q_head=q_head,
        config=config,
        label=f"{model_id} L{layer}H{q_head}",
        rope=(rope or {}).get((model_id, layer)),
        attention=(attention or {}).get(model_id),
    )


# ---------------------------------------------------------------------------------------------
# Arrow out: one STRUCT per head
# ---------------------------------------------------------------------------------------------


def _to_arrow(values: np.ndarray | None, n: int, typ: pa.DataType) -> pa.Array:
    """``n`` values of one column as ``typ`` (NaN in an integer column becomes NULL)."""
    if values is None:
        return pa.nulls(n, type=typ)
    v = np.asarray(values)
    if v.ndim == 2:  # rows of vectors
        flat = pa.array(np.ascontiguousarray(v, dtype=np.float32).ravel())
        return pa.FixedSizeListArray.from_arrays(flat, v.shape[1]).cast(typ)
    if v.dtype == object:
        return pa.array(v.tolist(), type=typ)
    if pa.types.is_integer(typ) and v.dtype.kind == "f":
        return pa.array(v, mask=np.isnan(v)).cast(typ)
    return pa.array(v).cast(typ)


def _rows_of(result: AnalysisResult | None, table: str) -> tuple[dict[str, np.ndarray], int]:
    cols = (result.tables.get(table) if result is not None else None) or {}
    return cols, (len(next(iter(cols.values()))) if cols else 0)


def _structs(
    results: list[AnalysisResult | None], analysis: Analysis, typ: pa.StructType
) -> pa.Array:
    """The function's result for a batch: one STRUCT per head, NULL where ``results`` is None."""
    if not results:
        return pa.array([], type=typ)
    children: list[pa.Array] = []
    by_name = {t.udf_field: t for t in analysis.tables if not t.per_head}
    per_head = next((t.name for t in analysis.tables if t.per_head), None)
    for f in typ:
        if f.name in by_name:  # a list of the rows of one table
            row_type = f.type.value_type
            parts = [_rows_of(r, by_name[f.name].name) for r in results]
            offsets = np.concatenate([[0], np.cumsum([n for _, n in parts])]).astype(np.int32)
            fields = [
                pa.concat_arrays([_to_arrow(cols.get(c.name), n, c.type) for cols, n in parts])
                for c in row_type
            ]
            values = pa.StructArray.from_arrays(fields, fields=list(row_type))
            children.append(pa.ListArray.from_arrays(pa.array(offsets), values).cast(f.type))
        else:  # a column of the one-row-per-head table
            parts = [_rows_of(r, per_head) for r in results]  # type: ignore[arg-type]
            children.append(
                pa.concat_arrays(
                    [
                        _to_arrow(cols.get(f.name), 1, f.type) if n else pa.nulls(1, f.type)
                        for cols, n in parts
                    ]
                )
            )
    mask = pa.array([r is None for r in results], type=pa.bool_())
    return pa.StructArray.from_arrays(children, fields=list(typ), mask=mask)


def _function(analysis: Analysis, config: RunConfig, typ: pa.StructType, rope=None, attention=None):
    def fn(heads: pa.Array | pa.ChunkedArray) -> pa.Array:
        from threadpoolctl import threadpool_limits

        from qkwh.compute.work import run_analyses

        if isinstance(heads, pa.ChunkedArray):
            heads = heads.combine_chunks()
        names = [f.name for f in heads.type]
        columns = {name: heads.field(name) for name in names}
        results: list[AnalysisResult | None] = []
        # BLAS on one thread, like the compute workers (LAPACK's last bits depend on it)
        with threadpool_limits(limits=1):
            for i in range(len(heads)):
                head = (
                    _head({name: columns[name][i] for name in names}, config, rope, attention)
                    if heads[i].is_valid
                    else None
                )
                if head is not None and (
                    (head.rope is None and analysis.name == ROPE_ANALYSIS)
                    or (head.attention is None and analysis.name == REACH_ANALYSIS)
                ):
                    # frequencies unknown: no rows, as compute leaves the model out
                    results.append(AnalysisResult())
                    continue
                results.append(
                    None if head is None else run_analyses(head, (analysis,), config)[analysis.name]
                )
        return _structs(results, analysis, typ)

    fn.__name__ = analysis.udf_name
    return fn


def register(con: duckdb.DuckDBPyConnection, config: RunConfig | None = None) -> None:
    """Add ``qkwh_<analysis>(head)`` for every registered analysis to ``con``."""
    if config is None:
        from qkwh.config import load_run_config

        config = load_run_config()
    config = config.resolved()
    config.validate()
    analyses = registry.analyses()
    columns = table_columns(tuple(t for a in analyses for t in a.tables))
    rope = load_rope_planes(con) if ROPE_ANALYSIS in registry.names() else {}
    attention = load_attention_facts(con) if REACH_ANALYSIS in registry.names() else {}
    for analysis in analyses:
        ret = return_type(analysis, columns)
        try:
            con.remove_function(analysis.udf_name)
        except Exception:  # not registered yet
            pass
        con.create_function(
            analysis.udf_name,
            _function(analysis, config, _arrow_type(ret), rope, attention),
            [HEAD_STRUCT],
            ret,  # type: ignore[call-overload]
            type="arrow",
            side_effects=False,
        )
