"""What a worker does with a :class:`GroupTask`: read the files, build each head, run its analyses.

:func:`build_head` is the one place a :class:`HeadData` is assembled (row cap, d check), for the
bulk path (:func:`head_data`, from the files) and the SQL functions (:mod:`qkwh.udf`) alike, and
:func:`run_analyses` the one place the registered analyses are run on it.

Runs in worker processes: no DuckDB here (the parent process is the only writer).  A head's
results leave the worker as Arrow tables keyed like the warehouse rows (:func:`head_tables`), so
the parent writes them without converting anything.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from qkwh.analyses import precompute as pre
from qkwh.analyses import registry
from qkwh.analyses.registry import Analysis
from qkwh.analyses.types import AnalysisResult, AttentionFacts, ExactAttention, HeadData, RopePlanes
from qkwh.columns import as_arrow
from qkwh.compute.memory import keep_freed_memory
from qkwh.compute.units import GroupTask, HeadUnit
from qkwh.params import RunConfig
from qkwh.reach_inputs import REACH_ANALYSIS, read_exact
from qkwh.sniffed.reader import FileData, read_file


@dataclass
class HeadOutcome:
    unit: HeadUnit
    seconds: float
    error: str | None = None
    tables: dict[str, pa.Table] | None = (
        None  # warehouse table -> rows (head key and config_id in place)
    )
    analyses: tuple[str, ...] = ()  # the analyses whose rows ``tables`` holds

    # Crossing a process boundary (pool pipe, Ray object store), ``tables`` travel as Arrow IPC
    # streams: pickling a pa.Table rebuilds it column by column (~1.6 ms per head on the benchmark
    # shape), reading an IPC stream back is zero-copy (~0.1 ms).
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        if self.tables is not None:
            state["tables"] = {name: _to_ipc(t) for name, t in self.tables.items()}
        return state

    def __setstate__(self, state: dict) -> None:
        if state.get("tables") is not None:
            state["tables"] = {
                name: pa.ipc.open_stream(buf).read_all() for name, buf in state["tables"].items()
            }
        self.__dict__.update(state)


def _to_ipc(table: pa.Table) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def head_tables(
    unit: HeadUnit, results: dict[str, AnalysisResult], config_ids: dict[str, str]
) -> dict[str, pa.Table]:
    """One head's results as Arrow tables keyed like the warehouse rows: model_id, layer, q_head,
    k_head and config_id, then the analysis' columns.  The writer only concatenates them."""
    out: dict[str, pa.Table] = {}
    for analysis, result in results.items():
        for table, cols in result.tables.items():
            if not cols:
                continue
            n = len(next(iter(cols.values())))
            key = {
                "model_id": pa.array([unit.model_id] * n, pa.string()),
                "layer": pa.array(np.full(n, unit.layer, dtype=np.int32)),
                "q_head": pa.array(np.full(n, unit.q_head, dtype=np.int32)),
                "k_head": pa.array(np.full(n, unit.k_head, dtype=np.int32)),
                "config_id": pa.array([config_ids[analysis]] * n, pa.string()),
            }
            out[table] = pa.table({**key, **{c: as_arrow(v) for c, v in cols.items()}})
    return out


#: one kind's rows of a head: vectors (n, d) float32, then position, example_id, bucket (n,) int64
Rows = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def build_head(
    q: Rows,
    k: Rows,
    *,
    context_length: int,
    bucket_size: int,
    sliding_window: int | None,
    layer: int,
    q_head: int,
    config: RunConfig,
    label: str = "head",
    rope: RopePlanes | None = None,
    attention: AttentionFacts | None = None,
    exact: ExactAttention | None = None,
) -> HeadData:
    """One head's :class:`HeadData` from its q rows and k rows (in file order), with the
    ``max_tokens_per_head`` cap applied to Q and to K (the same seeded draw as every path), and
    its layer's RoPE planes (``rope``, None when unknown)."""
    from qkwh.analyses.stats import cap_rows  # SciPy: imported where heads are built

    if q[0].shape[1] != k[0].shape[1]:
        raise ValueError(f"{label}: q has d={q[0].shape[1]} but k has d={k[0].shape[1]}")
    q_idx = cap_rows(len(q[1]), config.max_tokens_per_head, config.seed)
    qv, qt, qe, qb = _take(q, q_idx)
    kv, ks, ke, kb = _take(k, cap_rows(len(k[1]), config.max_tokens_per_head, config.seed))
    return HeadData(
        q=qv,
        q_pos=qt,
        q_example=qe,
        q_bucket=qb,
        k=kv,
        k_pos=ks,
        k_example=ke,
        k_bucket=kb,
        context_length=int(context_length),
        bucket_size=int(bucket_size),
        sliding_window=None if sliding_window is None else int(sliding_window),
        layer=int(layer),
        q_head=int(q_head),
        rope=rope,
        attention=attention,
        exact=None if exact is None else exact.take(q_idx),
    )


