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
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from qkwh import store
from qkwh.analyses import registry
from qkwh.compute.executors import Executor, make_executor
from qkwh.compute.frequencies import ROPE_ANALYSIS, load_rope_planes, unknown_frequency_warning
from qkwh.compute.units import HeadUnit, balance_tail, code_version, plan
from qkwh.compute.writer import (
    BatchWriter,
    check_result_tables,
    record_configs,
    warehouse_errors,
)
from qkwh.errors import (
    InputError,
    NotFoundError,
    QkwhError,
    WarehouseLockedError,
    did_you_mean,
    unknown_names,
)
from qkwh.params import RunConfig
from qkwh.reach_inputs import REACH_ANALYSIS, load_attention_facts, missing_facts_warning


@dataclass
class ComputeReport:
    n_heads: int  # analysable heads in scope
    n_planned: int  # heads with at least one analysis to run
    n_written: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)  # (head label, error)
    config_ids: dict[str, str] = field(default_factory=dict)
    code_version: str = (
        ""  # of the package's analyses (an analysis outside the package adds its own)
    )
    name: str | None = None
    n_batches: int = 0
    #: models left out, with why: their files hold positions at or beyond the context length
    #: (ingested by an older qkwh, which only warned); the analyses cannot place those rows
    excluded: list[tuple[str, str]] = field(default_factory=list)
    write_seconds: float = 0.0  # parent time spent writing batches (open, transaction, close)
    #: (model_id, analysis, why) of analyses left out for a model: the rope analysis for a model
    #: whose RoPE frequencies are unknown (its other analyses run)
    left_out: list[tuple[str, str, str]] = field(default_factory=list)
    #: warnings that leave nothing out: a model with fewer documents than the jackknife's groups
    notes: list[str] = field(default_factory=list)

    @property
    def n_skipped(self) -> int:
        return self.n_heads - self.n_planned


def load_units(con, models: list[str] | None) -> list[HeadUnit]:
    if models:
        known = {r[0] for r in con.execute("SELECT model_id FROM models").fetchall()}
        missing = [m for m in models if m not in known]
        if missing:
            raise NotFoundError(unknown_names("model", missing, sorted(known), " in the warehouse"))
    rows = con.execute(store.load_sql("compute_heads"), [models or None]).fetchall()
    return [HeadUnit(*r) for r in rows]


def out_of_range_models(con, models: list[str] | None) -> list[tuple[str, str]]:
    """(model_id, why) of the models whose files reach the context length: left out of compute."""
    rows = con.execute(store.load_sql("models_out_of_range"), [models or None]).fetchall()
    return [
        (
            m,
            f"model {m!r} is left out: its files hold positions up to {pos}, at or beyond its "
            f"context length {ctx}, which the analyses cannot place (an older qkwh ingested them); "
            f"`qkwh remove {m}` and ingest data within the context, or give the model's true "
            "context length in configs/models.csv",
        )
        for m, pos, ctx in rows
    ]


JACKKNIFE_ANALYSIS = "uncertainty"


def few_documents(con, models: list[str] | None, config: RunConfig) -> list[tuple[str, str]]:
    """(model_id, warning) of the models whose files hold fewer examples (documents) than the
    jackknife's ``document_groups``: the groups beyond the documents are empty, so the document
    SE rests on fewer groups than asked (the marts record how many, as n_document_groups)."""
    groups = int(config.params_of(JACKKNIFE_ANALYSIS).document_groups)
    return [
        (
            m,
            f"model {m!r} holds {n} document(s) per file, fewer than "
            f"uncertainty.document_groups={groups}: at least {groups - n} group(s) stay empty "
            f"and its document SE rests on at most {n}",
        )
        for m, n in con.execute(store.load_sql("models_examples"), [models or None]).fetchall()
        if n < groups
    ]


