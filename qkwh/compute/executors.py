"""Executors: where group tasks run.  A small interface so a distributed engine can plug in.

An executor maps ``run_group`` over tasks and yields each task's outcomes as they finish, in any
order.  Results never depend on the executor: every random choice is seeded from
(seed, layer, q_head), never from scheduling.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_BLAS_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
              "NUMEXPR_NUM_THREADS")


class Executor(Protocol):
    def map_unordered(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]: ...

    def close(self) -> None: ...


class SerialExecutor:
    """Runs tasks in this process, one after another."""

    def map_unordered(self, fn, items):
        for item in items:
            yield fn(item)

    def close(self) -> None:
        pass


def _init_worker() -> None:
    """Pin BLAS to one thread (for libraries not yet loaded; the task pins the loaded ones with
    threadpoolctl); leave Ctrl-C to the parent, which cancels the pool."""
    import signal

    for var in _BLAS_VARS:
        os.environ[var] = "1"
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class ProcessExecutor:
    """A local process pool; each worker's BLAS is pinned to one thread.

    Workers are started with the ``spawn`` method and set the BLAS thread variables before
    numpy is imported, so N workers use N cores, not N x cores.
    """

    def __init__(self, workers: int):
        # the initializer runs in each worker before any task is unpickled, i.e. before numpy
        # (and its BLAS) is imported there
        self._workers = workers
        self._pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"),
                                            initializer=_init_worker)

    def map_unordered(self, fn, items):
        items = list(items)
        pending = {self._pool.submit(fn, it) for it in items[: 4 * self._workers]}
        rest = iter(items[4 * self._workers:])
        while pending:
            done, pending = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
            for fut in done:
                nxt = next(rest, None)
                if nxt is not None:
                    pending.add(self._pool.submit(fn, nxt))
                yield fut.result()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def make_executor(workers: int | None) -> Executor:
    """``workers`` <= 1 runs in-process; otherwise a local process pool."""
    n = workers if workers is not None else (os.cpu_count() or 1)
    return SerialExecutor() if n <= 1 else ProcessExecutor(n)
