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
import dataclasses
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
    stale: str | None = None  # why the marts are stale already (see build()), or None

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
        state = "FAILED" if not self.success else "done but STALE" if self.stale else "ok"
        line = f"dbt {self.command} {state} in {self.seconds:.1f}s: " + ", ".join(parts)
        return line + (f"; stale: {self.stale}" if self.stale else "")

    def __str__(self) -> str:
        return self.summary


#: how a kind of node is named for a user (dbt's resource types)
KIND_NAMES = {
    "model": ("model", "models"),
    "test": ("data test", "data tests"),
    "unit_test": ("unit test", "unit tests"),
    "seed": ("seed", "seeds"),
    "snapshot": ("snapshot", "snapshots"),
}
_KIND_ORDER = ("model", "test", "unit_test", "seed", "snapshot")
_FAILED = ("error", "fail", "runtime error")


def _plural(n: int, kind: str) -> str:
    one, many = KIND_NAMES.get(kind, (kind, kind + "s"))
    return f"{n} {one if n == 1 else many}"


@dataclass(frozen=True)
class BuildProgress:
    """Where a running build stands, from dbt's structured events (no log text is parsed).

    ``event`` says what just happened:

    * ``"planned"``: dbt has selected its nodes (once per build): ``total`` nodes will run,
      ``planned`` counts them by kind (``model``, ``test``, ``unit_test``, ``seed``,
      ``snapshot``; empty when a ``--select`` hides the kinds);
    * ``"started"``: the node ``current`` started (``running`` lists every node running now);
    * ``"finished"``: ``node`` finished (``done`` counts the finished nodes by kind);
    * ``"waiting"``: another process holds the warehouse as dbt opens it; ``message`` says who
      and for how long the build waits before giving up.

    ``failures`` holds every node that failed so far.  ``line`` is the one line a console should
    print for this event, or None: a node that failed, warned or was skipped, the plan and the
    wait; from a fatal error on (disk full), which the build's error names once, no node's.
    """

    event: str
    total: int
    planned: dict[str, int]
    done: dict[str, int]
    failures: tuple[NodeResult, ...]
    running: tuple[str, ...]
    current: str | None = None
    node: NodeResult | None = None
    message: str | None = None
    log_file: Path | None = None

    @property
    def n_done(self) -> int:
        """Finished nodes, all kinds."""
        return sum(self.done.values())

    def plan(self) -> str:
        """``524 nodes: 66 models, 441 data tests, 12 unit tests, 5 seeds``."""
        head = f"{self.total} node{'s' if self.total != 1 else ''}"
        kinds = [_plural(self.planned[k], k) for k in _KIND_ORDER if self.planned.get(k)]
        kinds += [_plural(n, k) for k, n in sorted(self.planned.items()) if k not in _KIND_ORDER]
        return head + (": " + ", ".join(kinds) if kinds else "")

    @property
    def line(self) -> str | None:
        if self.event == "planned":
            return f"dbt: building {self.plan()}"
        if self.event == "waiting":
            return self.message
        if self.event == "finished" and self.node is not None and self.message is not None:
            return self.message
        return None


ProgressCallback = Callable[[BuildProgress], None]


class _Tracker:
    """Turns dbt's events into :class:`BuildProgress` calls (one at a time: dbt reports from
    its worker threads)."""

    def __init__(self, callback: ProgressCallback | None, manifest: Path, log_file: Path):
        self.callback = callback
        self.manifest = manifest
        self.log_file = log_file
        self.lock = threading.Lock()
        self.total = 0
        self.planned: dict[str, int] = {}
        self.announced = False
        self.fatal: str | None = None
        self.reset()

    def reset(self) -> None:
        """A new dbt invocation (after waiting for the warehouse): counts start again."""
        self.done: Counter[str] = Counter()
        self.failures: list[NodeResult] = []
        self.running: dict[str, str] = {}

    def emit(self, event: str, **kw: Any) -> None:
        if self.callback is None:
            return
        self.callback(
            BuildProgress(
                event=event,
                total=self.total,
                planned=dict(self.planned),
                done=dict(self.done),
                failures=tuple(self.failures),
                running=tuple(self.running.values()),
                log_file=self.log_file,
                **kw,
            )
        )

    def on_event(self, event: Any) -> None:
        name = event.info.name
        if name not in ("ConcurrencyLine", "NodeStart", "NodeFinished"):
            return
        with self.lock:
            if name == "ConcurrencyLine":
                self.reset()
                self.planned = _planned_kinds(self.manifest, int(event.data.node_count))
                self.total = sum(self.planned.values()) or int(event.data.node_count)
                if not self.announced:
                    self.announced = True
                    self.emit("planned")
                return
            info = event.data.node_info
            if info.materialized == "ephemeral":
                return
            if name == "NodeStart":
                self.running[info.unique_id] = info.node_name
                self.emit("started", current=info.node_name)
                return
            self.running.pop(info.unique_id, None)
            node = _node_from_event(info, event.data.run_result)
            self.done[node.resource_type] += 1
            self.total = max(self.total, sum(self.done.values()))  # a --select's unit tests
            line = None
            if node.status in _FAILED:
                self.failures.append(node)
                fatal = _fatal_cause(node.message or "")
                if fatal is not None:  # the build's error says it once, at the end
                    self.fatal = self.fatal or fatal
                elif self.fatal is None:
                    line = f"ERROR {_kind_name(node)} {node.name}: {_cause(node.message or node.status)}"
            elif node.status in ("warn", "skipped") and self.fatal is None:
                what = "WARN" if node.status == "warn" else "SKIP"
                detail = (
                    f": {_cause(node.message)}" if node.message and node.status == "warn" else ""
                )
                line = f"{what} {_kind_name(node)} {node.name}{detail}"
            self.emit("finished", node=node, message=line)


