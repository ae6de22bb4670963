"""Build the marts: run the dbt project in-process against one warehouse.

``build()`` is ``qkwh build``: seeds, staging views, intermediate models, marts and every data
test (``dbt build``); dbt's unit tests, which check the models' logic on fixed rows and never read
the warehouse, run only when asked (``unit_tests=True``, ``qkwh build --unit-tests``): the test
suite runs them, a user's build need not.  ``docs_generate()`` is ``qkwh docs``: the dbt docs site as a
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
import dataclasses
import itertools
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from qkwh.build_events import (
    KIND_NAMES,
    BuildProgress,
    BuildResult,
    NodeResult,
    ProgressCallback,
    _cause,
    _fatal_cause,
    _node_results,
    _Tracker,
)
from qkwh.errors import Interrupted, NotFoundError, QkwhError, WarehouseLockedError
from qkwh.paths import DBT_PROJECT_DIR

# re-exported: callers import the results and the progress from here
__all__ = [
    "KIND_NAMES",
    "WAREHOUSE_ENV",
    "BuildProgress",
    "BuildResult",
    "LogSink",
    "NodeResult",
    "ProgressCallback",
    "build",
    "dbt_work_dir",
    "docs_generate",
]

log = logging.getLogger("qkwh.build")

WAREHOUSE_ENV = "QKWH_WAREHOUSE"

_LOCK_PATTERNS = ("could not set lock on file", "conflicting lock is held")
_dbt_lock = threading.Lock()  # dbt's runner is not re-entrant: one invocation per process at a time

LogSink = Callable[[str], None]


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
    progress: ProgressCallback | None = None,
    unit_tests: bool = False,
) -> BuildResult:
    """Build the marts: run `dbt build` (seeds, models, data tests) on the warehouse.

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
    ``unit_tests`` adds dbt's unit tests (the models' logic on the fixed input rows of their
    ``.yml``; they read nothing from the warehouse, so they say nothing about its data).

    ``progress`` is called with a :class:`BuildProgress` as dbt plans, starts and finishes each
    node (from dbt's structured events); dbt's text lines then go to its log file only, unless
    ``log_sink`` takes them too.  A build started while a ``qkwh compute`` runs on the warehouse
    is refused (WarehouseLockedError: its marts would be stale as soon as the compute writes its
    next batch).  When dbt finds the warehouse held by another process as it opens it, the build
    waits for it (``$QKWH_LOCK_TIMEOUT``, default 10 s) before giving up.  When the warehouse
    changed while dbt ran (a compute or ingest wrote between the build's start and dbt's open),
    the result's ``stale`` says so and its summary does not say "ok".
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
    if not unit_tests:
        args += ["--exclude-resource-type", "unit_test"]
    _refuse_during_compute(warehouse)
    build_id = _start_build(warehouse)
    stale = None
    try:
        result = _run_dbt(
            Path(warehouse),
            args,
            target_dir=target_dir,
            log_sink=log_sink,
            progress=progress,
            unit_tests=unit_tests,
            prepared=build_id is not None,  # _start_build opened it with the schema applied
        )
    finally:
        if build_id is not None:
            stale = _finish_build(warehouse, build_id)
    if stale:
        result = dataclasses.replace(result, stale=stale)
    if not result.success:
        raise _failure_error(_name_failed_checks(warehouse, result))
    return result


def _name_failed_checks(warehouse: Path, result: BuildResult) -> BuildResult:
    """The result with each failed ``table_checks`` test's ``detail``: its failing checks and how
    many rows fail each (dbt reports only how many checks failed).  The warehouse is read
    read-only, after dbt has let it go; a check that cannot be listed keeps dbt's count."""
    failed = [n for n in result.nodes if n.check_sql]
    if not failed:
        return result
    import duckdb

    details: dict[str, str] = {}
    try:
        with duckdb.connect(str(warehouse), read_only=True) as con:
            for n in failed:
                rows = con.sql(n.check_sql or "").fetchall()
                details[n.unique_id] = "; ".join(
                    f"{check}: {rows_} row{'s' if rows_ != 1 else ''}" for check, rows_ in rows
                )
    except duckdb.Error as exc:  # held by another process again, or the SQL no longer runs
        log.debug("could not list the failing table checks: %s", exc)
    nodes = tuple(
        dataclasses.replace(n, detail=details[n.unique_id]) if details.get(n.unique_id) else n
        for n in result.nodes
    )
    return dataclasses.replace(result, nodes=nodes)


def _refuse_during_compute(warehouse: Path) -> None:
    """Raise WarehouseLockedError when a ``qkwh compute`` holds the warehouse's compute lock."""
    lock = warehouse.with_name(warehouse.name + ".compute.lock")
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no compute lock to look at
        return
    try:
        fh = open(lock)  # noqa: SIM115 - closed below
    except OSError:  # no lock file: no compute has run, or the last one ended
        return
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pid = fh.read().split("\t")[0].strip()
            raise WarehouseLockedError(
                f"a qkwh compute{f' (process {pid})' if pid else ''} is running on {warehouse}: "
                "marts built now would be stale as soon as it writes its next heads; run "
                "`qkwh build` when it has finished (nothing was built)"
            ) from None
        fcntl.flock(fh, fcntl.LOCK_UN)


def _start_build(warehouse: Path) -> str | None:
    """Record the build about to run (what the marts will read, marked running) and return its
    id, or None when there is no warehouse (the build then fails with NotFoundError)."""
    if not warehouse.exists():
        return None
    import duckdb

    from qkwh import status, store

    con = store.connect(warehouse)
    try:
        return status.start_build(con)
    except duckdb.Error as exc:
        cause = _fatal_cause(str(exc))
        if cause is None:
            raise
        raise QkwhError(
            f"qkwh build could not start: {cause} writing {warehouse}; nothing was built: free "
            "space and run it again"
        ) from None
    finally:
        con.close()


def _finish_build(warehouse: Path, build_id: str) -> str | None:
    """Close the build's record and return why its marts are already stale, or None.

    Best effort: when closing fails (the warehouse locked by another process right after dbt,
    say), the build stays marked running, which the next build closes and staleness treats like
    a build that was killed; the build's own outcome is reported, with that reason."""
    import duckdb

    from qkwh import status, store

    try:
        con = store.connect(warehouse)
    except QkwhError as exc:
        log.warning("could not close the record of build %s: %s", build_id, exc)
        return (
            "its record could not be closed (another process held the warehouse right after "
            "dbt), so the marts count as stale: run `qkwh build` again"
        )
    try:
        status.finish_build(con, build_id)
        row = con.execute(
            "SELECT inputs_json FROM mart_builds WHERE build_id = ?", [build_id]
        ).fetchone()
    except duckdb.Error as exc:  # a full disk, say: the build's own outcome is what to report
        log.warning("could not close the record of build %s: %s", build_id, _first_line(str(exc)))
        return "its record could not be closed, so the marts count as stale: run `qkwh build` again"
    finally:
        con.close()
    if row is not None and json.loads(row[0]) is None:
        return (
            "the warehouse changed while dbt ran (another process, e.g. a qkwh compute or "
            "ingest, wrote to it before dbt opened it), so the marts may mix both states: run "
            "`qkwh build` again"
        )
    return None


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
    progress: ProgressCallback | None = None,
    unit_tests: bool = True,
    prepared: bool = False,
) -> BuildResult:
    """Run dbt; when another process holds the warehouse as dbt opens it (before any node has
    run), wait for the file (up to :func:`qkwh.store.lock_wait`) and run dbt again.
    ``unit_tests`` False: the command excludes dbt's unit tests (progress neither plans nor
    counts them).  ``prepared``: the caller has just opened the warehouse for writing (which
    applies the schema), so :func:`_prepare_warehouse` need not open it again."""
    from qkwh import store

    warehouse = warehouse.expanduser().resolve()
    if not prepared:
        _prepare_warehouse(warehouse)
    target_path = Path(target_dir).expanduser().resolve() if target_dir else None
    work = target_path.parent if target_path else dbt_work_dir(warehouse)
    target_path = target_path or work / "target"
    log_path = work / "logs"
    tracker = _Tracker(
        progress, target_path / "manifest.json", log_path / "dbt.log", unit_tests=unit_tests
    )
    wait = store.lock_wait()
    deadline: float | None = None  # from the first time dbt finds the file held
    t0 = time.perf_counter()
    while True:
        try:
            result = _invoke_dbt(
                warehouse, command_args, target_path, log_path, log_sink, progress, tracker
            )
        except _LockedAtOpen as locked:
            if deadline is None:
                deadline = time.monotonic() + wait
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WarehouseLockedError(
                    _lock_message(warehouse, locked.detail, waited=wait)
                ) from None
            holder = re.search(r"PID (\d+)", locked.detail)
            note = (
                f"dbt: warehouse {warehouse} is held by another process"
                f"{f' (PID {holder.group(1)})' if holder else ''}; waiting up to "
                f"{remaining:.0f} s for it ($QKWH_LOCK_TIMEOUT)"
            )
            if log_sink is not None:
                log_sink(note)
            elif progress is None:
                log.warning("%s", note)
            tracker.emit("waiting", message=note)
            try:  # returns as soon as the file can be opened for writing
                store.connect(warehouse, wait=remaining, schema=False).close()
            except WarehouseLockedError:
                raise WarehouseLockedError(
                    _lock_message(warehouse, locked.detail, waited=wait)
                ) from None
            continue
        return dataclasses.replace(result, seconds=time.perf_counter() - t0)