@contextlib.contextmanager
def compute_lock(warehouse: str | Path | None) -> Iterator[None]:
    """Hold ``<warehouse>.compute.lock`` for the run (removed at the end): a second compute on
    the same warehouse would interleave its batches with ours.  The OS releases the lock when
    the process dies, even by kill -9 (the file then stays, unlocked, and is reused).

    The same file reached through another path (a hard link) is caught by a second lock named
    after the file's device and inode in the temporary folder.  A folder where the lock file
    cannot be created (read-only, full) fails with one line naming it.
    """
    try:
        import fcntl  # noqa: F401
    except ImportError:  # pragma: no cover - Windows: no second-compute guard
        yield
        return
    wh = store.resolve_warehouse(warehouse)
    path = wh.with_name(wh.name + ".compute.lock")
    try:
        beside = _lock(path, wh, required=True)
    except OSError as exc:
        raise QkwhError(
            f"cannot compute in {wh}: cannot create its lock file {path} ({exc.strerror}); "
            "compute writes the warehouse and files beside it, so its folder must be writable"
        ) from None
    try:
        st = os.stat(wh)
        inode = Path(tempfile.gettempdir()) / f"qkwh-compute-{st.st_dev}-{st.st_ino}.lock"
        try:
            same_file = _lock(inode, wh, required=False)
        except OSError:  # no usable temporary folder: only the lock beside the warehouse guards
            same_file = None
        try:
            yield
        finally:
            if same_file is not None:
                _unlock(inode, same_file)
    finally:
        _unlock(path, beside)


def _lock(path: Path, wh: Path, *, required: bool):
    """Open and lock ``path`` (exclusive, without waiting); raise WarehouseLockedError naming the
    process that holds it.  The file records our pid and warehouse path (when we may write it)."""
    import fcntl

    while True:
        try:
            fh = open(path, "a+")  # noqa: SIM115 - held for the run
        except PermissionError:
            if required:
                raise
            fh = open(path)  # noqa: SIM115 - another user's lock file: reading is enough to lock it
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().split("\t")
            fh.close()
            pid = holder[0].strip()
            other = holder[1].strip() if len(holder) > 1 else ""
            via = f" through {other}, the same file" if other and other != str(wh) else ""
            raise WarehouseLockedError(
                f"another qkwh compute{f' (process {pid})' if pid else ''} is running on "
                f"{wh}{via}; wait for it to finish"
            ) from None
        try:  # the holder before us may have removed the file between our open and our lock
            same = os.fstat(fh.fileno()).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            if fh.writable():
                fh.seek(0)
                fh.truncate()
                fh.write(f"{os.getpid()}\t{wh}")
                fh.flush()
            return fh
        fh.close()


def _unlock(path: Path, fh) -> None:
    """Remove and release a lock file.  A file that cannot be removed (its folder became
    read-only) stays, unlocked, and is reused; that never hides the run's own error."""
    try:
        with contextlib.suppress(OSError):
            path.unlink()
    finally:
        fh.close()


