"""Executors: where group tasks run.  A small interface so a distributed engine can plug in.

An executor maps ``run_group`` over tasks and yields each task's outcomes as they finish, in any
order.  Results never depend on the executor: every random choice is seeded from
(seed, layer, q_head), never from scheduling.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import multiprocessing as mp
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_BLAS_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


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


def _init_worker(parent: int) -> None:
    """Pin BLAS to one thread (for libraries not yet loaded; the task pins the loaded ones with
    threadpoolctl); leave Ctrl-C to the parent, which cancels the pool; die with the parent."""
    import signal

    for var in _BLAS_VARS:
        os.environ[var] = "1"
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent)


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent(parent: int) -> None:
    """End this worker when its parent process ``parent`` dies, even by kill -9 (which runs no
    clean-up in the parent): otherwise the worker waits forever on the pool's pipes, whose
    other ends it holds itself, and keeps its memory.

    On Linux the kernel sends SIGKILL at the parent's death (``PR_SET_PDEATHSIG``); everywhere a
    daemon thread checks every half second that the parent is still the one that started us.
    The parent may already be gone when this runs: then the worker exits at once.  (The pool's
    resource tracker exits by itself once the parent and every worker are gone.)
    """
    import signal
    import sys
    import threading

    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (
            OSError,
            AttributeError,
        ):  # pragma: no cover - no libc prctl: the thread below watches
            pass
    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(
        target=_watch_parent, args=(parent,), name="qkwh-watch-parent", daemon=True
    ).start()


def _watch_parent(parent: int) -> None:
    import time

    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


#: glibc malloc setting of the workers: back the heap with transparent huge pages where the kernel
#: gives them on request (its usual "madvise" mode).  A head's analyses stream over arrays of
#: several MB, with a TLB miss every 4 KiB page otherwise: about 10 % of their time.  Only where
#: memory comes from changes, never a result.  glibc reads it when a process starts (older glibc
#: and other C libraries ignore it).
HUGE_PAGES_TUNABLE = "glibc.malloc.hugetlb=1"


@contextlib.contextmanager
def _worker_environment() -> Iterator[None]:
    """While workers are started: ``GLIBC_TUNABLES`` with :data:`HUGE_PAGES_TUNABLE` added
    (unless it sets that tunable already), restored afterwards."""
    old = os.environ.get("GLIBC_TUNABLES")
    if not sys.platform.startswith("linux") or (old and "glibc.malloc.hugetlb" in old):
        yield
        return
    os.environ["GLIBC_TUNABLES"] = f"{old}:{HUGE_PAGES_TUNABLE}" if old else HUGE_PAGES_TUNABLE
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("GLIBC_TUNABLES", None)
        else:
            os.environ["GLIBC_TUNABLES"] = old


class ProcessExecutor:
    """A local process pool; each worker's BLAS is pinned to one thread.

    Workers are started with the ``spawn`` method and set the BLAS thread variables before
    numpy is imported, so N workers use N cores, not N x cores.
    """

    def __init__(self, workers: int):
        # the initializer runs in each worker before any task is unpickled, i.e. before numpy
        # (and its BLAS) is imported there
        self._workers = workers
        self._finished = False
        self._exiting: threading.Thread | None = None  # see release()
        self._pool = cf.ProcessPoolExecutor(
            max_workers=workers,
            mp_context=mp.get_context("spawn"),
            initializer=_init_worker,
            initargs=(os.getpid(),),
        )

    def map_unordered(self, fn, items):
        self._finished = False
        items = list(items)
        with _worker_environment():  # the pool starts its workers on the first submits
            pending = {self._pool.submit(fn, it) for it in items[: 4 * self._workers]}
        rest = iter(items[4 * self._workers :])
        while pending:
            done, pending = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
            for fut in done:
                nxt = next(rest, None)
                if nxt is not None:
                    pending.add(self._pool.submit(fn, nxt))
                yield fut.result()
        self._finished = True

    def release(self) -> None:
        """After every task finished: tell the workers to exit, without waiting for them.

        A worker's exit takes a few tenths of a second (its interpreter unloads NumPy, SciPy and
        the rest); the caller can do its own last work meanwhile, then :meth:`close` waits for
        them.  Does nothing while tasks are unfinished (then :meth:`close` ends the workers)."""
        if not self._finished or self._exiting is not None:
            return
        self._exiting = getattr(self._pool, "_executor_manager_thread", None)
        self._pool.shutdown(wait=False)

    def close(self) -> None:
        """Stop the pool.  After every task finished the workers exit cleanly; otherwise (Ctrl-C,
        an error, the caller stopped early) the tasks still running are not wanted: the workers
        are ended at once instead of being waited for."""
        if self._finished:
            self._pool.shutdown(wait=True)
            if self._exiting is not None:  # released: the pool no longer holds its manager thread
                self._exiting.join()
            return
        workers = list((getattr(self._pool, "_processes", None) or {}).values())
        results = getattr(self._pool, "_result_queue", None)  # shutdown() drops the reference
        self._pool.shutdown(wait=False, cancel_futures=True)
        for proc in workers:
            if proc.is_alive():
                proc.kill()
        for proc in workers:
            proc.join(5)
        # A worker killed while it sent its result leaves half a message in the result pipe, and
        # the pool's manager thread waits for the rest forever -- and the interpreter joins that
        # thread at exit, so the process would never end.  The workers are gone; this process
        # holds the pipe's last write end: closing it ends the wait (the reader sees end of file).
        writer = getattr(results, "_writer", None)
        if writer is not None:
            writer.close()


def _ray_call(fn, item):
    """Run one task on a Ray worker (BLAS pinned by the variables of the task's runtime env)."""
    return fn(item)


def check_local_interpreter() -> None:
    """Refuse to start a local Ray cluster from a Python whose path holds whitespace.

    Ray starts its worker processes from a command line it splits at spaces, so with such an
    interpreter (a virtualenv under ``~/my projects/``, say) no worker ever starts and every
    task waits forever.  Joining a running cluster (``--ray-address``) is not affected: its
    workers use the cluster's own Python.
    """
    exe = sys.executable
    if any(ch.isspace() for ch in exe):
        from qkwh.errors import QkwhError

        raise QkwhError(
            f"cannot start a local Ray cluster from {exe!r}: Ray cannot start workers from a "
            "Python whose path contains a space (use a virtualenv at a path without spaces, or "
            "join a running cluster with --ray-address)"
        )


_CANCEL_ROUNDS = 30  # RayExecutor._cancel: how often a cancel is sent before giving up ...
_CANCEL_ROUND_S = 1.0  # ... and how long each round waits for the tasks to settle


class RayExecutor:
    """Tasks on a Ray cluster: ``address`` ``"auto"`` (the cluster this machine belongs to),
    ``"ray://host:port"`` (Ray Client) or ``host:port``; None starts a private local Ray unless
    ``RAY_ADDRESS`` names one.

    Each task takes one CPU and is retried ``max_retries`` times when its worker process or node
    dies (the parent writes a unit of work only once it has all its results, so a retried task
    never duplicates rows).  At most ``in_flight`` tasks are submitted at a time (default: twice
    the cluster's CPUs), so results never pile up in the object store.  Workers need qkwh and
    its dependencies installed and open the files of their task themselves: local paths must
    exist on every node, ``hf://`` URIs are read over the network (``HF_ENDPOINT`` is passed on).
    """

    def __init__(
        self, address: str | None = None, *, max_retries: int = 3, in_flight: int | None = None
    ):
        try:
            import ray
        except ImportError:
            from qkwh.errors import MissingExtraError

            raise MissingExtraError("the Ray executor needs Ray", "ray") from None
        self._ray = ray
        self._started = not ray.is_initialized()
        if self._started:
            where = address or os.environ.get("RAY_ADDRESS")
            # Ray Client (ray://) takes fewer options; a new local Ray needs no dashboard
            options = (
                {}
                if (where or "").startswith("ray://")
                else {"log_to_driver": False, "configure_logging": False}
            )
            if not where:
                options["include_dashboard"] = False
                check_local_interpreter()
            try:
                ray.init(address=address, **options)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                from qkwh.errors import QkwhError

                raise QkwhError(
                    f"cannot start or join Ray at {where or 'a new local cluster'}: "
                    f"{str(exc).splitlines()[0]}"
                ) from None
        env = dict.fromkeys(_BLAS_VARS, "1")
        for var in ("HF_ENDPOINT", "HF_HUB_DISABLE_TELEMETRY", "HF_HUB_DISABLE_XET"):
            if os.environ.get(var):
                env[var] = os.environ[var]
        self._task = ray.remote(
            num_cpus=1,
            max_retries=max_retries,
            retry_exceptions=False,
            runtime_env={"env_vars": env},
        )(_ray_call).options(name="qkwh_task")
        self._in_flight = in_flight or max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
        self._pending: set = set()

    def map_unordered(self, fn, items):
        ray = self._ray
        fn_ref = ray.put(fn)
        rest = iter(items)
        try:
            for item in rest:
                self._pending.add(self._task.remote(fn_ref, item))
                if len(self._pending) >= self._in_flight:
                    break
            while self._pending:
                done, _ = ray.wait(list(self._pending), num_returns=1)
                for ref in done:
                    self._pending.discard(ref)
                    nxt = next(rest, None)
                    if nxt is not None:
                        self._pending.add(self._task.remote(fn_ref, nxt))
                    yield self._result(ref)
        finally:  # Ctrl-C, an error, or the caller stopped early: nothing keeps running
            self._cancel()

    def _result(self, ref):
        try:
            return self._ray.get(ref)
        except (
            self._ray.exceptions.RayTaskError
        ) as exc:  # the task's own exception, as the pool raises it
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise

    def _cancel(self) -> None:
        """Cancel every task still pending and wait until Ray has settled each one (cancelled,
        or finished before the cancel reached it), at most ``_CANCEL_ROUNDS`` rounds of
        ``_CANCEL_ROUND_S``.  A cancel that races a task's start on its worker can be lost (the
        task then runs on), so each round sends it again to the tasks not yet settled."""
        refs = list(self._pending)
        self._pending.clear()
        for _ in range(_CANCEL_ROUNDS):
            if not refs:
                return
            for ref in refs:
                try:
                    self._ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - already finished or gone with its node
                    pass
            try:
                _, refs = self._ray.wait(
                    refs, num_returns=len(refs), timeout=_CANCEL_ROUND_S, fetch_local=False
                )
            except Exception:  # noqa: BLE001 - Ray itself is going away: nothing left to stop
                return

    def close(self) -> None:
        self._cancel()
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()


EXECUTORS = ("pool", "ray")


def make_executor(workers: int | None, kind: str = "pool", address: str | None = None) -> Executor:
    """``pool``: in-process when ``workers`` <= 1, else a local process pool; ``ray``: a Ray
    cluster at ``address`` (``workers`` is then the cluster's business)."""
    if kind == "ray":
        return RayExecutor(address)
    if kind != "pool":
        from qkwh.errors import InputError

        raise InputError(f"unknown executor {kind!r}; choose from {', '.join(EXECUTORS)}")
    n = workers if workers is not None else (os.cpu_count() or 1)
    return SerialExecutor() if n <= 1 else ProcessExecutor(n)
