#!/usr/bin/env python
"""The parent's write cost per head and the writer's ceiling, measured with precomputed results.

    .venv/bin/python bench/writer.py            # benchmark-shaped heads (d=128, 8,000 vectors, 16 buckets), ~1 min
    .venv/bin/python bench/writer.py --quick    # smoke run on tiny heads (~10 s)

What it does (README "Scaling out" and bench/writer_results.md quote the figures):

1. writes (or reuses, under ``bench/results/data/writer-<key>``) a small synthetic model shaped
   like the benchmark's heads (``--rows`` vectors per file, d = ``--d``, context 131,072 with
   bucket 8,192: 16 buckets, 500 examples), ingests it, and computes its heads once with
   ``work.run_group``: the outcomes hold the Arrow tables a worker ships to the parent;
2. replicates them to ``--heads`` distinct heads (new layer / q_head keys), in units of work of
   ``--unit`` heads (4 = the benchmark's GQA groups);
3. **ceiling**: feeds every unit as fast as possible to the compute's own
   :class:`~qkwh.compute.writer.BatchWriter` (open the warehouse, one transaction per batch,
   close) on a fresh copy of the ingested warehouse, for each ``--batch`` size; the time is the
   writer's own (open, check, concatenate, insert, head_runs, current_config, commit, close).
   Also the time to unpickle a unit's outcomes (what the parent does to receive them);
4. **at the benchmark's pace**: the runner's default policy (first batch one head, then each
   four times the last, up to 1,024, a batch at least every 30 s) with results arriving at ``--pace`` heads/s (the
   benchmark's all-three rate on 2 workers was 9.7) on a simulated clock, so the batches are the
   ones a real run forms; the write time is real;
5. a long run (``--long`` heads, default 3,000) at the largest batch, split in tenths, to show
   whether the write cost grows with the tables.

Nothing here is a test: tests/test_bench_smoke.py only checks that the script runs.
"""

from __future__ import annotations

import os

for _var in (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
):
    os.environ.setdefault(_var, "1")

