"""Build the marts: run the dbt project in-process against one warehouse.

``build()`` is ``qkwh build``: seeds, staging views, intermediate models, marts, every data test
and every unit test (``dbt build``).  ``docs_generate()`` is ``qkwh docs``: the dbt docs site as a
single self-contained HTML file.

The dbt project is read where :mod:`qkwh.paths` finds it (package data in an installed wheel,
``dbt_project/`` in a clone) and is never written to: dbt's ``target/`` (compiled SQL, partial
parse state, the docs site), its ``logs/`` and the ``profiles.yml`` it reads live in a work folder
next to the warehouse, ``<warehouse name>.dbt/`` (``qkwh.duckdb`` -> ``qkwh.dbt/``).  The profile
points dbt at the warehouse through the ``QKWH_WAREHOUSE`` environment variable, set to the
resolved absolute path for the duration of the run.  Anonymous usage statistics and version
checks are off, so nothing touches the network.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qkwh.errors import Interrupted, NotFoundError, QkwhError, WarehouseLockedError
from qkwh.paths import DBT_PROJECT_DIR

log = logging.getLogger("qkwh.build")

WAREHOUSE_ENV = "QKWH_WAREHOUSE"

_LOCK_PATTERNS = ("could not set lock on file", "conflicting lock is held")
_dbt_lock = threading.Lock()  # dbt's runner is not re-entrant: one invocation per process at a time

LogSink = Callable[[str], None]


@dataclass(frozen=True)
class NodeResult:
    """Outcome of one dbt node (seed, model, data test or unit test)."""

    unique_id: str
    name: str
    resource_type: str  # seed | model | test | unit_test
    status: str  # success | pass | error | fail | warn | skipped | ...
    message: str | None
    seconds: float
    failures: int | None

    @property
    def ok(self) -> bool:
        return self.status in ("success", "pass", "warn", "no-op")


@dataclass(frozen=True)
class BuildResult:
    """What ``build()`` / ``docs_generate()`` did: every node's outcome and where the logs are."""

    warehouse: Path
    command: str
    success: bool
    seconds: float
    nodes: tuple[NodeResult, ...]
    target_path: Path
    log_path: Path
    messages: tuple[str, ...] = field(default=(), repr=False)

    @property
    def failed(self) -> tuple[NodeResult, ...]:
        return tuple(n for n in self.nodes if n.status in ("error", "fail", "runtime error"))

    def count(self, resource_type: str, status: str | None = None) -> int:
        return sum(
            1
            for n in self.nodes
            if n.resource_type == resource_type and (status is None or n.status == status)
        )

    @property
    def n_models(self) -> int:
        return self.count("model")

    @property
    def n_seeds(self) -> int:
        return self.count("seed")

    @property
    def n_tests(self) -> int:
        """Data tests (generic + singular)."""
        return self.count("test")

    @property
    def n_unit_tests(self) -> int:
        return self.count("unit_test")

    @property
    def summary(self) -> str:
        """One line: counts per resource type and status, and the elapsed time."""
        by = Counter((n.resource_type, n.status) for n in self.nodes)
        parts = [f"{k[0]} {k[1]}={v}" for k, v in sorted(by.items())]
        state = "ok" if self.success else "FAILED"
        return f"dbt {self.command} {state} in {self.seconds:.1f}s: " + ", ".join(parts)

    def __str__(self) -> str:
        return self.summary


# ------------------------------------------------------------------------------------------
# public API
# ------------------------------------------------------------------------------------------


