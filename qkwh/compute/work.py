"""What a worker does with a :class:`GroupTask`: read the files, run the analyses.

Runs in worker processes: no DuckDB here (the parent process is the only writer).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from qkwh.analyses import pca, plasticity, rotation, stats
from qkwh.analyses.stats import cap_rows
from qkwh.analyses.types import AnalysisResult, HeadData
from qkwh.compute.units import GroupTask, HeadUnit
from qkwh.params import RunConfig
from qkwh.sniffed.reader import FileData, read_file


@dataclass
class HeadOutcome:
    unit: HeadUnit
    results: dict[str, AnalysisResult]  # analysis -> its tables
    seconds: float
    error: str | None = None


def _take(data: FileData, idx: np.ndarray | None) -> tuple[np.ndarray, ...]:
    cols = (data.vectors, data.position, data.example_id, data.bucket)
    return cols if idx is None else tuple(c[idx] for c in cols)


def head_data(unit: HeadUnit, q: FileData, k: FileData, config: RunConfig) -> HeadData:
    """Assemble one head's arrays, applying the max_tokens_per_head cap to Q and K."""
    if q.d != k.d:
        raise ValueError(f"{unit.label}: q has d={q.d} but k has d={k.d}")
    qv, qt, qe, qb = _take(q, cap_rows(q.rows, config.max_tokens_per_head, config.seed))
    kv, ks, ke, kb = _take(k, cap_rows(k.rows, config.max_tokens_per_head, config.seed))
    return HeadData(q=qv, q_pos=qt, q_example=qe, q_bucket=qb, k=kv, k_pos=ks, k_example=ke, k_bucket=kb,
                    context_length=unit.context_length, bucket_size=unit.bucket_size,
                    sliding_window=unit.sliding_window, layer=unit.layer, q_head=unit.q_head)


def run_analyses(head: HeadData, analyses: tuple[str, ...], config: RunConfig) -> dict[str, AnalysisResult]:
    out: dict[str, AnalysisResult] = {}
    # PCA and rotation share one pass over the rows (the head's moments)
    moments = stats.head_moments(head) if {"pca", "rotation"} & set(analyses) else None
    for name in analyses:
        if name == "pca":
            out[name] = pca.analyse(head, config.pca, moments=moments)
        elif name == "rotation":
            out[name] = rotation.analyse(head, config.rotation, moments=moments)
        elif name == "plasticity":
            out[name] = plasticity.analyse(head, config.plasticity, seed=config.seed)
        else:  # validated earlier; defensive
            raise ValueError(f"unknown analysis {name!r}")
    return out


def run_group(task: GroupTask) -> list[HeadOutcome]:
    """Read the shared k file once, then each q file, and analyse every head of the group.

    BLAS runs on one thread here, wherever this runs (a pool worker, in-process): LAPACK's
    results change in the last bits with the thread count, and N workers should use N cores.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        return _run_group(task)


def _run_group(task: GroupTask) -> list[HeadOutcome]:
    outcomes: list[HeadOutcome] = []
    k_data = read_file(task.heads[0].k_path)
    for unit, analyses in zip(task.heads, task.analyses):
        t0 = time.perf_counter()
        try:
            head = head_data(unit, read_file(unit.q_path), k_data, task.config)
            results = run_analyses(head, analyses, task.config)
            outcomes.append(HeadOutcome(unit, results, time.perf_counter() - t0))
        except Exception as exc:  # one bad head must not sink the run; reported by the runner
            outcomes.append(HeadOutcome(unit, {}, time.perf_counter() - t0, f"{type(exc).__name__}: {exc}"))
    return outcomes
