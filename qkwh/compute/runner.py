"""`qkwh compute`: plan the heads that need work, run them on an executor, write each head.

The parent process is the only writer.  The heads of a unit of work (those sharing a k file) are
written in one transaction, each head whole, so an interrupted run (Ctrl-C, kill -9) leaves
whole heads only, and the next run resumes where it stopped: heads whose config_id and input
fingerprint are recorded in head_runs are skipped.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from qkwh import store
from qkwh.compute import registry
from qkwh.compute.executors import Executor, make_executor
from qkwh.compute.units import HeadUnit, code_version, plan
from qkwh.compute.work import run_group
from qkwh.compute.writer import record_configs, write_heads
from qkwh.errors import InputError, NotFoundError, QkwhError
from qkwh.params import RunConfig


@dataclass
class ComputeReport:
    n_heads: int  # analysable heads in scope
    n_planned: int  # heads with at least one analysis to run
    n_written: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)  # (head label, error)
    config_ids: dict[str, str] = field(default_factory=dict)
    code_version: str = ""  # of the package's analyses (an analysis outside the package adds its own)

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
    on_start: Callable[[int], None] | None = None,
    on_head: Callable[[str], None] | None = None,
) -> ComputeReport:
    """Compute ``analyses`` (default: every registered one) for every analysable head of
    ``models`` (default: all).

    ``executor``: an :class:`Executor`, or its kind (``"pool"``, the default, or ``"ray"`` with
    ``ray_address``); results never depend on it.
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
    code_versions = {a: code_version(a) for a in analyses}
    config_ids = {a: config.fingerprint(a, code_versions[a]) for a in analyses}
    con = store.connect(warehouse)
    try:
        units = load_units(con, models)
        done = {(m, l, q, a): (cid, fp) for m, l, q, a, cid, fp in
                con.execute(store.load_sql("head_runs_current"), [models or None]).fetchall()}
        tasks = plan(units, done, tuple(analyses), config_ids, config, force=force)
        report = ComputeReport(len(units), sum(t.n_heads for t in tasks), config_ids=config_ids,
                               code_version=code_version())
        with store.transaction(con):
            record_configs(con, config, config_ids, code_versions)
        if on_start:
            on_start(report.n_planned)
        if not tasks:
            return report
        n_workers = min(max(workers if workers is not None else (os.cpu_count() or 1), 1), len(tasks))
        if n_workers > 1:  # the workers have the cores; the parent only writes
            con.execute("SET threads TO 1")
        ex = executor if executor is not None and not isinstance(executor, str) else \
            make_executor(n_workers, executor or "pool", ray_address)
        try:
            previous = set(done)  # (model_id, layer, q_head, analysis) that already have rows
            for outcomes in ex.map_unordered(run_group, tasks):
                report.failures += [(o.unit.label, o.error) for o in outcomes if o.error]
                report.n_written += write_heads(con, [o for o in outcomes if not o.error], config_ids, previous)
                if on_head:
                    for o in outcomes:
                        on_head(o.unit.label)
        finally:
            ex.close()
        return report
    finally:
        con.close()
