"""What a dbt build reports: each node's outcome, the build's result and its progress.

:class:`NodeResult` and :class:`BuildResult` are what :func:`qkwh.build.build` returns;
:class:`BuildProgress` is what it passes to a progress callback as dbt plans, starts and finishes
each node, built from dbt's structured events by :class:`_Tracker` (no log text is parsed).
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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
    #: for a failed ``table_checks`` test: the SQL that lists its failing checks (dbt's compiled
    #: test), so that the build can name them; None otherwise
    check_sql: str | None = field(default=None, repr=False, compare=False)
    #: what failed, in words (a failed ``table_checks`` test: each failing check and its rows)
    detail: str | None = None

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

    def __init__(
        self,
        callback: ProgressCallback | None,
        manifest: Path,
        log_file: Path,
        *,
        unit_tests: bool = True,
    ):
        self.callback = callback
        self.manifest = manifest
        self.unit_tests = unit_tests  # False: the build excludes them (not planned, not counted)
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
                self.planned = _planned_kinds(
                    self.manifest, int(event.data.node_count), unit_tests=self.unit_tests
                )
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


def _planned_kinds(manifest: Path, total: int, *, unit_tests: bool = True) -> dict[str, int]:
    """Nodes by kind that a full build runs, from the manifest dbt wrote when it parsed the
    project; empty when they do not add up to the ``total`` dbt selected (a ``--select``).
    dbt's own count leaves the unit tests out, although `dbt build` runs them (unless
    ``unit_tests`` is False: the build excludes them)."""
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
    if unit_tests:
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


def _node_results(run_result: Any) -> tuple[NodeResult, ...]:
    results = getattr(run_result, "results", None) or []
    out = []
    for r in results:
        node = getattr(r, "node", None)
        if node is None:
            continue
        status = getattr(r.status, "value", str(r.status))
        test = getattr(node, "test_metadata", None)
        checks = getattr(test, "name", None) == "table_checks" and str(status).lower() == "fail"
        out.append(
            NodeResult(
                unique_id=node.unique_id,
                name=node.name,
                resource_type=getattr(node.resource_type, "value", str(node.resource_type)),
                status=str(status).lower(),
                message=r.message,
                seconds=float(r.execution_time or 0.0),
                failures=r.failures,
                check_sql=getattr(node, "compiled_code", None) if checks else None,
            )
        )
    return tuple(out)


def _cause(text: str) -> str:
    """The informative line of a dbt error message (skipping 'Runtime Error in model x (...)')."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for line in lines:
        if not re.match(r"^(Runtime|Database|Compilation|Dependency) Error in ", line):
            return line[:300]
    return lines[0][:300] if lines else ""