def _kind_name(node: NodeResult) -> str:
    return KIND_NAMES.get(node.resource_type, (node.resource_type, ""))[0]


def _node_from_event(info: Any, run_result: Any) -> NodeResult:
    status = str(getattr(run_result, "status", "") or getattr(info, "node_status", "")).lower()
    failures = getattr(run_result, "num_failures", None)
    return NodeResult(
        unique_id=info.unique_id,
        name=info.node_name,
        resource_type=info.resource_type,
        status=status,
        message=getattr(run_result, "message", None) or None,
        seconds=float(getattr(run_result, "execution_time", 0.0) or 0.0),
        failures=int(failures) if failures else None,
    )


def _planned_kinds(manifest: Path, total: int) -> dict[str, int]:
    """Nodes by kind that a full build runs, from the manifest dbt wrote when it parsed the
    project; empty when they do not add up to the ``total`` dbt selected (a ``--select``).
    dbt's own count leaves the unit tests out, although `dbt build` runs them."""
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return {}
    kinds: Counter[str] = Counter()
    for node in data.get("nodes", {}).values():
        kind = node.get("resource_type")
        materialized = (node.get("config") or {}).get("materialized")
        if kind in KIND_NAMES and materialized != "ephemeral":
            kinds[kind] += 1
    kinds["unit_test"] += len(data.get("unit_tests", {}))
    planned = {k: n for k, n in kinds.items() if n}
    n = sum(planned.values())
    return planned if total in (n, n - planned.get("unit_test", 0)) else {}


#: messages of errors after which every further node fails for the same reason
_FATAL = (
    (re.compile(r"no space left on device", re.I), "the disk is full (no space left on device)"),
    (re.compile(r"file too large", re.I), "a file grew past the size allowed (file too large)"),
    (re.compile(r"disk quota exceeded", re.I), "the disk quota is exceeded"),
    (re.compile(r"read-only file system", re.I), "the file system is read-only"),
)


def _fatal_cause(text: str) -> str | None:
    for pattern, cause in _FATAL:
        if pattern.search(text):
            return cause
    return None


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
    _refuse_during_compute(warehouse)
    build_id = _start_build(warehouse)
    stale = None
    try:
        result = _run_dbt(
            Path(warehouse), args, target_dir=target_dir, log_sink=log_sink, progress=progress
        )
    finally:
        if build_id is not None:
            stale = _finish_build(warehouse, build_id)
    if stale:
        result = dataclasses.replace(result, stale=stale)
    if not result.success:
        raise _failure_error(result)
    return result


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
) -> BuildResult:
    """Run dbt; when another process holds the warehouse as dbt opens it (before any node has
    run), wait for the file (up to :func:`qkwh.store.lock_wait`) and run dbt again."""
    from qkwh import store

    warehouse = warehouse.expanduser().resolve()
    _prepare_warehouse(warehouse)
    target_path = Path(target_dir).expanduser().resolve() if target_dir else None
    work = target_path.parent if target_path else dbt_work_dir(warehouse)
    target_path = target_path or work / "target"
    log_path = work / "logs"
    tracker = _Tracker(progress, target_path / "manifest.json", log_path / "dbt.log")
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
