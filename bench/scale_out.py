#!/usr/bin/env python
"""Ray against the process pool, on the same data, same machine, same run; and the per-head cost model.

    .venv/bin/python bench/scale_out.py                 # 64 heads x 8,000 vectors, d=128 (~3 min on 2 cores)
    .venv/bin/python bench/scale_out.py --quick         # smoke run on a tiny model (~1 min, mostly Ray start-up)

What it does (docs/scaling-out.md quotes the figures):

1. writes (or reuses, under ``bench/results/data/ray-<key>``) a synthetic model with ``qkwh.synth``
   and ingests it into a warehouse;
2. computes it with the local process pool (``--workers``, default 2) and then with the Ray
   executor on a local cluster of two nodes (a head and a worker node, 1 CPU each, started with
   Ray's own test utilities), each on a fresh copy of the warehouse, ``--repeat`` times in
   alternation; checks that both write identical tables;
3. serves the same files from the local stand-in Hub (tests/sniffed/hub_server.py, 127.0.0.1),
   catalogs them with ``ingest --remote`` and computes them on the Ray cluster, workers reading
   over HTTP (loopback: a lower bound for a real network);
4. reports wall time, heads/s, the parent's CPU time per head (planning, receiving results and
   the DuckDB writes: the part that does not scale out), the workers' compute seconds per head
   (``head_runs.seconds``), bytes per head, the cluster's start-up, and the remote ingest's cost.

Timings are wall clock on a shared machine unless marked CPU; the load average is printed.
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
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_DISABLE_XET", "1")

import argparse
import datetime as dt
import hashlib
import platform
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SYNTH_CODE = ("synth.py", "synth_geometry.py")  # the generator: a change to it regenerates the data
OUT = REPO / "bench" / "results"
MiB = 1024 * 1024


def _model(args) -> Path:
    from qkwh.synth import write_dataset

    shape = dict(
        n_layers=args.layers,
        n_q_heads=args.q_heads,
        n_kv_heads=args.kv_heads,
        d=args.d,
        rows_per_file=args.rows,
        n_examples=args.examples,
        context_length=args.context,
        bucket_size=args.bucket,
        seed=0,
    )
    code = hashlib.sha256(
        b"".join((REPO / "qkwh" / f).read_bytes() for f in SYNTH_CODE)
    ).hexdigest()[:8]
    key = hashlib.sha256(repr(sorted(shape.items())).encode()).hexdigest()[:10] + "-" + code
    root = args.out / "data" / f"ray-{key}"
    if not (root / "_saver_state.json").exists():
        shutil.rmtree(root, ignore_errors=True)
        write_dataset(root, **shape)
    return root


def _results(db: Path) -> dict:
    from qkwh import store
    from qkwh.compute.writer import ANALYSIS_TABLES

    con = store.connect(db, read_only=True)
    try:
        tables = [t for ts in ANALYSIS_TABLES.values() for t in ts]
        return {
            t: sorted(map(repr, con.execute(f"SELECT * EXCLUDE (config_id) FROM {t}").fetchall()))
            for t in tables
        }
    finally:
        con.close()


def _head_seconds(db: Path) -> float:
    from qkwh import store

    con = store.connect(db, read_only=True)
    try:  # one row per head and analysis, the same seconds on each: the head's time in the worker
        return con.execute(
            "SELECT avg(s) FROM (SELECT max(seconds) AS s FROM head_runs "
            "GROUP BY model_id, layer, q_head)"
        ).fetchone()[0]
    finally:
        con.close()


def _run(db_template: Path, scratch: Path, name: str, **kwargs) -> dict:
    from qkwh.compute.runner import compute

    db = scratch / f"{name}.duckdb"
    db.unlink(missing_ok=True)
    shutil.copy(db_template, db)
    c0, t0 = time.process_time(), time.perf_counter()
    report = compute(db, **kwargs)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert not report.failures, report.failures[:3]
    return {
        "db": db,
        "wall": wall,
        "parent_cpu": cpu,
        "heads": report.n_written,
        "head_s": _head_seconds(db),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--q-heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--rows", type=int, default=8000)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--examples", type=int, default=500)
    p.add_argument("--context", type=int, default=131072)
    p.add_argument("--bucket", type=int, default=8192)
    p.add_argument(
        "--workers", type=int, default=2, help="pool workers (the cluster has the same CPUs)"
    )
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="tiny model, one repeat")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument(
        "--md",
        type=Path,
        default=None,
        help="report file (default bench/ray_results.md; --quick: <out>/ray-quick.md)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.layers, args.q_heads, args.kv_heads, args.rows, args.d, args.repeat = (
            2,
            4,
            2,
            600,
            32,
            1,
        )
        args.examples, args.context, args.bucket = 16, 8192, 512
    md_path = args.md or (
        args.out / "ray-quick.md" if args.quick else REPO / "bench" / "ray_results.md"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    scratch = args.out / "ray-scratch"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)

    from qkwh.compute.executors import check_local_interpreter
    from qkwh.errors import QkwhError

    try:
        check_local_interpreter()  # the same refusal as `qkwh compute --executor ray`
    except QkwhError as exc:
        print(exc, file=sys.stderr)
        return 2

    import ray
    from ray.cluster_utils import Cluster

    sys.path.insert(0, str(REPO / "tests" / "sniffed"))
    from hub_server import HubStandIn

    from qkwh.ingest import ingest

    t0 = time.perf_counter()
    model = _model(args)
    gen_s = time.perf_counter() - t0
    files = {
        q.relative_to(model).as_posix(): q.read_bytes()
        for q in sorted(model.rglob("*"))
        if q.is_file()
    }
    parquet = {k: len(v) for k, v in files.items() if k.endswith(".parquet")}
    template = scratch / "template.duckdb"
    t0 = time.perf_counter()
    ingest(str(model), warehouse=template, model_id="bench")
    ingest_s = time.perf_counter() - t0
    n_heads = args.layers * args.q_heads
    per_head_bytes = sum(parquet.values()) / n_heads  # the k files counted once for their GQA group

    t0 = time.perf_counter()
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    start_s = time.perf_counter() - t0
    runs: dict[str, list[dict]] = {"pool": [], "ray": []}
    remote: dict = {}
    try:
        for i in range(args.repeat):  # alternate, so both see the same background load
            runs["pool"].append(_run(template, scratch, f"pool{i}", workers=args.workers))
            runs["ray"].append(
                _run(template, scratch, f"ray{i}", executor="ray", ray_address=cluster.address)
            )
        identical = _results(runs["pool"][0]["db"]) == _results(runs["ray"][0]["db"])

        with HubStandIn("bench/corpus", {"bench": files}) as hub:
            os.environ["HF_ENDPOINT"] = hub.endpoint
            rdb = scratch / "remote.duckdb"
            t0 = time.perf_counter()
            ingest("hf://datasets/bench/corpus@bench", warehouse=rdb, model_id="bench", remote=True)
            remote["ingest_s"] = time.perf_counter() - t0
            remote["ingest_bytes"] = hub.bytes_sent()
            remote["ingest_requests"] = len(hub.requests)
            hub.clear_log()
            remote["run"] = _run(
                rdb, scratch, "ray-remote", executor="ray", ray_address=cluster.address
            )
            remote["compute_bytes"] = hub.bytes_sent()
            remote["identical"] = _results(remote["run"]["db"]) == _results(runs["pool"][0]["db"])
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()

    def best(name: str, key: str) -> float:
        return min(r[key] for r in runs[name])

    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    lines = [
        "# Ray executor against the process pool",
        "",
        f"**Machine:** {platform.node()} ({os.cpu_count()} cores), Python {platform.python_version()}, "
        f"Ray {ray.__version__}; load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
        f"(other engineers' processes share the cores); {dt.datetime.now():%Y-%m-%d %H:%M}.",
        f"**Model:** {n_heads} heads ({args.layers} layers x {args.q_heads} query heads, {args.kv_heads} KV "
        f"heads), {args.rows:,} vectors per file, d = {args.d}; {len(parquet)} parquet files, "
        f"{sum(parquet.values()) / MiB:.1f} MiB ({per_head_bytes / MiB:.2f} MiB per head). "
        f"Generated in {gen_s:.1f} s (0 when cached), ingested in {ingest_s:.1f} s.",
        f"**Cluster:** a head node and a worker node on this machine, 1 CPU each; started in {start_s:.1f} s. "
        f"Pool: {args.workers} worker processes. Best of {args.repeat} alternating runs.",
        "",
        "| executor | wall s | heads/s | parent CPU ms/head | worker s/head |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in ("pool", "ray"):
        wall = best(name, "wall")
        lines.append(
            f"| {name} | {wall:.2f} | {n_heads / wall:.1f} | "
            f"{1000 * best(name, 'parent_cpu') / n_heads:.1f} | {best(name, 'head_s'):.3f} |"
        )
    rr = remote["run"]
    lines.append(
        f"| ray, files read over HTTP (--remote) | {rr['wall']:.2f} | {n_heads / rr['wall']:.1f} | "
        f"{1000 * rr['parent_cpu'] / n_heads:.1f} | {rr['head_s']:.3f} |"
    )
    lines += [
        "",
        f"Tables identical (pool vs Ray): **{identical}**; Ray reading over HTTP vs pool: **{remote['identical']}**.",
        "",
        "## Cost per head (for sizing a cluster)",
        "",
        f"- **read**: {per_head_bytes / MiB:.2f} MiB per head from the Hub (its q file and its share of the k file); "
        f"the remote run fetched {remote['compute_bytes'] / MiB:.1f} MiB for {n_heads} heads "
        f"({remote['compute_bytes'] / n_heads / MiB:.2f} MiB/head).",
        f"- **compute**: {best('pool', 'head_s'):.3f} s per head on one core (worker time per head, pool run).",
        f"- **write**: {1000 * best('pool', 'parent_cpu') / n_heads:.1f} ms of parent CPU per head with the pool, "
        f"{1000 * best('ray', 'parent_cpu') / n_heads:.1f} ms with Ray (the driver also receives the results): "
        f"the serial part, a ceiling of about {n_heads / best('ray', 'parent_cpu'):.0f} heads/s whatever the cluster.",
        f"- **remote ingest**: {remote['ingest_s']:.1f} s, {remote['ingest_requests']} requests, "
        f"{remote['ingest_bytes'] / MiB:.2f} MiB read of {sum(parquet.values()) / MiB:.1f} MiB "
        f"({100 * remote['ingest_bytes'] / sum(parquet.values()):.1f} %: footers and integer columns).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(text)
    return 0 if identical and remote["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