class _LockedAtOpen(Exception):
    """dbt could not open the warehouse (another process holds it) and ran no node."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


def _invoke_dbt(
    warehouse: Path,
    command_args: list[str],
    target_path: Path,
    log_path: Path,
    log_sink: LogSink | None,
    progress: ProgressCallback | None,
    tracker: _Tracker,
) -> BuildResult:
    from dbt.cli.main import dbtRunner  # heavy import: only when a build is asked for

    profiles_dir = _write_profiles(log_path.parent)
    command = " ".join(itertools.takewhile(lambda a: not a.startswith("-"), command_args))

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
        tracker.on_event(event)
        if info.level in ("info", "warn", "error") and info.msg.strip():
            messages.append(info.msg)
            if log_sink is not None:
                log_sink(info.msg)
            elif progress is None:
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
        detail = next(t for t in texts if _is_lock_message(t))
        if not any(n.ok for n in nodes):
            raise _LockedAtOpen(detail)
        raise WarehouseLockedError(_lock_message(warehouse, detail))
    fatal = next((c for c in map(_fatal_cause, texts) if c is not None), None)
    if fatal is not None and not res.success:
        built = sum(1 for n in nodes if n.ok and n.resource_type in ("model", "seed"))
        raise QkwhError(
            f"dbt {command} stopped: {fatal} writing {warehouse} or its dbt folder "
            f"{log_path.parent}; the {built} table(s) built before are kept and nothing is "
            f"half-written: free space and run it again (log: {log_path / 'dbt.log'})"
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


def _lock_message(warehouse: Path, detail: str, waited: float | None = None) -> str:
    pid = re.search(r"PID (\d+)", detail)
    holder = f" (held by PID {pid.group(1)})" if pid else ""
    after = f" (waited {waited:g} s; $QKWH_LOCK_TIMEOUT sets how long)" if waited else ""
    return (
        f"warehouse {warehouse} is locked by another process{holder}{after}; "
        "wait for it to finish or close it, then run the build again"
    )


def _failure_error(result: BuildResult) -> QkwhError:
    failed = result.failed
    if not failed:
        err = QkwhError(f"dbt {result.command} failed (log: {result.log_path / 'dbt.log'})")
    else:
        described = []
        for n in failed[:6]:
            if n.detail:
                what = n.detail
            elif n.resource_type in ("test", "unit_test") and n.failures:
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