def build(
    warehouse: Path,
    *,
    select: str | None = None,
    full_refresh: bool = False,
    target_dir: Path | None = None,
    threads: int | None = None,
    log_sink: LogSink | None = None,
    dbt_vars: dict[str, Any] | None = None,
) -> BuildResult:
    """Build the marts: run `dbt build` (seeds, models, data tests, unit tests) on the warehouse.

    WAREHOUSE is the DuckDB file (the CLI resolves --warehouse, then $QKWH_WAREHOUSE, then
    ./qkwh.duckdb).  --select limits the run to a dbt selection (e.g. "+model_summary" or
    "head_metrics+"); --full-refresh rebuilds everything from scratch.  dbt writes into
    :func:`dbt_work_dir` unless TARGET_DIR names the target folder (its parent then holds logs/
    and profiles.yml).  The warehouse must not be open for writing in another process while the
    build runs.  ``mart_builds`` records what the build read and every table dbt writes records
    the build it came from (``mart_relations``), so stale marts can be told (:mod:`qkwh.status`).

    Raises WarehouseLockedError when another process holds the warehouse, NotFoundError when the
    file does not exist, and QkwhError naming the failing models/tests when anything fails.
    ``dbt_vars`` overrides project vars (e.g. ``{"n_boot": 200}``), as dbt's ``--vars``.
    """
    warehouse = Path(warehouse).expanduser().resolve()
    args = ["build"]
    if dbt_vars:
        args += ["--vars", json.dumps(dbt_vars)]
    if select:
        args += ["--select", select]
    if full_refresh:
        args.append("--full-refresh")
    if threads:
        args += ["--threads", str(int(threads))]
    build_id = _start_build(warehouse)
    try:
        result = _run_dbt(Path(warehouse), args, target_dir=target_dir, log_sink=log_sink)
    finally:
        if build_id is not None:
            _finish_build(warehouse, build_id)
    if not result.success:
        raise _failure_error(result)
    return result


def _start_build(warehouse: Path) -> str | None:
    """Record the build about to run (what the marts will read, marked running) and return its
    id, or None when there is no warehouse (the build then fails with NotFoundError)."""
    if not warehouse.exists():
        return None
    from qkwh import status, store

    con = store.connect(warehouse)
    try:
        return status.start_build(con)
    finally:
        con.close()


def _finish_build(warehouse: Path, build_id: str) -> None:
    """Close the build's record.  Best effort: when it fails (the warehouse locked by another
    process right after dbt, say), the build stays marked running, which the next build closes
    and staleness treats like a build that was killed; the build's own outcome is reported."""
    from qkwh import status, store

    try:
        con = store.connect(warehouse)
    except QkwhError as exc:
        log.warning("could not close the record of build %s: %s", build_id, exc)
        return
    try:
        status.finish_build(con, build_id)
    finally:
        con.close()


def docs_generate(
    warehouse: Path,
    *,
    target_dir: Path | None = None,
    log_sink: LogSink | None = None,
) -> Path:
    """Generate the dbt docs site and return the path of a file that opens offline.

    Runs `dbt docs generate --static` against the warehouse (which should have been built with
    `qkwh build` so the catalog lists every column) and returns target/static_index.html, a
    single HTML file with the manifest and catalog embedded: open it in any browser, no server
    needed.  The site lives in the warehouse's dbt work folder (:func:`dbt_work_dir`).
    """
    result = _run_dbt(
        Path(warehouse), ["docs", "generate", "--static"], target_dir=target_dir, log_sink=log_sink
    )
    if not result.success:
        raise _failure_error(result)
    static = result.target_path / "static_index.html"
    return static if static.exists() else result.target_path / "index.html"


def dbt_work_dir(warehouse: Path) -> Path:
    """Where dbt writes for this warehouse: ``<folder>/<name without suffix>.dbt/``.

    It holds ``target/`` (compiled SQL, partial-parse state, the docs site), ``logs/dbt.log``
    and the generated ``profiles.yml``; each warehouse has its own, so builds of two warehouses
    never share parse state.
    """
    warehouse = Path(warehouse).expanduser().resolve()
    return warehouse.with_name(warehouse.stem + ".dbt")


# ------------------------------------------------------------------------------------------
# internals
# ------------------------------------------------------------------------------------------