def _take(rows: Rows, idx: np.ndarray | None) -> Rows:
    return rows if idx is None else tuple(c[idx] for c in rows)


def _rows(f: FileData | Rows) -> Rows:
    return f if isinstance(f, tuple) else (f.vectors, f.position, f.example_id, f.bucket)


def group_key_rows(k: FileData, config: RunConfig) -> Rows:
    """The rows of a GQA group's k file with the ``max_tokens_per_head`` cap applied, for
    :func:`head_data`: the heads built on them hold the very same key arrays (capping them again
    per head keeps them as they are), so they can share what is computed from the keys alone
    (:class:`qkwh.analyses.precompute.KeyCache`)."""
    from qkwh.analyses.stats import cap_rows

    rows = _rows(k)
    return _take(rows, cap_rows(len(rows[1]), config.max_tokens_per_head, config.seed))


def head_data(
    unit: HeadUnit,
    q: FileData,
    k: FileData | Rows,
    config: RunConfig,
    rope: RopePlanes | None = None,
    attention: AttentionFacts | None = None,
    exact: ExactAttention | None = None,
) -> HeadData:
    """The head of ``unit`` from its q file and its k file (or the group's :func:`group_key_rows`),
    with its layer's RoPE planes (``rope``)."""
    return build_head(
        _rows(q),
        _rows(k),
        context_length=unit.context_length,
        bucket_size=unit.bucket_size,
        sliding_window=unit.sliding_window,
        layer=unit.layer,
        q_head=unit.q_head,
        config=config,
        label=unit.label,
        rope=rope,
        attention=attention,
        exact=exact,
    )


def run_analyses(
    head: HeadData,
    analyses: Sequence[str | Analysis],
    config: RunConfig,
    *,
    keys: pre.KeyCache | None = None,
) -> dict[str, AnalysisResult]:
    """Run ``analyses`` (registered names or declarations) on one head.

    The per-head precomputations they declare (:func:`qkwh.analyses.precompute.precompute`) are
    built once and shared; with ``keys``, those of the key rows come from (and go to) that cache.
    """
    todo = tuple(a if isinstance(a, Analysis) else registry.get(a) for a in analyses)
    shared = pre.precompute(head, todo, keys=keys)
    return {
        a.name: pre.run_function(a)(
            head,
            config.params_of(a.name),
            seed=config.seed,
            shared=shared,
            **({"uses": {u: config.params_of(u) for u in a.uses}} if a.uses else {}),
        )
        for a in todo
    }


def run_group(task: GroupTask) -> list[HeadOutcome]:
    """Read the shared k file once, then each q file, and analyse every head of the group.

    BLAS runs on one thread here, wherever this runs (a pool worker, in-process): LAPACK's
    results change in the last bits with the thread count, and N workers should use N cores.
    The process keeps the memory it frees (:mod:`qkwh.compute.memory`): no page faults on the
    next head's temporaries.
    """
    from threadpoolctl import threadpool_limits

    keep_freed_memory()
    with threadpool_limits(limits=1):
        return _run_group(task)


def _run_group(task: GroupTask) -> list[HeadOutcome]:
    outcomes: list[HeadOutcome] = []
    declared = {a.name: a for a in task.declarations}
    config_ids = dict(task.config_ids)
    k_rows = group_key_rows(read_file(task.heads[0].k_path), task.config)
    keys = pre.KeyCache()  # what the heads of the group compute from the keys alone
    for unit, analyses in zip(task.heads, task.analyses):
        t0 = time.perf_counter()
        try:
            exact = read_exact(unit.q_path) if REACH_ANALYSIS in analyses else None
            head = head_data(
                unit, read_file(unit.q_path), k_rows, task.config, task.rope, task.attention, exact
            )
            results = run_analyses(
                head, [declared.get(a, a) for a in analyses], task.config, keys=keys
            )
            tables = head_tables(unit, results, config_ids)  # Arrow, ready to insert
            outcomes.append(
                HeadOutcome(unit, time.perf_counter() - t0, tables=tables, analyses=tuple(results))
            )
        except Exception as exc:  # one bad head must not sink the run; reported by the runner
            outcomes.append(
                HeadOutcome(unit, time.perf_counter() - t0, f"{type(exc).__name__}: {exc}")
            )
    return outcomes
