#!/usr/bin/env python
"""qkwh compute benchmark: read-only baseline, each analysis, memory, scaling with vectors per head.

    .venv/bin/python bench/run.py                      # production shape: 300 heads x 8,000 vectors, d=128
    .venv/bin/python bench/run.py --quick              # smoke run (~30 s)
    .venv/bin/python bench/run.py --heads 300 --rows 8000 --workers 2 [--profile]

What it does (bench/README.md has the method):

1. generates (or reuses, cached under ``<out>/data/<key>``) a synthetic model with ``qkwh.synth``;
2. ingests it into a fresh warehouse (timed separately);
3. read-only baseline: maps a function that reads every q and k file (``reader.read_file``, the
   k file once per group, exactly like ``work.run_group``) over the same ``GroupTask`` list through
   the same executor the compute uses (process pool, BLAS pinned to one thread per worker);
4. times ``runner.compute`` for each analysis alone, all three together, and plasticity in
   exhaustive mode, each on a fresh copy of the ingested warehouse;
5. peak memory: VmHWM of every worker (reported by the worker itself) and of the parent, for
   this model and for a smaller one, to show that it does not grow with the model;
6. scaling: per-head time of each analysis at 2k / 8k / 32k vectors per file, in one process;
7. prints a Markdown report and writes it (``bench/results.md``; ``--quick`` writes under ``<out>``).
"""

from __future__ import annotations

import os

# The parent runs the single-process scaling runs: give it one BLAS thread like every pool worker
# (must happen before numpy is imported).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
             "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import argparse
import cProfile
import datetime as dt
import functools
import hashlib
import io
import json
import math
import platform
import pstats
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

# Pool workers import this module too (spawn re-imports __main__): keep its top level to what a
# compute worker imports anyway, so their memory is the compute's; DuckDB and ingest stay in the parent.
from qkwh.compute.executors import make_executor
from qkwh.compute.units import GroupTask, code_version, plan
from qkwh.compute.work import HeadOutcome, head_data, run_analyses
from qkwh.params import ANALYSES, RunConfig
from qkwh.sniffed.reader import read_file

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
MiB = 1024 * 1024


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
        for pid, hwm, (secs, total), result in self.inner.map_unordered(functools.partial(_measured_call, fn),
                                                                          items):
            self.peaks[pid] = max(self.peaks.get(pid, 0), hwm)
            self.total_cpu[pid] = max(self.total_cpu.get(pid, 0.0), total)
            self.cpu_s += secs
            self.tasks += 1
            t0 = time.perf_counter()
            yield result
            dt_ = time.perf_counter() - t0
            self.consumer_s += dt_
            self.consumer_per_head += [dt_ / max(len(result), 1)] * max(len(result), 1)

    def close(self) -> None:
        self.inner.close()


def read_only_group(task: GroupTask) -> list[HeadOutcome]:
    """The baseline task: ``work.run_group`` without the analyses.  Reads the group's k file once,
    then each q file, and assembles each head's arrays (``head_data``: the row cap, d check), with
    BLAS pinned to one thread for the task like ``run_group``."""
    from threadpoolctl import threadpool_limits

    outcomes: list[HeadOutcome] = []
    with threadpool_limits(limits=1):
        k_data = read_file(task.heads[0].k_path)
        for unit in task.heads:
            t0 = time.perf_counter()
            head_data(unit, read_file(unit.q_path), k_data, task.config)
            outcomes.append(HeadOutcome(unit, {}, time.perf_counter() - t0))
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
        synth = hashlib.sha256((REPO / "qkwh" / "synth.py").read_bytes()).hexdigest()[:8]
        return (f"h{self.heads}-r{self.rows}-d{self.d}-q{self.n_q_heads}kv{self.n_kv_heads}p{self.per_layer}"
                f"-L{self.context_length}-b{self.bucket_size}-e{self.n_examples}-s{self.seed}-synth{synth}")

    @property
    def model_id(self) -> str:
        return f"bench-h{self.heads}-r{self.rows}"

    def describe(self) -> str:
        return (f"{self.heads} query heads ({self.n_layers} layer(s) x up to {self.per_layer} of "
                f"{self.n_q_heads} q heads, {self.n_kv_heads} KV heads -> {self.n_k_files} k files), "
                f"{self.rows:,} vectors per file, d = {self.d}, {self.n_buckets} buckets "
                f"(context {self.context_length:,}, bucket {self.bucket_size:,}), {self.n_examples} examples")


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
    write_dataset(tmp, model_name=f"synthetic/{spec.model_id}", n_layers=spec.n_layers,
                  n_q_heads=spec.n_q_heads, n_kv_heads=spec.n_kv_heads, heads=spec.selection, d=spec.d,
                  rows_per_file=spec.rows, n_examples=spec.n_examples, context_length=spec.context_length,
                  bucket_size=spec.bucket_size, seed=spec.seed)
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
        raise SystemExit(f"ingest of {data} found {rep.n_heads_with_k} analysable heads, expected {spec.heads}")
    return db, secs