def _make_named_set_current(con, config_ids: dict[str, str], models: list[str] | None) -> None:
    """A named compute makes its set current for the models in scope that already hold rows of
    it, even when every head is skipped as unchanged (heads written later do the same as they
    are written)."""
    import datetime as dt

    rows = con.execute(
        "SELECT DISTINCT model_id, analysis, config_id FROM head_runs "
        "WHERE list_contains($1, config_id) AND ($2 IS NULL OR list_contains($2, model_id))",
        [list(config_ids.values()), models or None],
    ).fetchall()
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    hits = [[m, a, c, now] for m, a, c in rows if config_ids.get(a) == c]
    if hits:
        con.executemany(store.load_sql("set_current_config"), hits)


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
    """Compute ``analyses`` (default: every registered one not declared opt-in) for every analysable head of
    ``models`` (default: all).

    ``executor``: an :class:`Executor`, or its kind (``"pool"``, the default, or ``"ray"`` with
    ``ray_address``); results never depend on it.  ``name`` labels this parameter set in
    run_config (``qkwh runs``).  ``make_current`` (default) makes this set the one the marts
    report for the models computed; False keeps their current set (a model without one gets
    this one).  Batches hold up to ``batch_heads`` heads and are written at least every
    ``batch_seconds`` while results arrive.
    """
    if name is not None:
        from qkwh.runs import check_name

        check_name(name)
    config = (config or RunConfig()).resolved()
    try:
        config.validate()
    except ValueError as exc:
        raise InputError(f"run config: {exc}") from None
    known = registry.names()
    analyses = registry.default_names() if analyses is None else tuple(analyses)
    bad = [a for a in analyses if a not in known]
    if bad or not analyses:
        raise InputError(
            f"unknown analysis {', '.join(f'{b!r}{did_you_mean(b, known)}' for b in bad) or '(none)'}; "
            f"choose from {', '.join(known)}"
        )
    wh = store.resolve_warehouse(warehouse)
    if not wh.exists():
        raise NotFoundError(
            f"no warehouse at {wh}: run `qkwh ingest SOURCE` first, or pass --warehouse"
        )
    code_versions = {a: code_version(a) for a in analyses}
    config_ids = {a: config.fingerprint(a, code_versions[a]) for a in analyses}
    with compute_lock(wh):
        with warehouse_errors(wh):
            con = store.connect(wh)
            try:
                check_result_tables(con, wh, analyses)
                units = load_units(con, models)
                excluded = out_of_range_models(con, models)
                if excluded:
                    units = [u for u in units if u.model_id not in dict(excluded)]
                    if not units:
                        raise InputError(
                            "nothing to compute: " + "; ".join(why for _, why in excluded)
                        )
                done = {
                    (m, layer, q, a, cid): fp
                    for m, layer, q, a, cid, fp in con.execute(
                        store.load_sql("head_runs_current"), [models or None]
                    ).fetchall()
                }
                catalog = dict(
                    con.execute("SELECT model_id, source_fingerprint FROM models").fetchall()
                )
                rope, left_out = {}, []
                if ROPE_ANALYSIS in analyses:
                    rope = load_rope_planes(con, models)
                    known_rope = {m for m, _ in rope}
                    left_out = [
                        (m, ROPE_ANALYSIS, unknown_frequency_warning(m))
                        for m in sorted({u.model_id for u in units} - known_rope)
                    ]
                attention = load_attention_facts(con, models) if REACH_ANALYSIS in analyses else {}
                if REACH_ANALYSIS in analyses:
                    no_facts = sorted({u.model_id for u in units} - set(attention))
                    left_out += [
                        (m, REACH_ANALYSIS, missing_facts_warning(no_facts)) for m in no_facts
                    ]
                notes = few_documents(con, models, config) if JACKKNIFE_ANALYSIS in analyses else []
                tasks = plan(
                    units,
                    done,
                    tuple(analyses),
                    config_ids,
                    config,
                    force=force,
                    rope=rope,
                    left_out={
                        m: tuple(a for n, a, _ in left_out if n == m) for m, _, _ in left_out
                    },
                    attention=attention,
                )
                report = ComputeReport(
                    len(units),
                    sum(t.n_heads for t in tasks),
                    config_ids=config_ids,
                    code_version=code_version(),
                    name=name,
                    excluded=excluded,
                    left_out=left_out,
                    notes=[n for m, n in notes if m in {u.model_id for u in units}],
                )
                with store.transaction(con):
                    record_configs(con, config, config_ids, code_versions, name)
                    if name is not None and make_current:
                        _make_named_set_current(con, config_ids, models)
            finally:
                con.close()  # readers get in while the workers compute
        if on_start:
            on_start(report.n_planned)
        if not tasks:
            return report
        # the workers' module (the analyses, SciPy) is imported only when there is work
        from qkwh.compute.work import run_group

        n_workers = min(
            max(workers if workers is not None else (os.cpu_count() or 1), 1), len(tasks)
        )
        ex = (
            executor
            if executor is not None and not isinstance(executor, str)
            else make_executor(n_workers, executor or "pool", ray_address)
        )
        tasks = balance_tail(tasks, n_workers)
        # (model, layer, q_head, analysis, config_id) that already have rows
        writer = BatchWriter(
            wh,
            config_ids,
            set(done),
            catalog=catalog,
            make_current=make_current,
            max_heads=batch_heads,
            max_seconds=batch_seconds,
            threads=1 if n_workers > 1 else None,
        )  # the workers have the cores
        try:
            unfinished = len(tasks)
            for outcomes in ex.map_unordered(run_group, tasks):
                unfinished -= 1
                report.failures += [(o.unit.label, o.error) for o in outcomes if o.error]
                writer.add(outcomes)
                if on_head:
                    for o in outcomes:
                        on_head(o.unit.label)
                if 0 < unfinished < n_workers:
                    # no task left to start: a worker is idle, so the heads received so far are
                    # written now, on its core, and the batch left after the last task is small
                    writer.flush()
            release = getattr(ex, "release", None)
            if release is not None:
                release()  # the workers exit while the last batch is written
            writer.flush()
        finally:
            try:
                ex.close()
            finally:
                writer.close()  # the heads received so far are whole: write them (Ctrl-C too)
                report.n_written = writer.n_written
                report.n_batches = writer.n_batches
                report.write_seconds = writer.seconds
        return report
