"""The analyses as DuckDB SQL functions (Arrow-vectorised Python UDFs returning STRUCTs).

>>> import duckdb, qkwh.udf
>>> con = duckdb.connect("warehouse/qkwh.duckdb", read_only=True)
>>> qkwh.udf.register(con)
>>> con.sql("SELECT layer, q_head, qkwh_rotation(q, t, k, s, context_length, bucket_size).bias_strength "
...         "FROM head_inputs('smollm2-135m')")

Functions (one row = one head; q/k are lists of vectors, t/s their positions):

* ``qkwh_pca(q FLOAT[][], t INTEGER[], k FLOAT[][], s INTEGER[])`` -> the ``pca_heads`` columns
  plus ``components`` (a list of the ``pca_components`` rows);
* ``qkwh_rotation(q, t, k, s, context_length INTEGER, bucket_size INTEGER)`` -> ``rotation_heads``
  columns;
* ``qkwh_plasticity(q, t, q_example INTEGER[], k, s, k_example INTEGER[], context_length,
  bucket_size, layer INTEGER, q_head INTEGER)`` -> ``plasticity_heads`` columns plus ``buckets``
  (a list of the ``plasticity_buckets`` rows).  Buckets are ``position // bucket_size``;
  ``layer`` and ``q_head`` only seed the pair sampler (spec §2.3.5).

The functions run the same code as ``qkwh compute`` with the run config given to
:func:`register` (default: ``configs/run.yaml``), including the max_tokens_per_head cap, so
they return exactly what the bulk path stores for the same head.
"""

from __future__ import annotations

import functools

import duckdb
import numpy as np
import pyarrow as pa

from qkwh.analyses.types import HeadData
from qkwh.params import RunConfig

_KEY = {"model_id", "layer", "q_head", "k_head", "config_id"}


@functools.lru_cache(maxsize=1)
def _schema_types() -> dict[str, list[tuple[str, str]]]:
    """Column names and SQL types of the result tables, read from warehouse/schema.sql."""
    from qkwh.paths import SCHEMA_SQL

    con = duckdb.connect()
    try:
        con.execute(SCHEMA_SQL.read_text())
        out: dict[str, list[tuple[str, str]]] = {}
        for table in ("pca_heads", "pca_components", "rotation_heads", "plasticity_heads", "plasticity_buckets"):
            rows = con.execute("SELECT column_name, data_type FROM information_schema.columns "
                               "WHERE table_name = ? ORDER BY ordinal_position", [table]).fetchall()
            out[table] = [(n, t) for n, t in rows if n not in _KEY]
        return out
    finally:
        con.close()


def _struct_sql(cols: list[tuple[str, str]], extra: str = "") -> str:
    body = ", ".join(f'"{n}" {t}' for n, t in cols)
    return f"STRUCT({body}{', ' + extra if extra else ''})"


def _arrow_type(sql_type: str) -> pa.DataType:
    return {"DOUBLE": pa.float64(), "INTEGER": pa.int32(), "BIGINT": pa.int64(), "VARCHAR": pa.string(),
            "BOOLEAN": pa.bool_()}[sql_type]


def _struct_arrow(cols: list[tuple[str, str]]) -> pa.StructType:
    return pa.struct([(n, _arrow_type(t)) for n, t in cols])


def _row(cols: list[tuple[str, str]], table: dict[str, np.ndarray], i: int = 0) -> dict:
    out = {}
    for name, sql_type in cols:
        v = table.get(name)
        if v is None:
            out[name] = None
            continue
        x = v[i]
        if isinstance(x, np.generic):
            x = x.item()
        if isinstance(x, float) and sql_type in ("INTEGER", "BIGINT"):
            x = None if np.isnan(x) else int(x)
        out[name] = x
    return out


def _matrix(vectors: pa.Array) -> np.ndarray:
    """(n, d) float32 from one row's list of vectors."""
    n = len(vectors)
    flat = np.asarray(vectors.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
    return flat.reshape(n, -1) if n else np.empty((0, 0), dtype=np.float32)


def _ints(arr) -> np.ndarray:
    return np.asarray(arr.values.to_numpy(zero_copy_only=False) if hasattr(arr, "values") else arr, dtype=np.int64)


def _head(q, t, k, s, context_length, bucket_size, config: RunConfig, *, qe=None, ke=None,
          layer: int = 0, q_head: int = 0) -> HeadData:
    from qkwh.analyses.stats import cap_rows

    Q, K = _matrix(q.values), _matrix(k.values)
    T, S = _ints(t), _ints(s)
    QE = _ints(qe) if qe is not None else np.zeros_like(T)
    KE = _ints(ke) if ke is not None else np.zeros_like(S)
    iq = cap_rows(len(T), config.max_tokens_per_head, config.seed)
    ik = cap_rows(len(S), config.max_tokens_per_head, config.seed)
    if iq is not None:
        Q, T, QE = Q[iq], T[iq], QE[iq]
    if ik is not None:
        K, S, KE = K[ik], S[ik], KE[ik]
    m = int(bucket_size)
    return HeadData(q=Q, q_pos=T, q_example=QE, q_bucket=T // m, k=K, k_pos=S, k_example=KE, k_bucket=S // m,
                    context_length=int(context_length), bucket_size=m, layer=int(layer), q_head=int(q_head))


def _rows(*arrays: pa.ChunkedArray):
    """Iterate the UDF batch row by row, as pyarrow scalars."""
    chunks = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]
    for i in range(len(chunks[0])):
        yield [c[i] for c in chunks]


