"""`qkwh compute`: plan the heads that need work, run them on an executor, write them in batches.

The parent process is the only writer.  Finished heads are written in batches (several units of
work per transaction, each head whole, head_runs in the same transaction), and the warehouse is
open only while a batch is written (:class:`~qkwh.compute.writer.BatchWriter`), so readers can
query it while a long compute runs.  An interrupted run (Ctrl-C, kill -9) leaves whole heads
only, and the next run resumes where it stopped: heads whose parameter set (config_id) and
input fingerprint are recorded in head_runs are skipped.  Each parameter set keeps its own rows;
the set computed becomes the one the marts report (current_config) unless ``make_current`` is
False.  One compute runs per warehouse at a time (a lock file beside it, released by the OS
when the process dies).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from qkwh import store
from qkwh.compute import registry
from qkwh.compute.executors import Executor, make_executor
from qkwh.compute.units import HeadUnit, code_version, plan
from qkwh.compute.work import run_group
from qkwh.compute.writer import BatchWriter, record_configs
from qkwh.errors import InputError, NotFoundError, QkwhError, WarehouseLockedError
from qkwh.params import RunConfig


@dataclass
class ComputeReport:
    n_heads: int  # analysable heads in scope
    n_planned: int  # heads with at least one analysis to run
    n_written: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)  # (head label, error)
    config_ids: dict[str, str] = field(default_factory=dict)
    code_version: str = ""  # of the package's analyses (an analysis outside the package adds its own)
    name: str | None = None
    n_batches: int = 0
    write_seconds: float = 0.0  # parent time spent writing batches (open, transaction, close)

    @property
    def n_skipped(self) -> int:
        return self.n_heads - self.n_planned


def load_units(con, models: list[str] | None) -> list[HeadUnit]:
    if models:
        known = {r[0] for r in con.execute("SELECT model_id FROM models").fetchall()}
        missing = [m for m in models if m not in known]
        if missing:
            raise NotFoundError(f"no model {', '.join(map(repr, missing))} in the warehouse "
                                f"(have: {', '.join(sorted(known)) or 'none'})")
    rows = con.execute(store.load_sql("compute_heads"), [models or None]).fetchall()
    return [HeadUnit(*r) for r in rows]


@contextlib.contextmanager
def compute_lock(warehouse: str | Path | None) -> Iterator[None]:
    """Hold ``<warehouse>.compute.lock`` for the run (removed at the end): a second compute on
    the same warehouse would interleave its batches with ours.  The OS releases the lock when
    the process dies, even by kill -9 (the file then stays, unlocked, and is reused)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no second-compute guard
        yield
        return
    wh = store.resolve_warehouse(warehouse)
    path = wh.with_name(wh.name + ".compute.lock")
    while True:
        fh = open(path, "a+")  # noqa: SIM115 (held open: the lock lives as long as the handle)
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            pid = fh.read().strip()
            fh.close()
            raise WarehouseLockedError(f"another qkwh compute{f' (process {pid})' if pid else ''} is running on "
                                       f"{wh}; wait for it to finish") from None
        try:  # the holder before us may have removed the file between our open and our lock
            same = os.fstat(fh.fileno()).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        fh.close()
    try:
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        fh.close()


def compute(
    warehouse: str | Path | None = None,
    *,
    models: list[str] | None = None,
    analyses: tuple[str, ...] | None = None,
    config: RunConfig | None = None,
    workers: int | None = None,
    executor: Executor | str | None = None,
    ray_address: str | None = None,
    force: bool = False,
    name: str | None = None,
    make_current: bool = True,
    batch_heads: int = 1024,
    batch_seconds: float = 30.0,
    on_start: Callable[[int], None] | None = None,
    on_head: Callable[[str], None] | None = None,
) -> ComputeReport:
    """Compute ``analyses`` (default: every registered one) for every analysable head of
    ``models`` (default: all).

    ``executor``: an :class:`Executor`, or its kind (``"pool"``, the default, or ``"ray"`` with
    ``ray_address``); results never depend on it.  ``name`` labels this parameter set in
    run_config (``qkwh runs``).  ``make_current`` (default) makes this set the one the marts
    report for the models computed; False keeps their current set (a model without one gets
    this one).  Batches hold up to ``batch_heads`` heads and are written at least every
    ``batch_seconds`` while results arrive.
    """
    config = (config or RunConfig()).resolved()
    try:
        config.validate()
    except ValueError as exc:
        raise InputError(f"run config: {exc}") from None
    known = registry.names()
    analyses = known if analyses is None else tuple(analyses)
    bad = [a for a in analyses if a not in known]
    if bad or not analyses:
        raise QkwhError(f"unknown analysis {', '.join(bad) or '(none)'}; choose from {', '.join(known)}")
    wh = store.resolve_warehouse(warehouse)
    if not wh.exists():
        raise NotFoundError(f"no warehouse at {wh}: run `qkwh ingest SOURCE` first, or pass --warehouse")
    code_versions = {a: code_version(a) for a in analyses}
    config_ids = {a: config.fingerprint(a, code_versions[a]) for a in analyses}
    with compute_lock(wh):
        con = store.connect(wh)
        try:
            units = load_units(con, models)
            done = {(m, layer, q, a, cid): fp for m, layer, q, a, cid, fp in
                    con.execute(store.load_sql("head_runs_current"), [models or None]).fetchall()}
            catalog = dict(con.execute("SELECT model_id, source_fingerprint FROM models").fetchall())
            tasks = plan(units, done, tuple(analyses), config_ids, config, force=force)
            report = ComputeReport(len(units), sum(t.n_heads for t in tasks), config_ids=config_ids,
                                   code_version=code_version(), name=name)
            with store.transaction(con):
                record_configs(con, config, config_ids, code_versions, name)
        finally:
            con.close()  # readers get in while the workers compute
        if on_start:
            on_start(report.n_planned)
        if not tasks:
            return report
        n_workers = min(max(workers if workers is not None else (os.cpu_count() or 1), 1), len(tasks))
        ex = executor if executor is not None and not isinstance(executor, str) else \
            make_executor(n_workers, executor or "pool", ray_address)
        # (model, layer, q_head, analysis, config_id) that already have rows
        writer = BatchWriter(wh, config_ids, set(done), catalog=catalog, make_current=make_current,
                             max_heads=batch_heads, max_seconds=batch_seconds,
                             threads=1 if n_workers > 1 else None)  # the workers have the cores
        try:
            for outcomes in ex.map_unordered(run_group, tasks):
                report.failures += [(o.unit.label, o.error) for o in outcomes if o.error]
                writer.add(outcomes)
                if on_head:
                    for o in outcomes:
                        on_head(o.unit.label)
        finally:
            try:
                ex.close()
            finally:
                writer.close()  # the heads received so far are whole: write them (Ctrl-C too)
                report.n_written = writer.n_written
                report.n_batches = writer.n_batches
                report.write_seconds = writer.seconds
        return report
