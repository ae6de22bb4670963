"""The measurements of the compute benchmark: executor wrapper, synthetic models, timed runs,
scaling with vectors per head, the profile, the machine and its GEMM rate.

Imported by ``bench/run.py`` (and, through it, by the pool's workers: spawn re-imports the main
module).  Its top level keeps to what a compute worker imports anyway, so the workers' memory is
the compute's; DuckDB and ingest are imported inside the functions that need them.
"""

from __future__ import annotations

import cProfile
import functools
import hashlib
import io
import json
import math
import os
import platform
import pstats
import shutil
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from qkwh.analyses import precompute, registry
from qkwh.compute.executors import make_executor
from qkwh.compute.memory import keep_freed_memory
from qkwh.compute.units import GroupTask, code_version, plan
from qkwh.compute.work import HeadOutcome, group_key_rows, head_data, run_analyses
from qkwh.params import RunConfig
from qkwh.sniffed.reader import read_file

REPO = Path(__file__).resolve().parents[1]
SYNTH_CODE = ("synth.py", "synth_geometry.py")  # the generator: a change to it regenerates the data
BENCH = REPO / "bench"
MiB = 1024 * 1024
#: the shape the targets are set for (bench/README.md)
FULL = {
    "heads": 300,
    "rows": 8000,
    "small_heads": 60,
    "scaling_heads": 16,
    "scaling_rows": "2000,8000,32000",
}

#: the three per-head analyses the runs time together ("all three"): the reference of the cost
#: rule for the default set (an analysis costing at most half of them per head is in it); reach
#: (default) and the opt-in ones (rope, the jackknife) are timed beside them, each alone
ANALYSES: tuple[str, ...] = ("pca", "rotation", "plasticity")
#: the analyses a compute runs when it names none (pca, rotation, plasticity and reach): the
#: guard's main compute figure (bench/guard.py)
DEFAULT_ANALYSES: tuple[str, ...] = registry.default_names()