def _single_threaded(fn):
    """Run a UDF with BLAS on one thread, like the compute workers (bit-identical results)."""

    @functools.wraps(fn)
    def wrapper(*args):
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1):
            return fn(*args)

    return wrapper


def register(con: duckdb.DuckDBPyConnection, config: RunConfig | None = None) -> None:
    """Register qkwh_pca, qkwh_rotation and qkwh_plasticity on ``con``."""
    from qkwh.analyses import pca, plasticity, rotation

    if config is None:
        from qkwh.config import load_run_config

        config = load_run_config()
    types = _schema_types()
    comp_cols = [(n, t) for n, t in types["pca_components"]]
    bucket_cols = [(n, t) for n, t in types["plasticity_buckets"]]
    pca_cols, rot_cols, pl_cols = types["pca_heads"], types["rotation_heads"], types["plasticity_heads"]

    pca_type = pa.struct(list(_struct_arrow(pca_cols)) + [pa.field("components", pa.list_(_struct_arrow(comp_cols)))])
    rot_type = _struct_arrow(rot_cols)
    pl_type = pa.struct(list(_struct_arrow(pl_cols)) + [pa.field("buckets", pa.list_(_struct_arrow(bucket_cols)))])

    def pca_udf(q, t, k, s):
        out = []
        for qq, tt, kk, ss in _rows(q, t, k, s):
            if not qq.is_valid or not kk.is_valid:
                out.append(None)
                continue
            r = pca.analyse(_head(qq, tt, kk, ss, 1, 1, config), config.pca).tables
            row = _row(pca_cols, r["pca_heads"])
            n = len(next(iter(r["pca_components"].values())))
            row["components"] = [_row(comp_cols, r["pca_components"], i) for i in range(n)]
            out.append(row)
        return pa.array(out, type=pca_type)

    def rotation_udf(q, t, k, s, ctx, m):
        out = []
        for qq, tt, kk, ss, cc, mm in _rows(q, t, k, s, ctx, m):
            if not qq.is_valid or not kk.is_valid:
                out.append(None)
                continue
            head = _head(qq, tt, kk, ss, cc.as_py(), mm.as_py(), config)
            out.append(_row(rot_cols, rotation.analyse(head, config.rotation).tables["rotation_heads"]))
        return pa.array(out, type=rot_type)

    def plasticity_udf(q, t, qe, k, s, ke, ctx, m, layer, q_head):
        out = []
        for qq, tt, qx, kk, ss, kx, cc, mm, ll, hh in _rows(q, t, qe, k, s, ke, ctx, m, layer, q_head):
            if not qq.is_valid or not kk.is_valid:
                out.append(None)
                continue
            head = _head(qq, tt, kk, ss, cc.as_py(), mm.as_py(), config, qe=qx, ke=kx,
                         layer=ll.as_py(), q_head=hh.as_py())
            r = plasticity.analyse(head, config.plasticity, seed=config.seed).tables
            row = _row(pl_cols, r["plasticity_heads"])
            n = len(next(iter(r["plasticity_buckets"].values())))
            row["buckets"] = [_row(bucket_cols, r["plasticity_buckets"], i) for i in range(n)]
            out.append(row)
        return pa.array(out, type=pl_type)

    vec, pos = "FLOAT[][]", "INTEGER[]"
    comp_sql = f"components {_struct_sql(comp_cols)}[]"
    bucket_sql = f"buckets {_struct_sql(bucket_cols)}[]"
    specs = [
        ("qkwh_pca", pca_udf, [vec, pos, vec, pos], _struct_sql(pca_cols, comp_sql)),
        ("qkwh_rotation", rotation_udf, [vec, pos, vec, pos, "INTEGER", "INTEGER"], _struct_sql(rot_cols)),
        ("qkwh_plasticity", plasticity_udf, [vec, pos, pos, vec, pos, pos, "INTEGER", "INTEGER", "INTEGER", "INTEGER"],
         _struct_sql(pl_cols, bucket_sql)),
    ]
    for name, fn, params, ret in specs:
        fn = _single_threaded(fn)
        try:
            con.remove_function(name)
        except Exception:  # not registered yet
            pass
        con.create_function(name, fn, params, ret, type="arrow", side_effects=False)