def plan_tasks(db: Path, model_id: str, config: RunConfig) -> list[GroupTask]:
    """The compute's task list (every head, every analysis), planned as ``runner.compute`` does."""
    from qkwh import store
    from qkwh.compute.runner import load_units

    con = store.connect(db, read_only=True)
    try:
        units = load_units(con, [model_id])
    finally:
        con.close()
    return plan(units, {}, ANALYSES, {a: "bench" for a in ANALYSES}, config, force=True)


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
    consumer_s: float  # parent time between results (the runner's DuckDB writes)
    worker_peak: int  # bytes, max over workers
    parent_peak: int  # bytes
    parent_cpu_s: float = 0.0  # CPU time of the parent process (all its threads, DuckDB's included)
    write_first_ms: float = 0.0  # mean parent write time per head over the first / last tenth of heads
    write_last_ms: float = 0.0
    other_cores: float = float("nan")  # CPU used by other processes during the run, in cores
    walls: list[float] = field(default_factory=list)  # every try when the run was repeated

    def set_other_load(self, system_busy: float, ex: "MeasuredExecutor") -> None:
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
    phase = Phase("read only", n_heads, n_workers, wall, ex.cpu_s, ex.consumer_s,
                  max(ex.peaks.values(), default=0), peak_rss(), cpu)
    phase.set_other_load(busy, ex)
    return phase