# ---------------------------------------------------------------------------------------------
# memory
# ---------------------------------------------------------------------------------------------
def _status_kib(field_name: str) -> int:
    """A ``kB`` field of /proc/self/status (0 where /proc is unavailable)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def peak_rss() -> int:
    """Peak resident set of this process in bytes (VmHWM; falls back to ru_maxrss).

    VmHWM belongs to the process's own address space, so a spawned worker does not inherit the
    parent's peak the way ``ru_maxrss`` can across fork+exec.
    """
    kib = _status_kib("VmHWM")
    if not kib:
        import resource

        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib * 1024


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux ``clear_refs`` 5); False where unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------
# executor wrapper: same pool, plus per-worker peak memory, CPU time and parent-side time
# ---------------------------------------------------------------------------------------------
def system_busy_s() -> float:
    """CPU seconds all cores of the machine have spent busy since boot (/proc/stat; 0 if absent)."""
    try:
        with open("/proc/stat") as fh:
            f = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = f[3] + (f[4] if len(f) > 4 else 0)
    return (sum(f[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _measured_call(fn, item):
    c0 = time.process_time()
    result = fn(item)
    c1 = time.process_time()
    return os.getpid(), peak_rss(), (c1 - c0, c1), result


class MeasuredExecutor:
    """Wraps an executor from ``make_executor``: every task also reports its worker's pid, the
    worker's peak RSS and the task's duration.  The time the consumer (the runner's DuckDB writes)
    spends between two results is added up as ``consumer_s``.  ``cpu_s`` adds up the workers' CPU
    time (``process_time``) of every task: unlike wall time, it is not inflated by other load."""

    def __init__(self, inner):
        self.inner = inner
        self.peaks: dict[int, int] = {}
        self.total_cpu: dict[int, float] = {}  # pid -> the worker's CPU time since it started
        self.cpu_s = 0.0
        self.consumer_s = 0.0
        self.consumer_per_head: list[float] = []  # per result, in arrival order: consumer s / head
        self.tasks = 0

    def map_unordered(self, fn, items):
        for pid, hwm, (secs, total), result in self.inner.map_unordered(
            functools.partial(_measured_call, fn), items
        ):
            self.peaks[pid] = max(self.peaks.get(pid, 0), hwm)
            self.total_cpu[pid] = max(self.total_cpu.get(pid, 0.0), total)
            self.cpu_s += secs
            self.tasks += 1
            t0 = time.perf_counter()
            yield result
            dt_ = time.perf_counter() - t0
            self.consumer_s += dt_
            self.consumer_per_head += [dt_ / max(len(result), 1)] * max(len(result), 1)

    def release(self) -> None:
        release = getattr(self.inner, "release", None)
        if release is not None:
            release()

    def close(self) -> None:
        self.inner.close()


def read_only_group(task: GroupTask) -> list[HeadOutcome]:
    """The baseline task: ``work.run_group`` without the analyses.  Reads the group's k file once
    (``group_key_rows``: the row cap applied once), then each q file, and assembles each head's
    arrays (``head_data``: the q row cap, d check), with
    BLAS pinned to one thread for the task like ``run_group``."""
    from threadpoolctl import threadpool_limits

    outcomes: list[HeadOutcome] = []
    with threadpool_limits(limits=1):
        k_rows = group_key_rows(read_file(task.heads[0].k_path), task.config)
        for unit in task.heads:
            t0 = time.perf_counter()
            head_data(unit, read_file(unit.q_path), k_rows, task.config)
            outcomes.append(HeadOutcome(unit, time.perf_counter() - t0))
    return outcomes


# ---------------------------------------------------------------------------------------------
# synthetic models
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelSpec:
    heads: int
    rows: int
    d: int = 128
    n_q_heads: int = 32
    n_kv_heads: int = 8
    per_layer: int = 30  # query heads selected per layer (the first ones: whole GQA groups)
    context_length: int = 131_072
    bucket_size: int = 8192
    n_examples: int = 500
    seed: int = 0

    @property
    def selection(self) -> list[tuple[int, int]]:
        per = min(self.per_layer, self.n_q_heads)
        return [(i // per, i % per) for i in range(self.heads)]

    @property
    def n_layers(self) -> int:
        return max(layer for layer, _ in self.selection) + 1

    @property
    def n_k_files(self) -> int:
        ratio = self.n_q_heads // self.n_kv_heads
        return len({(layer, h // ratio) for layer, h in self.selection})

    @property
    def n_buckets(self) -> int:
        return math.ceil(self.context_length / self.bucket_size)

    @property
    def key(self) -> str:
        synth = hashlib.sha256(
            b"".join((REPO / "qkwh" / f).read_bytes() for f in SYNTH_CODE)
        ).hexdigest()[:8]
        return (
            f"h{self.heads}-r{self.rows}-d{self.d}-q{self.n_q_heads}kv{self.n_kv_heads}p{self.per_layer}"
            f"-L{self.context_length}-b{self.bucket_size}-e{self.n_examples}-s{self.seed}-synth{synth}"
        )

    @property
    def model_id(self) -> str:
        return f"bench-h{self.heads}-r{self.rows}"

    def describe(self) -> str:
        return (
            f"{self.heads} query heads ({self.n_layers} layer(s) x up to {self.per_layer} of "
            f"{self.n_q_heads} q heads, {self.n_kv_heads} KV heads -> {self.n_k_files} k files), "
            f"{self.rows:,} vectors per file, d = {self.d}, {self.n_buckets} buckets "
            f"(context {self.context_length:,}, bucket {self.bucket_size:,}), {self.n_examples} examples"
        )


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def ensure_dataset(spec: ModelSpec, out: Path, log) -> tuple[Path, float | None]:
    """The model's folder, generated unless cached.  Returns (path, generation seconds or None)."""
    from qkwh.synth import write_dataset

    root = out / "data" / spec.key
    if (root / ".complete").exists():
        return root, None
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    log(f"generating {spec.describe()} ...")
    t0 = time.perf_counter()
    write_dataset(
        tmp,
        model_name=f"synthetic/{spec.model_id}",
        n_layers=spec.n_layers,
        n_q_heads=spec.n_q_heads,
        n_kv_heads=spec.n_kv_heads,
        heads=spec.selection,
        d=spec.d,
        rows_per_file=spec.rows,
        n_examples=spec.n_examples,
        context_length=spec.context_length,
        bucket_size=spec.bucket_size,
        seed=spec.seed,
    )
    secs = time.perf_counter() - t0
    (tmp / ".complete").write_text(json.dumps({"seconds": secs, **asdict(spec)}) + "\n")
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    return root, secs


def generation_seconds(root: Path) -> float | None:
    try:
        return json.loads((root / ".complete").read_text()).get("seconds")
    except (OSError, ValueError):
        return None


def fresh_ingest(spec: ModelSpec, data: Path, out: Path) -> tuple[Path, float]:
    """Ingest into a new warehouse; returns (warehouse file, seconds)."""
    from qkwh.ingest import ingest

    wdir = out / "warehouses" / spec.key
    shutil.rmtree(wdir, ignore_errors=True)
    wdir.mkdir(parents=True)
    db = wdir / "base.duckdb"
    t0 = time.perf_counter()
    rep = ingest(str(data), warehouse=db, model_id=spec.model_id)
    secs = time.perf_counter() - t0
    if rep.n_heads_with_k != spec.heads:
        raise SystemExit(
            f"ingest of {data} found {rep.n_heads_with_k} analysable heads, expected {spec.heads}"
        )
    return db, secs


def plan_tasks(db: Path, model_id: str, config: RunConfig) -> list[GroupTask]:
    """The compute's task list (every head, every analysis, with the layers' RoPE planes and
    the model's sampler facts for reach), planned as ``runner.compute`` does."""
    from qkwh import store
    from qkwh.compute.frequencies import load_rope_planes
    from qkwh.compute.runner import load_units
    from qkwh.reach_inputs import load_attention_facts

    con = store.connect(db, read_only=True)
    try:
        units = load_units(con, [model_id])
        rope = load_rope_planes(con, [model_id])
        attention = load_attention_facts(con, [model_id])
    finally:
        con.close()
    return plan(
        units,
        {},
        ANALYSES,
        dict.fromkeys(ANALYSES, "bench"),
        config,
        force=True,
        rope=rope,
        attention=attention,
    )


# ---------------------------------------------------------------------------------------------
# timed runs
# ---------------------------------------------------------------------------------------------
@dataclass
class Phase:
    name: str
    heads: int
    workers: int
    wall_s: float
    cpu_s: float  # sum of the workers' CPU time over all tasks
    consumer_s: (
        float  # parent time between results (receiving them, the runner's batched DuckDB writes)
    )
    worker_peak: int  # bytes, max over workers
    parent_peak: int  # bytes
    parent_cpu_s: float = 0.0  # CPU time of the parent process (all its threads, DuckDB's included)
    write_first_ms: float = (
        0.0  # mean parent write time per head over the first / last tenth of heads
    )
    write_last_ms: float = 0.0
    other_cores: float = float("nan")  # CPU used by other processes during the run, in cores
    walls: list[float] = field(default_factory=list)  # every try when the run was repeated

    def set_other_load(self, system_busy: float, ex: MeasuredExecutor) -> None:
        """Machine busy time minus this run's (parent + workers, imports included), per second."""
        if system_busy > 0 and self.wall_s > 0:
            own = self.parent_cpu_s + (sum(ex.total_cpu.values()) if self.workers > 1 else 0.0)
            self.other_cores = max(system_busy - own, 0.0) / self.wall_s

    failures: int = 0
    first_failure: str = ""

    @property
    def heads_per_s(self) -> float:
        return self.heads / self.wall_s if self.wall_s > 0 else float("nan")


def run_read_only(tasks: list[GroupTask], workers: int) -> Phase:
    n_heads = sum(t.n_heads for t in tasks)
    n_workers = min(max(workers, 1), len(tasks))
    reset_peak_rss()
    b0, c0, t0 = system_busy_s(), time.process_time(), time.perf_counter()
    ex = MeasuredExecutor(make_executor(n_workers))
    seen = 0
    try:
        for outcomes in ex.map_unordered(read_only_group, tasks):
            seen += len(outcomes)
    finally:
        ex.close()
    wall, cpu, busy = time.perf_counter() - t0, time.process_time() - c0, system_busy_s() - b0
    assert seen == n_heads
    phase = Phase(
        "read only",
        n_heads,
        n_workers,
        wall,
        ex.cpu_s,
        ex.consumer_s,
        max(ex.peaks.values(), default=0),
        peak_rss(),
        cpu,
    )
    phase.set_other_load(busy, ex)
    return phase


def run_compute(
    name: str,
    base_db: Path,
    model_id: str,
    n_tasks: int,
    analyses: tuple[str, ...],
    config: RunConfig,
    workers: int,
    allow_failures: bool,
) -> Phase:
    from qkwh.compute.runner import compute

    emp = "-empirical" if config.plasticity.empirical else ""
    db = base_db.with_name(f"phase-{'-'.join(analyses)}-{config.plasticity.pairs}{emp}.duckdb")
    for p in (db, db.with_name(db.name + ".wal")):
        p.unlink(missing_ok=True)
    shutil.copy(base_db, db)
    n_workers = min(max(workers, 1), n_tasks)
    reset_peak_rss()
    b0, c0, t0 = system_busy_s(), time.process_time(), time.perf_counter()
    ex = MeasuredExecutor(make_executor(n_workers))
    rep = compute(db, models=[model_id], analyses=analyses, config=config, executor=ex)
    wall, cpu, busy = time.perf_counter() - t0, time.process_time() - c0, system_busy_s() - b0
    phase = Phase(
        name,
        rep.n_planned,
        n_workers,
        wall,
        ex.cpu_s,
        ex.consumer_s,
        max(ex.peaks.values(), default=0),
        peak_rss(),
        cpu,
        len(rep.failures),
        ": ".join(rep.failures[0]) if rep.failures else "",
    )
    phase.set_other_load(busy, ex)
    w = ex.consumer_per_head
    if w:
        tenth = max(len(w) // 10, 1)
        phase.write_first_ms = 1e3 * statistics.fmean(w[:tenth])
        phase.write_last_ms = 1e3 * statistics.fmean(w[-tenth:])
    db.unlink(missing_ok=True)
    if rep.failures and not allow_failures:
        raise SystemExit(
            f"{name}: {len(rep.failures)} head(s) failed, e.g. {phase.first_failure} "
            "(timings of failing heads are meaningless; --allow-failures to go on)"
        )
    return phase


SAMPLED = RunConfig()
EXHAUSTIVE = RunConfig().with_overrides({"plasticity.pairs": "exhaustive"})
EMPIRICAL = RunConfig().with_overrides({"plasticity.empirical": True})
EMPIRICAL_EXHAUSTIVE = RunConfig().with_overrides(
    {"plasticity.empirical": True, "plasticity.pairs": "exhaustive"}
)
# --runs name -> (row label, analyses, config)
RUNS: dict[str, tuple[str, tuple[str, ...], RunConfig]] = {
    "pca": ("pca", ("pca",), SAMPLED),
    "rotation": ("rotation", ("rotation",), SAMPLED),
    "plasticity": ("plasticity (sampled)", ("plasticity",), SAMPLED),
    "all": ("all three (sampled)", ANALYSES, SAMPLED),
    "rope": ("rope (only)", ("rope",), SAMPLED),
    "reach": ("reach (only)", ("reach",), SAMPLED),
    "plasticity-exhaustive": ("plasticity (exhaustive)", ("plasticity",), EXHAUSTIVE),
    "all-exhaustive": ("all three (exhaustive)", ANALYSES, EXHAUSTIVE),
    "plasticity-empirical": ("plasticity (sampled, empirical)", ("plasticity",), EMPIRICAL),
    "plasticity-empirical-exhaustive": (
        "plasticity (exhaustive, empirical)",
        ("plasticity",),
        EMPIRICAL_EXHAUSTIVE,
    ),
}
SMALL_RUNS = ("all", "plasticity-exhaustive")  # the smaller model: enough for the memory comparison


def best_of(tries: list[Phase]) -> Phase:
    """The fastest of repeated runs (least disturbed by other load); peaks are the max over all."""
    best = min(tries, key=lambda p: p.wall_s)
    best.worker_peak = max(p.worker_peak for p in tries)
    best.parent_peak = max(p.parent_peak for p in tries)
    best.walls = [p.wall_s for p in tries]
    return best


def model_phases(
    spec: ModelSpec,
    out: Path,
    workers: int,
    *,
    runs: list[str],
    allow_failures: bool,
    log,
    repeat: int = 1,
) -> dict:
    data, gen = ensure_dataset(spec, out, log)
    gen_cached = gen is None
    gen = generation_seconds(data) if gen is None else gen
    log(f"ingesting {spec.model_id} ...")
    db, ingest_s = fresh_ingest(spec, data, out)
    tasks = plan_tasks(db, spec.model_id, SAMPLED)
    phases: list[Phase] = []
    # the read-only baseline before and after the compute runs: the faster one is the reference
    log(f"[{spec.model_id}] read only ...")
    reads = [run_read_only(tasks, workers)]
    for name, analyses, cfg in (RUNS[r] for r in runs):
        tries = []
        for i in range(max(repeat, 1)):
            log(f"[{spec.model_id}] {name}{f' ({i + 1}/{repeat})' if repeat > 1 else ''} ...")
            tries.append(
                run_compute(
                    name, db, spec.model_id, len(tasks), analyses, cfg, workers, allow_failures
                )
            )
            log(f"    {tries[-1].wall_s:.1f} s, other load {tries[-1].other_cores:.1f} cores")
        phases.append(best_of(tries))
    log(f"[{spec.model_id}] read only (again) ...")
    reads.append(run_read_only(tasks, workers))
    read = best_of(reads)
    shutil.rmtree(db.parent, ignore_errors=True)
    return {
        "spec": spec,
        "data": data,
        "data_bytes": dir_size(data),
        "n_files": spec.heads + spec.n_k_files,
        "generation_s": gen,
        "generation_cached": gen_cached,
        "ingest_s": ingest_s,
        "n_tasks": len(tasks),
        "read": read,
        "read_walls": [p.wall_s for p in reads],
        "phases": phases,
    }


# ---------------------------------------------------------------------------------------------
# scaling with vectors per head (one process)
# ---------------------------------------------------------------------------------------------
SCALING_COLUMNS = (
    ("read q+k", None, None),
    ("pca", ("pca",), SAMPLED),
    ("rotation", ("rotation",), SAMPLED),
    ("plasticity (sampled)", ("plasticity",), SAMPLED),
    ("plasticity (exhaustive)", ("plasticity",), EXHAUSTIVE),
    ("plasticity (sampled, empirical)", ("plasticity",), EMPIRICAL),
    ("all three (sampled)", ANALYSES, SAMPLED),
    ("rope (only)", ("rope",), SAMPLED),
    # softmax reach (default): Horvitz-Thompson over the sampled keys with the sampler facts
    ("reach (only)", ("reach",), SAMPLED),
    # the opt-in document-group jackknife (qkwh compute --documents): the three analyses rerun
    # once per left-out group, G = 10 (its default), plasticity sampled
    ("uncertainty (jackknife, G=10)", ("uncertainty",), SAMPLED),
)
JACKKNIFE_COLUMN = "uncertainty (jackknife, G=10)"
#: the scaling columns timed a GQA group at a time, per head (k read once, key precomputations shared)
GROUP_COLUMNS = ("read, per head of a GQA group", "all three (sampled), per head of a GQA group")


def model_units(heads: int, rows: int, out: Path, config: RunConfig, log) -> list:
    """(head unit, its layer's RoPE planes) of a benchmark model of ``heads`` heads x ``rows``
    vectors (generated and ingested into a scratch warehouse if needed; the warehouse is removed,
    the files stay)."""
    return [(u, rope) for u, rope, _ in model_unit_facts(heads, rows, out, config, log)]


def model_unit_facts(heads: int, rows: int, out: Path, config: RunConfig, log) -> list:
    """(head unit, its layer's RoPE planes, the model's sampler facts) as :func:`model_units`."""
    spec = ModelSpec(heads=heads, rows=rows)
    data, _ = ensure_dataset(spec, out, log)
    db, _ = fresh_ingest(spec, data, out)
    tasks = plan_tasks(db, spec.model_id, config)
    shutil.rmtree(db.parent, ignore_errors=True)
    return [(u, t.rope, t.attention) for t in tasks for u in t.heads]


def scaling(
    heads: int,
    rows_list: list[int],
    out: Path,
    *,
    exhaustive: bool,
    log,
    repeat: int = 3,
    jackknife: bool = True,
) -> list[dict]:
    """Median per-head CPU seconds (``time.process_time``) of reading and of each analysis, in this
    process (no pool, no DuckDB writes, BLAS on one thread, freed memory kept as in a compute
    worker).  Each head is timed ``repeat`` times
    and the fastest counts (a single try when it takes over half a second): other load on the
    machine then inflates the figures least.  The first head is run once untimed to warm imports
    and caches.  "all three (sampled)" is one ``run_analyses`` call with the three analyses, so it
    includes what they share (the head's moments)."""
    keep_freed_memory()  # as in a compute worker
    results = []
    for rows in rows_list:
        unit_facts = model_unit_facts(heads, rows, out, SAMPLED, log)
        units = [(u, rope) for u, rope, _ in unit_facts]
        log(f"[scaling] {rows:,} vectors per file, {len(units)} heads ...")
        cols = [
            c
            for c in SCALING_COLUMNS
            if (exhaustive or c[0] != "plasticity (exhaustive)")
            and (jackknife or c[0] != JACKKNIFE_COLUMN)
        ]
        times: dict[str, list[float]] = {name: [] for name, _, _ in cols}

        def best(fn) -> float:
            tries: list[float] = []
            while len(tries) < max(repeat, 1) and (not tries or tries[-1] < 0.5):
                c0 = time.process_time()
                fn()
                tries.append(time.process_time() - c0)
            return min(tries)

        for i, (unit, rope, facts) in enumerate(unit_facts):
            head = head_data(
                unit, read_file(unit.q_path), read_file(unit.k_path), SAMPLED, rope, facts
            )
            if i == 0:  # warm-up
                for _, analyses, cfg in cols[1:]:
                    run_analyses(head, analyses, cfg)
            times["read q+k"].append(
                best(lambda u=unit: head_data(u, read_file(u.q_path), read_file(u.k_path), SAMPLED))
            )
            for name, analyses, cfg in cols[1:]:
                times[name].append(best(lambda: run_analyses(head, analyses, cfg)))  # noqa: B023 (called at once)
        # as qkwh compute runs them: the k file read once per GQA group, and what the group's
        # heads compute from the keys alone shared (the time per head is the group's / its size)
        groups: dict[str, list] = {}
        for unit, _ in units:
            groups.setdefault(str(unit.k_path), []).append(unit)
        read_g, all_g = GROUP_COLUMNS
        times[read_g], times[all_g] = [], []
        for group in groups.values():

            def read_group(group=group) -> list:
                k_rows = group_key_rows(read_file(group[0].k_path), SAMPLED)
                return [head_data(u, read_file(u.q_path), k_rows, SAMPLED) for u in group]

            loaded = read_group()

            def analyse_group(loaded=loaded) -> None:
                keys = precompute.KeyCache()
                for head in loaded:
                    run_analyses(head, ANALYSES, SAMPLED, keys=keys)

            times[read_g] += [best(read_group) / len(group)] * len(group)
            times[all_g] += [best(analyse_group) / len(group)] * len(group)
        med = {name: statistics.median(v) for name, v in times.items()}
        results.append({"rows": rows, "heads": len(units), "median_s": med})
    return results


def gemm_rate(n: int = 8000, d: int = 128, repeat: int = 5) -> dict:
    """The machine's float64 GEMM rate on one BLAS thread, in GFLOP/s (2 flops per multiply-add).

    Two shapes: ``Xᵀ Y`` of two (n, d) matrices (the shape of a head's scatter matrices; a general
    product, 2 n d² flops -- numpy computes ``Xᵀ X`` with a symmetric rank-k update, half of
    them) and a square 1024 x 1024 product (what BLAS does best).  The fastest of ``repeat``
    tries of each.
    """
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((n, d)), rng.standard_normal((n, d))
    a, b = rng.standard_normal((1024, 1024)), rng.standard_normal((1024, 1024))
    with threadpool_limits(limits=1):
        out = {
            name: flops / _fastest(fn, repeat) / 1e9
            for name, fn, flops in (
                ("xtx", lambda: x.T @ y, 2.0 * n * d * d),
                ("square", lambda: a @ b, 2.0 * 1024**3),
            )
        }
    return {
        "gflops_xtx": out["xtx"],
        "gflops_square": out["square"],
        "shape_xtx": f"({n} x {d})ᵀ({n} x {d})",
    }


def blas_floor(spec: ModelSpec, repeat: int = 5) -> dict[str, float]:
    """Milliseconds per head of the BLAS calls the three analyses (defaults) make on one head,
    each at its real shape, on one BLAS thread (fastest of ``repeat`` tries, times the number of
    calls per head; the key Gram matrix is made once per k file and shared by its query heads).
    Dense algebra no implementation of these analyses avoids, at the speed this BLAS reaches on
    these shapes: a floor for the analyses' CPU time per head.
    """
    from scipy.linalg import blas
    from threadpoolctl import threadpool_limits

    from qkwh.analyses.fourier import ChebyshevBasis, cheb_order

    cfg = RunConfig()
    n, d, nb = spec.rows, spec.d, spec.n_buckets
    per = n // nb
    dirs = 2 + 2 * min(cfg.rotation.max_pairs, (d - 2) // 2)
    k1 = cheb_order(math.pi / spec.bucket_size * 0.5 * (spec.context_length - 1))
    block = ChebyshevBasis.BLOCK
    pairs = cfg.plasticity.num_pairs_per_bucket
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, d))
    proj = rng.standard_normal((dirs, d))
    t_block, u_block = rng.standard_normal((k1, block)), rng.standard_normal((block, dirs))
    a = rng.standard_normal((d, d))
    chol = np.asfortranarray(np.linalg.cholesky(a @ a.T + d * np.eye(d)).T)
    delta = rng.standard_normal((pairs, d))
    per_k = spec.heads / spec.n_k_files  # query heads per k file: they share the key Gram
    calls = {  # name -> (one call, calls per head)
        f"key scatter matrix (Xᵀ X, one n x d Gram per k file, over its {per_k:.2f} query heads)": (
            lambda: x.T @ x,
            1 / per_k,
        ),
        "query scatter matrices (one Gram per bucket)": (
            lambda: [x[i * per : (i + 1) * per].T @ x[i * per : (i + 1) * per] for i in range(nb)],
            1,
        ),
        "rotation projections (q and k on a, b and the complement directions)": (
            lambda: proj @ x.T,
            2,
        ),
        "rotation Chebyshev moments (blocks of positions)": (
            lambda: t_block @ u_block,
            math.ceil(2 * n / block),
        ),
        "plasticity pair variances (one triangular multiply per bucket)": (
            lambda: blas.dtrmm(1.0, chol, delta.T, side=0, lower=0),
            nb,
        ),
    }
    with threadpool_limits(limits=1):
        return {name: 1e3 * _fastest(fn, repeat) * count for name, (fn, count) in calls.items()}


def exhaustive_blas_floor(
    heads: int, rows: int, out: Path, log, repeat: int = 3
) -> dict[str, float]:
    """Milliseconds per head (median over ``heads`` heads of the benchmark model) of the BLAS calls
    of exhaustive plasticity, at the shapes of each head's own data, on one BLAS thread: per
    bucket, the triangular multiply of its eligible keys and the batched Gram matrices of the
    examples' keys (the grouping and blocks :func:`qkwh.analyses.plasticity_pairs.exhaustive_bucket`
    uses), plus the per-bucket query Gram matrices.  Random values of those shapes: BLAS time does
    not depend on the values.
    """
    from scipy.linalg import blas
    from threadpoolctl import threadpool_limits

    from qkwh.analyses.plasticity_pairs import GRAM_BLOCK, _pair_blocks, _size_grouped_layout

    units = model_units(heads, rows, out, SAMPLED, log)
    rng = np.random.default_rng(0)
    parts: dict[str, list[float]] = {
        "query scatter matrices (one Gram per bucket)": [],
        "eligible keys times the Cholesky factor (one triangular multiply per bucket)": [],
        "per-example Gram matrices of the eligible keys (batched)": [],
    }
    with threadpool_limits(limits=1):
        for unit, _ in units:
            head = head_data(unit, read_file(unit.q_path), read_file(unit.k_path), SAMPLED)
            d = head.q.shape[1]
            a = rng.standard_normal((d, d))
            chol = np.asfortranarray(np.linalg.cholesky(a @ a.T + d * np.eye(d)).T)
            t = np.asarray(head.q_pos, dtype=np.float64)
            _, ex = np.unique(np.asarray(head.k_example), return_inverse=True)
            k_pos = np.asarray(head.k_pos, dtype=np.float64)
            q_counts, trmm, grams = [], [], []
            for j in np.unique(head.q_bucket):
                in_j = np.asarray(head.q_bucket) == j
                q_counts.append(int(in_j.sum()))
                elig = np.flatnonzero(k_pos < t[in_j].mean())  # plasticity's default eligibility
                counts = np.bincount(ex.reshape(-1)[elig], minlength=int(ex.max()) + 1)
                perm, groups = _size_grouped_layout(counts)
                if not groups:
                    continue
                K = rng.standard_normal((len(perm), d))
                trmm.append(lambda K=K, chol=chol: blas.dtrmm(1.0, chol, K.T, side=0, lower=0))
                blocks = [
                    (off, n_b, g, r0, r1)
                    for off, n_b, g, r0, r1, _, _ in _pair_blocks(groups, GRAM_BLOCK)
                ]

                def gram(K=K, blocks=blocks) -> None:
                    for off, n_b, g, r0, r1 in blocks:
                        kb = K[off : off + n_b * g].reshape(n_b, g, -1)
                        np.matmul(kb[:, r0:r1], kb.transpose(0, 2, 1))

                grams.append(gram)
            xs = [rng.standard_normal((c, d)) for c in q_counts]
            timed = ([lambda: [x.T @ x for x in xs]], trmm, grams)  # noqa: B023 (called in this pass)
            for (_name, times), calls in zip(parts.items(), timed):
                times.append(1e3 * sum(_fastest(fn, repeat) for fn in calls))
    return {name: statistics.median(v) for name, v in parts.items()}


def _fastest(fn, repeat: int) -> float:
    """Wall seconds of the fastest of ``repeat`` calls of ``fn`` (after one untimed call)."""
    fn()
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def profile_heads(heads: int, rows: int, out: Path, config: RunConfig, log, top: int = 30) -> dict:
    """cProfile of the default analyses (in this process) on ``heads`` heads of ``rows`` vectors.

    Returns ``{"text": the pstats listing (top functions by own and by cumulative time),
    "heads": n, "top": [(function, own ms per head, share of the total)] (the 12 largest)}``.
    """
    from qkwh.reach_inputs import read_exact

    keep_freed_memory()  # as in a compute worker
    loaded = [
        head_data(
            u, read_file(u.q_path), read_file(u.k_path), config, rope, facts, read_exact(u.q_path)
        )
        for u, rope, facts in model_unit_facts(heads, rows, out, config, log)
    ]
    run_analyses(loaded[0], DEFAULT_ANALYSES, config)  # warm-up
    prof = cProfile.Profile()
    prof.enable()
    for head in loaded:
        run_analyses(head, DEFAULT_ANALYSES, config)
    prof.disable()
    buf = io.StringIO()
    st = pstats.Stats(prof, stream=buf)
    st.sort_stats("tottime").print_stats(top)
    st.sort_stats("cumulative").print_stats(top)
    total = sum(v[2] for v in st.stats.values()) or 1.0
    own = sorted(((v[2], k) for k, v in st.stats.items()), reverse=True)[:12]
    rows_top = [
        (f"{Path(f).name}:{line}({fn})" if line else fn, 1e3 * t / len(loaded), t / total)
        for t, (f, line, fn) in own
    ]
    return {"text": buf.getvalue(), "heads": len(loaded), "top": rows_top}


# ---------------------------------------------------------------------------------------------
# machine and report
# ---------------------------------------------------------------------------------------------
def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    import duckdb
    import pyarrow
    import scipy

    blas = "unknown"
    try:
        import scipy.linalg  # (loads scipy's own BLAS, which the analyses use too)
        import threadpoolctl  # optional

        info = [i for i in threadpoolctl.threadpool_info() if i.get("user_api") == "blas"]
        if info:  # numpy's and scipy's wheels each bundle one
            blas = ", ".join(sorted({f"{i.get('internal_api')} {i.get('version')}" for i in info}))
    except ImportError:
        try:
            cfg = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
            blas = f"{cfg.get('name')} {cfg.get('version')}"
        except Exception:  # numpy without dict config
            pass
    try:
        git = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        git = ""
    return {
        "cpu": cpu,
        "cores": cores,
        "ram_gib": ram / 1024**3,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "duckdb": duckdb.__version__,
        "pyarrow": pyarrow.__version__,
        "blas": blas,
        "qkwh": code_version(),
        "git": git,
    }


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"