def _write_profiles(work: Path) -> Path:
    """Copy the project's ``profiles.yml`` into ``work`` (dbt reads, and may write, its profiles
    folder; the packaged project stays untouched).  Returns the folder."""
    work.mkdir(parents=True, exist_ok=True)
    text = (DBT_PROJECT_DIR / "profiles.yml").read_text()
    dst = work / "profiles.yml"
    if not dst.exists() or dst.read_text() != text:
        dst.write_text(text)
    return work


def _run_dbt(
    warehouse: Path,
    command_args: list[str],
    *,
    target_dir: Path | None,
    log_sink: LogSink | None,
) -> BuildResult:
    from dbt.cli.main import dbtRunner  # heavy import: only when a build is asked for

    warehouse = warehouse.expanduser().resolve()
    _prepare_warehouse(warehouse)
    target_path = Path(target_dir).expanduser().resolve() if target_dir else None
    work = target_path.parent if target_path else dbt_work_dir(warehouse)
    target_path = target_path or work / "target"
    log_path = work / "logs"
    profiles_dir = _write_profiles(work)
    command = " ".join(a for a in command_args if not a.startswith("-"))

    args = [
        *command_args,
        "--project-dir",
        str(DBT_PROJECT_DIR),
        "--profiles-dir",
        str(profiles_dir),
        "--target-path",
        str(target_path),
        "--log-path",
        str(log_path),
        "--log-level",
        "none",  # console output goes through the callback below
        "--log-level-file",
        "debug",
        "--no-use-colors",
        "--no-send-anonymous-usage-stats",
        "--no-version-check",
    ]
    messages: list[str] = []
    interrupted = threading.Event()

    def on_event(event: Any) -> None:
        info = event.info
        if (
            interrupted.is_set()
        ):  # after Ctrl-C: dbt's cancel messages and traceback stay in its log file
            return
        if info.level in ("info", "warn", "error") and info.msg.strip():
            messages.append(info.msg)
            if log_sink is not None:
                log_sink(info.msg)
            else:
                log.log(_LEVELS.get(info.level, logging.INFO), "%s", info.msg)

    t0 = time.perf_counter()
    with (
        _dbt_lock,
        _environment(
            {
                WAREHOUSE_ENV: str(warehouse),
                "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
                "DO_NOT_TRACK": "1",
            }
        ),
    ):
        try:
            with _noting_sigint(interrupted):
                res = dbtRunner(callbacks=[on_event]).invoke(args)
        finally:
            _release_duckdb()
    seconds = time.perf_counter() - t0
    if interrupted.is_set() or isinstance(res.exception, KeyboardInterrupt):
        raise Interrupted(
            f"dbt {command} interrupted: marts built so far are kept, the others are as "
            f"before; run it again to finish (log: {log_path / 'dbt.log'})"
        )

    nodes = _node_results(res.result)
    result = BuildResult(
        warehouse=warehouse,
        command=command,
        success=bool(res.success),
        seconds=seconds,
        nodes=nodes,
        target_path=target_path,
        log_path=log_path,
        messages=tuple(messages),
    )
    texts = [str(res.exception or "")] + [n.message or "" for n in nodes] + messages
    if any(_is_lock_message(t) for t in texts):
        raise WarehouseLockedError(
            _lock_message(warehouse, next(t for t in texts if _is_lock_message(t)))
        )
    if res.exception is not None and not nodes:
        raise QkwhError(
            f"dbt {command} could not run: {_one_line(str(res.exception))} (log: {log_path / 'dbt.log'})"
        )
    return result