def run_compute(name: str, base_db: Path, model_id: str, n_tasks: int, analyses: tuple[str, ...],
                config: RunConfig, workers: int, allow_failures: bool) -> Phase:
    from qkwh.compute.runner import compute

    db = base_db.with_name(f"phase-{'-'.join(analyses)}-{config.plasticity.pairs}.duckdb")
    for p in (db, db.with_name(db.name + ".wal")):
        p.unlink(missing_ok=True)
    shutil.copy(base_db, db)
    n_workers = min(max(workers, 1), n_tasks)
    reset_peak_rss()
    b0, c0, t0 = system_busy_s(), time.process_time(), time.perf_counter()
    ex = MeasuredExecutor(make_executor(n_workers))
    rep = compute(db, models=[model_id], analyses=analyses, config=config, executor=ex)
    wall, cpu, busy = time.perf_counter() - t0, time.process_time() - c0, system_busy_s() - b0
    phase = Phase(name, rep.n_planned, n_workers, wall, ex.cpu_s, ex.consumer_s,
                  max(ex.peaks.values(), default=0), peak_rss(), cpu, len(rep.failures),
                  ": ".join(rep.failures[0]) if rep.failures else "")
    phase.set_other_load(busy, ex)
    w = ex.consumer_per_head
    if w:
        tenth = max(len(w) // 10, 1)
        phase.write_first_ms = 1e3 * statistics.fmean(w[:tenth])
        phase.write_last_ms = 1e3 * statistics.fmean(w[-tenth:])
    db.unlink(missing_ok=True)
    if rep.failures and not allow_failures:
        raise SystemExit(f"{name}: {len(rep.failures)} head(s) failed, e.g. {phase.first_failure} "
                         "(timings of failing heads are meaningless; --allow-failures to go on)")
    return phase


SAMPLED = RunConfig()
EXHAUSTIVE = RunConfig().with_overrides({"plasticity.pairs": "exhaustive"})
# --runs name -> (row label, analyses, config)
RUNS: dict[str, tuple[str, tuple[str, ...], RunConfig]] = {
    "pca": ("pca", ("pca",), SAMPLED),
    "rotation": ("rotation", ("rotation",), SAMPLED),
    "plasticity": ("plasticity (sampled)", ("plasticity",), SAMPLED),
    "all": ("all three (sampled)", ANALYSES, SAMPLED),
    "plasticity-exhaustive": ("plasticity (exhaustive)", ("plasticity",), EXHAUSTIVE),
    "all-exhaustive": ("all three (exhaustive)", ANALYSES, EXHAUSTIVE),
}
SMALL_RUNS = ("all", "plasticity-exhaustive")  # the smaller model: enough for the memory comparison


def best_of(tries: list[Phase]) -> Phase:
    """The fastest of repeated runs (least disturbed by other load); peaks are the max over all."""
    best = min(tries, key=lambda p: p.wall_s)
    best.worker_peak = max(p.worker_peak for p in tries)
    best.parent_peak = max(p.parent_peak for p in tries)
    best.walls = [p.wall_s for p in tries]
    return best


def model_phases(spec: ModelSpec, out: Path, workers: int, *, runs: list[str], allow_failures: bool, log,
                 repeat: int = 1) -> dict:
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
            tries.append(run_compute(name, db, spec.model_id, len(tasks), analyses, cfg, workers, allow_failures))
            log(f"    {tries[-1].wall_s:.1f} s, other load {tries[-1].other_cores:.1f} cores")
        phases.append(best_of(tries))
    log(f"[{spec.model_id}] read only (again) ...")
    reads.append(run_read_only(tasks, workers))
    read = best_of(reads)
    shutil.rmtree(db.parent, ignore_errors=True)
    return {"spec": spec, "data": data, "data_bytes": dir_size(data), "n_files": spec.heads + spec.n_k_files,
            "generation_s": gen, "generation_cached": gen_cached, "ingest_s": ingest_s, "n_tasks": len(tasks),
            "read": read, "read_walls": [p.wall_s for p in reads], "phases": phases}


# ---------------------------------------------------------------------------------------------
# scaling with vectors per head (one process)
# ---------------------------------------------------------------------------------------------
SCALING_COLUMNS = (("read q+k", None, None), ("pca", ("pca",), SAMPLED), ("rotation", ("rotation",), SAMPLED),
                   ("plasticity (sampled)", ("plasticity",), SAMPLED),
                   ("plasticity (exhaustive)", ("plasticity",), EXHAUSTIVE))


def scaling(heads: int, rows_list: list[int], out: Path, *, exhaustive: bool, log) -> list[dict]:
    """Median per-head seconds of reading and of each analysis, in this process (no pool, no
    DuckDB writes): the first head is run once untimed to warm imports and caches."""
    results = []
    for rows in rows_list:
        spec = ModelSpec(heads=heads, rows=rows)
        data, _ = ensure_dataset(spec, out, log)
        db, _ = fresh_ingest(spec, data, out)
        tasks = plan_tasks(db, spec.model_id, SAMPLED)
        shutil.rmtree(db.parent, ignore_errors=True)
        units = [u for t in tasks for u in t.heads]
        log(f"[scaling] {rows:,} vectors per file, {len(units)} heads ...")
        cols = [c for c in SCALING_COLUMNS if exhaustive or c[0] != "plasticity (exhaustive)"]
        times: dict[str, list[float]] = {name: [] for name, _, _ in cols}
        for i, unit in enumerate(units):
            t0 = time.perf_counter()
            head = head_data(unit, read_file(unit.q_path), read_file(unit.k_path), SAMPLED)
            read_s = time.perf_counter() - t0
            if i == 0:  # warm-up
                for _, analyses, cfg in cols[1:]:
                    run_analyses(head, analyses, cfg)
            times["read q+k"].append(read_s)
            for name, analyses, cfg in cols[1:]:
                t0 = time.perf_counter()
                run_analyses(head, analyses, cfg)
                times[name].append(time.perf_counter() - t0)
        med = {name: statistics.median(v) for name, v in times.items()}
        med["all three (sampled)"] = med["pca"] + med["rotation"] + med["plasticity (sampled)"]
        results.append({"rows": rows, "heads": len(units), "median_s": med})
    return results


def profile_heads(heads: int, rows: int, out: Path, config: RunConfig, log, top: int = 30) -> str:
    """cProfile of the three analyses (in this process) on ``heads`` heads of ``rows`` vectors."""
    spec = ModelSpec(heads=heads, rows=rows)
    data, _ = ensure_dataset(spec, out, log)
    db, _ = fresh_ingest(spec, data, out)
    tasks = plan_tasks(db, spec.model_id, config)
    shutil.rmtree(db.parent, ignore_errors=True)
    units = [u for t in tasks for u in t.heads]
    loaded = [head_data(u, read_file(u.q_path), read_file(u.k_path), config) for u in units]
    run_analyses(loaded[0], ANALYSES, config)  # warm-up
    prof = cProfile.Profile()
    prof.enable()
    for head in loaded:
        run_analyses(head, ANALYSES, config)
    prof.disable()
    buf = io.StringIO()
    st = pstats.Stats(prof, stream=buf)
    st.sort_stats("tottime").print_stats(top)
    st.sort_stats("cumulative").print_stats(top)
    return buf.getvalue()


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
        import threadpoolctl  # optional

        info = [i for i in threadpoolctl.threadpool_info() if i.get("user_api") == "blas"]
        if info:
            blas = f"{info[0].get('internal_api')} {info[0].get('version')}"
    except ImportError:
        try:
            cfg = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
            blas = f"{cfg.get('name')} {cfg.get('version')}"
        except Exception:  # numpy without dict config
            pass
    try:
        git = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        git = ""
    return {"cpu": cpu, "cores": cores, "ram_gib": ram / 1024**3, "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__,
            "duckdb": duckdb.__version__, "pyarrow": pyarrow.__version__, "blas": blas,
            "qkwh": code_version(), "git": git}


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def machine_line(m: dict) -> str:
    return (f"{m['cpu']}, {m['cores']} cores, {m['ram_gib']:.1f} GiB RAM, {m['os']}; Python {m['python']}, "
            f"numpy {m['numpy']} ({m['blas']}), scipy {m['scipy']}, duckdb {m['duckdb']}, "
            f"pyarrow {m['pyarrow']}")


def _mib(b: int) -> str:
    return f"{b / MiB:,.0f}" if b else "-"


def _s(x: float) -> str:
    return f"{x:,.1f}" if x >= 10 else f"{x:.2f}"


def _ms(x: float) -> str:
    return f"{x * 1e3:,.0f}" if x >= 0.01 else f"{x * 1e3:.1f}"


def phase_table(main: dict) -> list[str]:
    read: Phase = main["read"]
    lines = ["| run | wall s | heads/s | x read-only | worker CPU s | parent CPU s | parent write s "
             "| write ms/head, first -> last tenth | max worker RSS MiB | parent RSS MiB | other load, cores |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in [read, *main["phases"]]:
        ratio = "1.0" if p is read else f"{p.wall_s / read.wall_s:.1f}"
        fail = f" ({p.failures} failed)" if p.failures else ""
        wr = f"{p.write_first_ms:.0f} -> {p.write_last_ms:.0f}" if p is not read else "-"
        lines.append(f"| {p.name}{fail} | {_s(p.wall_s)} | {p.heads_per_s:.1f} | {ratio} | {_s(p.cpu_s)} | "
                     f"{_s(p.parent_cpu_s)} | {_s(p.consumer_s)} | {wr} | {_mib(p.worker_peak)} | "
                     f"{_mib(p.parent_peak)} | {p.other_cores:.1f} |")
    return lines


def find_phase(main: dict, name: str) -> Phase | None:
    return next((p for p in main["phases"] if p.name == name), None)


def memory_table(models: list[dict]) -> list[str]:
    names = ["read only", "all three (sampled)", "plasticity (exhaustive)"]
    head = "| model | " + " | ".join(f"max worker RSS MiB, {n}" for n in names) + " | parent RSS MiB, all three |"
    lines = [head, "|---|" + "---:|" * (len(names) + 1)]
    for m in models:
        cells = []
        for n in names:
            p = m["read"] if n == "read only" else find_phase(m, n)
            cells.append((_mib(p.worker_peak) + (" (in-process)" if p.workers <= 1 else "")) if p else "-")
        allp = find_phase(m, "all three (sampled)")
        lines.append(f"| {m['spec'].heads} heads x {m['spec'].rows:,} vectors | " + " | ".join(cells)
                     + f" | {_mib(allp.parent_peak) if allp else '-'} |")
    return lines


def scaling_table(rows: list[dict], heads: int) -> list[str]:
    if not rows:
        return []
    names = list(rows[0]["median_s"])
    lines = ["| vectors per file | " + " | ".join(f"{n} ms/head" for n in names) + " |",
             "|---:|" + "---:|" * len(names)]
    for r in rows:
        lines.append(f"| {r['rows']:,} | " + " | ".join(_ms(r["median_s"][n]) for n in names) + " |")
    if len(rows) >= 2 and rows[-1]["rows"] != rows[0]["rows"]:
        lo, hi = rows[0], rows[-1]
        span = math.log(hi["rows"] / lo["rows"])
        exps = []
        for n in names:
            a, b = lo["median_s"][n], hi["median_s"][n]
            exps.append(f"{math.log(b / a) / span:.2f}" if a > 0 and b > 0 else "-")
        lines.append(f"| growth exponent {lo['rows']:,} -> {hi['rows']:,} | " + " | ".join(exps) + " |")
    return lines


def verdicts(main: dict, small: dict | None, target: float = 3.0) -> list[str]:
    out = []
    spec: ModelSpec = main["spec"]
    if (spec.heads, spec.rows, spec.d) != (FULL["heads"], FULL["rows"], 128):
        out.append(f"- note: the targets are set for {FULL['heads']} heads x {FULL['rows']:,} vectors, d = 128; on "
                   "a smaller model pool start-up dominates both times and the ratio means little")
    read = main["read"]
    allp = find_phase(main, "all three (sampled)")
    if allp:
        r = allp.wall_s / read.wall_s
        out.append(f"- time: all three (sampled plasticity) = {r:.1f} x read-only "
                   f"({_s(allp.wall_s)} s vs {_s(read.wall_s)} s; target <= {target:g} x): "
                   f"**{'met' if r <= target else 'missed'}**")
        if read.cpu_s > 0:
            out.append(f"- in the workers alone (CPU time of the tasks: no pool start-up, no parent writes): all "
                       f"three (sampled) = {allp.cpu_s / read.cpu_s:.1f} x read-only ({_s(allp.cpu_s)} s vs "
                       f"{_s(read.cpu_s)} s)")
    exh = find_phase(main, "all three (exhaustive)") or find_phase(main, "plasticity (exhaustive)")
    if exh:
        out.append(f"- exhaustive: {exh.name} = {exh.wall_s / read.wall_s:.1f} x read-only ({_s(exh.wall_s)} s)")
    if small:
        a, b = find_phase(small, "all three (sampled)"), allp
        if a and b and a.worker_peak and b.worker_peak:
            grew = b.worker_peak / a.worker_peak
            ok = b.worker_peak <= 1.10 * a.worker_peak + 16 * MiB
            out.append(f"- memory: max worker RSS {_mib(a.worker_peak)} MiB at {small['spec'].heads} heads, "
                       f"{_mib(b.worker_peak)} MiB at {main['spec'].heads} heads (x{grew:.2f}; criterion: "
                       f"within 10 % + 16 MiB): **{'independent of model size' if ok else 'grows with the model'}**")
    return out


def report(m: dict, main: dict, small: dict | None, scale: list[dict], scale_heads: int, workers: int,
           started: str, loads: tuple[str, str], repeat: int = 1) -> str:
    spec: ModelSpec = main["spec"]
    gen = main["generation_s"]
    gen_txt = (f"generated in {gen:.1f} s" if gen is not None else "generation time unknown") + \
              (" (reused from the cache)" if main["generation_cached"] else "")
    tries = f", fastest of {repeat} tries" if repeat > 1 else ""
    reads = ", ".join(f"{w:.2f}" for w in main["read_walls"])
    notes = (f"wall: `runner.compute` end to end on a fresh copy of the ingested warehouse (pool start, reads, "
             f"analyses, DuckDB writes){tries}. read only: the same group tasks through the same executor, "
             f"reading files only (best of {len(main['read_walls'])}: {reads} s). worker CPU: CPU time of all "
             "tasks in the workers (process_time). parent CPU: CPU time of the parent process, all threads "
             "(DuckDB's included). parent write: parent time spent between results (the one-transaction-per-"
             "head writes), in all and per head over the first and the last tenth of the heads written. RSS: "
             "peak resident set (VmHWM) of each process; workers report their own. other load: CPU time used "
             "by other processes on the machine during the run (/proc/stat minus this run's processes), in "
             "cores; above ~0.2 the wall times are inflated.")
    lines = [f"# qkwh benchmark ({started}, qkwh {m['qkwh']}, git {m['git'] or '?'})", "",
             f"**Machine:** {machine_line(m)}. Load average (1, 5, 15 min) at start {loads[0]}, "
             f"at end {loads[1]}.", "",
             f"**Model:** {spec.describe()}; {main['n_files']} files, {main['data_bytes'] / MiB:,.0f} MiB of zstd "
             f"parquet; {gen_txt}; ingested in {main['ingest_s']:.1f} s. {main['n_tasks']} group tasks "
             f"(one per k file), {workers} workers, BLAS 1 thread per worker.", "",
             f"## Compute, {spec.heads} heads, {workers} workers", "", *phase_table(main), "",
             notes, ""]
    if small:
        lines += ["## Peak memory against model size", "", *memory_table([small, main]), ""]
    if scale:
        lines += [f"## Scaling with vectors per head ({scale_heads} heads, 1 process, median per head)", "",
                  *scaling_table(scale, scale_heads), "",
                  "Per head: q and k files read (k re-read for every head here), then each analysis "
                  "alone on the same arrays; no pool, no DuckDB. Growth exponent: slope of log time against "
                  "log vectors (1 = linear).", ""]
    lines += ["## Targets", "", *verdicts(main, small), ""]
    return "\n".join(lines)


def to_json(obj):
    if isinstance(obj, (Phase, ModelSpec)):
        return {**asdict(obj), **({"heads_per_s": obj.heads_per_s} if isinstance(obj, Phase) else {})}
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(type(obj).__name__)


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------
QUICK = {"heads": 16, "rows": 2000, "small_heads": 8, "scaling_heads": 4, "scaling_rows": "500,1000,2000"}
FULL = {"heads": 300, "rows": 8000, "small_heads": 60, "scaling_heads": 16, "scaling_rows": "2000,8000,32000"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small smoke run (~30 s)")
    ap.add_argument("--heads", type=int, help="query heads of the main model (300; quick 24)")
    ap.add_argument("--rows", type=int, help="vectors per file of the main model (8000; quick 2000)")
    ap.add_argument("--workers", type=int, default=2, help="pool workers (2)")
    ap.add_argument("--small-heads", type=int, help="heads of the smaller model for the memory comparison "
                                                    "(60; quick 8; 0 skips it)")
    ap.add_argument("--scaling-heads", type=int, help="heads of the scaling runs (16; quick 4; 0 skips them)")
    ap.add_argument("--scaling-rows", help="vectors per file of the scaling runs (2000,8000,32000)")
    ap.add_argument("--runs", default=",".join(RUNS),
                    help=f"compute runs of the main model, besides read-only ({','.join(RUNS)})")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each compute run N times and keep the fastest (for a shared machine)")
    ap.add_argument("--no-exhaustive", action="store_true", help="skip every exhaustive plasticity run")
    ap.add_argument("--profile", action="store_true",
                    help="also cProfile the three analyses in one process (scaling heads, main rows)")
    ap.add_argument("--profile-only", action="store_true", help="only the profile (printed)")
    ap.add_argument("--allow-failures", action="store_true", help="keep going when heads fail")
    ap.add_argument("--out", type=Path, default=BENCH / "results",
                    help="data cache, warehouses, JSON and profiles (bench/results, git-ignored)")
    ap.add_argument("--md", type=Path, help="Markdown report (bench/results.md; quick: <out>/quick.md)")
    args = ap.parse_args(argv)
    args.runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    unknown = [r for r in args.runs if r not in RUNS]
    if unknown:
        ap.error(f"unknown run(s) {', '.join(unknown)}; choose from {', '.join(RUNS)}")
    if args.no_exhaustive:
        args.runs = [r for r in args.runs if "exhaustive" not in r]
    defaults = QUICK if args.quick else FULL
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.md is None:
        args.md = args.out / "quick.md" if args.quick else BENCH / "results.md"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    started = dt.datetime.now().strftime("%Y-%m-%d %H:%M")

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t_start:7.1f} s] {msg}", file=sys.stderr, flush=True)

    if args.profile_only:
        print(profile_heads(max(args.scaling_heads, 1), args.rows, out, SAMPLED, log))
        return 0
    m = machine()
    load0 = loadavg()
    log(f"machine: {machine_line(m)}; load average {load0}")
    if load0 != "?" and float(load0.split()[0]) > 0.5 * m["cores"]:
        log(f"warning: the machine is busy (load {load0} on {m['cores']} cores): timings will be inflated")
    exhaustive = not args.no_exhaustive
    main_model = model_phases(ModelSpec(heads=args.heads, rows=args.rows), out, args.workers, runs=args.runs,
                              allow_failures=args.allow_failures, log=log, repeat=args.repeat)
    small = None
    if args.small_heads:
        small_runs = [r for r in SMALL_RUNS if r in args.runs] or args.runs[:1]
        small = model_phases(ModelSpec(heads=args.small_heads, rows=args.rows), out, args.workers,
                             runs=small_runs, allow_failures=args.allow_failures, log=log, repeat=args.repeat)
    scale: list[dict] = []
    if args.scaling_heads:
        rows_list = [int(r) for r in str(args.scaling_rows).split(",") if r.strip()]
        scale = scaling(args.scaling_heads, rows_list, out, exhaustive=exhaustive, log=log)
    text = report(m, main_model, small, scale, args.scaling_heads, args.workers, started, (load0, loadavg()),
                  args.repeat)
    if args.profile:
        log("profiling ...")
        prof = profile_heads(max(args.scaling_heads, 1), args.rows, out, SAMPLED, log)
        (out / "profile.txt").write_text(prof)
        log(f"profile written to {out / 'profile.txt'}")
    print(text)
    args.md.parent.mkdir(parents=True, exist_ok=True)
    args.md.write_text(text)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    (out / f"results-{stamp}.json").write_text(json.dumps(
        {"machine": m, "args": {k: str(v) for k, v in vars(args).items()}, "main": main_model, "small": small,
         "scaling": scale}, default=to_json, indent=1))
    log(f"report written to {args.md} (total {time.perf_counter() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