import argparse
import dataclasses
import datetime as dt
import hashlib
import pickle
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SYNTH_CODE = ("synth.py", "synth_geometry.py")  # the generator: a change to it regenerates the data
OUT = REPO / "bench" / "results"
sys.path.insert(0, str(REPO))


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny heads, few repeats (smoke run)")
    p.add_argument("--heads", type=int, default=300, help="heads written per ceiling / pace run")
    p.add_argument("--long", type=int, default=3000, help="heads of the growth run (0: skip)")
    p.add_argument("--unique", type=int, default=8, help="heads actually computed, then replicated")
    p.add_argument("--unit", type=int, default=4, help="heads per unit of work (GQA group)")
    p.add_argument("--rows", type=int, default=8000, help="vectors per q and k file")
    p.add_argument("--d", type=int, default=128, help="head dimension")
    p.add_argument(
        "--batch", default="4,16,64,256,1024", help="batch sizes (heads) of the ceiling runs"
    )
    p.add_argument(
        "--pace", type=float, default=9.7, help="heads/s at which results arrive in the pace run"
    )
    p.add_argument("--repeat", type=int, default=3, help="runs per figure; the fastest counts")
    p.add_argument(
        "--out", type=Path, default=OUT, help="scratch folder (cached model, warehouses)"
    )
    p.add_argument(
        "--md",
        type=Path,
        default=None,
        help="write the report here (default: bench/writer_results.md; --quick: OUT/writer-quick.md)",
    )
    a = p.parse_args(argv)
    if a.quick:
        a.heads, a.long, a.unique, a.rows, a.d, a.repeat = (
            min(a.heads, 40),
            min(a.long, 80),
            4,
            400,
            32,
            1,
        )
        a.batch = "4,16"
    a.md = a.md or (a.out / "writer-quick.md" if a.quick else REPO / "bench" / "writer_results.md")
    return a


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _prepare(a: argparse.Namespace):
    """(base warehouse, config_ids, one list of outcomes per computed head)."""
    from qkwh import store
    from qkwh.analyses import registry
    from qkwh.compute.frequencies import load_rope_planes
    from qkwh.compute.runner import load_units
    from qkwh.compute.units import code_version, plan
    from qkwh.compute.work import run_group
    from qkwh.ingest import ingest
    from qkwh.params import RunConfig
    from qkwh.reach_inputs import load_attention_facts
    from qkwh.synth import write_dataset

    shape = dict(
        n_layers=max(a.unique // 4, 1),
        n_q_heads=4,
        n_kv_heads=1,
        d=a.d,
        rows_per_file=a.rows,
        n_examples=500 if not a.quick else 16,
        context_length=131072,
        bucket_size=8192,
        seed=0,
    )
    code = hashlib.sha256(
        b"".join((REPO / "qkwh" / f).read_bytes() for f in SYNTH_CODE)
    ).hexdigest()[:8]
    key = hashlib.sha256(repr(sorted(shape.items())).encode()).hexdigest()[:10] + "-" + code
    root = a.out / "data" / f"writer-{key}"
    if not (root / "_saver_state.json").exists():
        shutil.rmtree(root, ignore_errors=True)
        _log(f"generating {shape} ...")
        write_dataset(root, model_name="synthetic/writer-bench", **shape)
    work = a.out / "writer"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    base = work / "base.duckdb"
    ingest(str(root), warehouse=base, model_id="writer-bench")
    con = store.connect(base)
    try:
        units = load_units(con, None)
        rope = load_rope_planes(con, None)
        attention = load_attention_facts(con, None)  # reach needs the capture's sampler facts
    finally:
        con.close()
    cfg = RunConfig()
    analyses = tuple(registry.default_names())  # what a compute writes by default
    config_ids = {x: cfg.fingerprint(x, code_version()) for x in analyses}
    tasks = plan(units, {}, analyses, config_ids, cfg, rope=rope, attention=attention)
    _log(f"computing {len(units)} heads once ...")
    outcomes = [o for t in tasks for o in run_group(t)]
    bad = [o.error for o in outcomes if o.error]
    if bad:
        raise SystemExit(f"compute failed: {bad[0]}")
    return base, config_ids, outcomes


def _replicate(outcomes, n: int, unit: int):
    """``n`` distinct heads (layer = 1000 + i // 64, q_head = i % 64) in units of ``unit`` heads."""
    import pyarrow as pa

    heads = []
    for i in range(n):
        o = outcomes[i % len(outcomes)]
        layer, q_head = 1000 + i // 64, i % 64
        tables = {}
        for name, t in o.tables.items():
            t = t.set_column(
                t.schema.get_field_index("layer"),
                "layer",
                pa.array([layer] * t.num_rows, pa.int32()),
            )
            tables[name] = t.set_column(
                t.schema.get_field_index("q_head"),
                "q_head",
                pa.array([q_head] * t.num_rows, pa.int32()),
            )
        u = dataclasses.replace(o.unit, layer=layer, q_head=q_head)
        heads.append(dataclasses.replace(o, unit=u, tables=tables))
    return [heads[i : i + unit] for i in range(0, n, unit)]


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _run(
    base: Path, scratch: Path, config_ids, units, *, max_heads: int, pace: float | None = None
):
    """Write ``units`` through a BatchWriter on a fresh copy of ``base``: (writer seconds, batches,
    per-batch (heads, seconds))."""
    from qkwh.compute import writer as writer_mod

    db = scratch / "w.duckdb"
    for p in scratch.glob("w.duckdb*"):
        p.unlink()
    shutil.copy(base, db)
    from qkwh import store

    con = store.connect(db, read_only=True)
    catalog = dict(con.execute("SELECT model_id, source_fingerprint FROM models").fetchall())
    con.close()
    clock = _Clock()
    real = writer_mod.time.monotonic
    batches: list[tuple[int, float]] = []
    w = writer_mod.BatchWriter(
        db,
        config_ids,
        set(),
        catalog=catalog,
        max_heads=max_heads,
        max_seconds=30.0 if pace else 1e9,
    )
    flush = w.flush

    def timed_flush():
        n0, t0 = len(w.pending), w.seconds
        n = flush()
        if n0:
            batches.append((n0, w.seconds - t0))
        return n

    w.flush = timed_flush
    if pace:
        writer_mod.time.monotonic = clock
    try:
        for u in units:
            clock.now += len(u) / pace if pace else 0.0
            w.add(u)
        w.close()
    finally:
        writer_mod.time.monotonic = real
    n = sum(len(u) for u in units)
    assert w.n_written == n, (w.n_written, n)
    return w.seconds, w.n_batches, batches


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    import duckdb
    import numpy as np
    import pyarrow as pa

    t_start = time.perf_counter()
    base, config_ids, outcomes = _prepare(a)
    scratch = base.parent
    units = _replicate(outcomes, a.heads, a.unit)
    rows_per_head = sum(t.num_rows for t in outcomes[0].tables.values())
    bytes_per_head = sum(t.nbytes for t in outcomes[0].tables.values())
    # receiving: unpickle one unit's outcomes, as the pool's result pipe does
    blobs = [pickle.dumps(u) for u in units[: min(len(units), 20)]]
    t0 = time.perf_counter()
    for b in blobs:
        pickle.loads(b)
    recv_ms = (time.perf_counter() - t0) / sum(len(u) for u in units[: len(blobs)]) * 1e3

    lines: list[str] = []
    ceiling = []
    for b in [int(x) for x in a.batch.split(",") if x.strip()]:
        best = min(
            (_run(base, scratch, config_ids, units, max_heads=b) for _ in range(a.repeat)),
            key=lambda r: r[0],
        )
        secs, nb, batches = best
        steady = [s / h for h, s in batches if h == b]
        ceiling.append(
            (b, secs, nb, secs / a.heads * 1e3, statistics.median(steady) * 1e3 if steady else None)
        )
        _log(f"batch {b}: {a.heads / secs:.0f} heads/s")
    pace = min(
        (
            _run(base, scratch, config_ids, units, max_heads=1024, pace=a.pace)
            for _ in range(a.repeat)
        ),
        key=lambda r: r[0],
    )
    long_rows = []
    if a.long:
        bmax = max(int(x) for x in a.batch.split(",") if x.strip())
        secs, nb, batches = _run(
            base, scratch, config_ids, _replicate(outcomes, a.long, a.unit), max_heads=bmax
        )
        tenth = max(len(batches) // 10, 1)
        first = sum(s for _, s in batches[:tenth]) / sum(h for h, _ in batches[:tenth]) * 1e3
        last = sum(s for _, s in batches[-tenth:]) / sum(h for h, _ in batches[-tenth:]) * 1e3
        long_rows = [(a.long, bmax, secs, nb, a.long / secs, first, last)]

    load = os.getloadavg()
    lines += [
        "# Writer: parent write time per head and ceiling (bench/writer.py)",
        "",
        f"**Machine:** {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Linux {platform.release()}; Python {platform.python_version()}, duckdb {duckdb.__version__}, "
        f"pyarrow {pa.__version__}, numpy {np.__version__}. Load average at the end: "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}. {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC.",
        "",
        f"**Heads:** {len(outcomes)} heads computed once (the default analyses: {', '.join(outcomes[0].analyses)}; {a.rows:,} vectors per file, "
        f"d = {a.d}, 16 buckets), replicated to distinct keys: {rows_per_head:,} rows and "
        f"{bytes_per_head / 1024:,.0f} KiB of Arrow per head, units of {a.unit} heads. "
        f"Fastest of {a.repeat} run(s) per figure, each on a fresh copy of the ingested warehouse.",
        "",
        "## Ceiling: results ready, written as fast as possible",
        "",
        "Writer time = open the warehouse, check the catalog, concatenate, one INSERT per table, "
        "head_runs, current_config, commit, close; per batch. Batches start at one unit, then each "
        "is four times the last, up to the batch size (the runner's ramp), so small totals also pay "
        'for a few small batches; "full batches" counts only the batches of the full size.',
        "",
        "| batch (heads) | heads | batches | writer s | ms/head | ms/head in full batches | heads/s |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for b, secs, nb, ms, steady in ceiling:
        full = f"{steady:.2f}" if steady is not None else "-"
        lines.append(
            f"| {b} | {a.heads} | {nb} | {secs:.2f} | {ms:.2f} | {full} | {a.heads / secs:,.0f} |"
        )
    lines += [
        "",
        f"Receiving (unpickling a unit's outcomes, as from the pool's pipe): {recv_ms:.2f} ms/head.",
        "",
        f"## At the benchmark's pace ({a.pace:g} heads/s, the runner's default batches)",
        "",
        f"{a.heads} heads: {pace[1]} batches (sizes {', '.join(str(h) for h, _ in pace[2])}), "
        f"writer {pace[0]:.2f} s = **{pace[0] / a.heads * 1e3:.2f} ms/head** amortised "
        f"(+ {recv_ms:.2f} ms/head receiving).",
        "",
    ]
    if long_rows:
        n, b, secs, nb, hps, first, last = long_rows[0]
        lines += [
            f"## Growth: {n:,} heads in batches of {b}",
            "",
            f"{nb} batches, {secs:.2f} s, {hps:,.0f} heads/s; first tenth of the batches {first:.2f} ms/head, "
            f"last tenth {last:.2f} ms/head.",
            "",
        ]
    lines.append(f"Total bench time {time.perf_counter() - t_start:.0f} s.")
    text = "\n".join(lines) + "\n"
    a.md.parent.mkdir(parents=True, exist_ok=True)
    a.md.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