@contextlib.contextmanager
def _noting_sigint(flag: threading.Event) -> Iterator[None]:
    """Set ``flag`` when Ctrl-C arrives (then raise KeyboardInterrupt as usual), so the event
    callback stops echoing dbt's cancel messages and traceback.  Main thread only (signal rule)."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        flag.set()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}


def _release_duckdb() -> None:
    """Close the DuckDB instance dbt-duckdb keeps open after a run.

    dbt-duckdb caches one database environment per process; left open, the warehouse file stays
    attached read-write, and a later read-only ``duckdb.connect`` in this process (the report, the
    demo summary, tests) fails with "different configuration than existing connections".
    """
    try:
        from dbt.adapters.duckdb.connections import DuckDBConnectionManager
    except ImportError:  # pragma: no cover - adapter always installed with qkwh
        return
    with DuckDBConnectionManager._LOCK:
        env = DuckDBConnectionManager._ENV
        DuckDBConnectionManager._ENV = None
        if env is not None:
            try:
                env.close()
            except Exception as exc:  # closing is best effort; the next run reopens anyway
                log.debug("closing the dbt-duckdb environment failed: %s", exc)
    import gc

    gc.collect()  # drop cursors dbt left unreferenced so the database instance really closes


def _prepare_warehouse(warehouse: Path) -> None:
    """Fail early and clearly: missing file, or a file locked by another process.

    Opening the warehouse read-write through the store also applies the schema (idempotent), so
    a warehouse that was only ingested still has every source table dbt expects (empty source
    tables build empty marts).  The store raises WarehouseLockedError for a held lock.
    """
    if not warehouse.exists():
        raise NotFoundError(f"warehouse {warehouse} does not exist; run `qkwh ingest` first")
    from qkwh import store

    store.connect(warehouse).close()


def _is_lock_message(text: str) -> bool:
    low = text.lower()
    return any(p in low for p in _LOCK_PATTERNS)


def _lock_message(warehouse: Path, detail: str) -> str:
    pid = re.search(r"PID (\d+)", detail)
    holder = f" (held by PID {pid.group(1)})" if pid else ""
    return (
        f"warehouse {warehouse} is locked by another process{holder}; "
        "wait for it to finish or close it, then run the build again"
    )


def _node_results(run_result: Any) -> tuple[NodeResult, ...]:
    results = getattr(run_result, "results", None) or []
    out = []
    for r in results:
        node = getattr(r, "node", None)
        if node is None:
            continue
        status = getattr(r.status, "value", str(r.status))
        out.append(
            NodeResult(
                unique_id=node.unique_id,
                name=node.name,
                resource_type=getattr(node.resource_type, "value", str(node.resource_type)),
                status=str(status).lower(),
                message=r.message,
                seconds=float(r.execution_time or 0.0),
                failures=r.failures,
            )
        )
    return tuple(out)


def _failure_error(result: BuildResult) -> QkwhError:
    failed = result.failed
    if not failed:
        err = QkwhError(f"dbt {result.command} failed (log: {result.log_path / 'dbt.log'})")
    else:
        described = []
        for n in failed[:6]:
            if n.resource_type in ("test", "unit_test") and n.failures:
                what = f"{n.failures} failing row{'s' if n.failures != 1 else ''}"
            else:
                what = _cause(n.message or n.status)
            described.append(f"{n.resource_type} {n.name} ({what})")
        more = f" and {len(failed) - 6} more" if len(failed) > 6 else ""
        err = QkwhError(
            f"dbt {result.command} failed on {len(failed)} node{'s' if len(failed) != 1 else ''}: "
            + "; ".join(described)
            + more
            + f" (log: {result.log_path / 'dbt.log'})"
        )
    err.result = result  # type: ignore[attr-defined]
    return err


def _cause(text: str) -> str:
    """The informative line of a dbt error message (skipping 'Runtime Error in model x (...)')."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for line in lines:
        if not re.match(r"^(Runtime|Database|Compilation|Dependency) Error in ", line):
            return line[:300]
    return lines[0][:300] if lines else ""


def _one_line(text: str, limit: int = 600) -> str:
    """A multi-line dbt message folded into one line."""
    return " ".join(ln.strip() for ln in text.splitlines() if ln.strip())[:limit]


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line[:300]
    return text.strip()[:300]


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
