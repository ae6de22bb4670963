#!/usr/bin/env python
"""qkwh compute benchmark: read-only baseline, each analysis, memory, scaling with vectors per head.

    .venv/bin/python bench/run.py                      # production shape: 300 heads x 8,000 vectors, d=128
    .venv/bin/python bench/run.py --quick              # smoke run (~30 s)
    .venv/bin/python bench/run.py --heads 300 --rows 8000 --workers 2 [--repeat 2]

What it does (bench/README.md has the method):

1. generates (or reuses, cached under ``<out>/data/<key>``) a synthetic model with ``qkwh.synth``;
2. ingests it into a fresh warehouse (timed separately);
3. read-only baseline: maps a function that reads every q and k file (``reader.read_file``, the
   k file once per group, exactly like ``work.run_group``) over the same ``GroupTask`` list through
   the same executor the compute uses (process pool, BLAS pinned to one thread per worker);
4. times ``runner.compute`` for each analysis alone (reach and rope included), all three
   together, plasticity in exhaustive mode and the empirical estimator (sampled and
   exhaustive), each on a fresh copy of the ingested warehouse;
5. peak memory: VmHWM of every worker (reported by the worker itself) and of the parent, for
   this model and for a smaller one, to show that it does not grow with the model;
6. scaling: per-head CPU time of each analysis at 2k / 8k / 32k vectors per file, in one process;
7. the machine's float64 GEMM rate on one thread, against which the flop count of one head is
   set (the time floor of the analyses), and the time of the BLAS calls of one head at their
   real shapes (the floor with this BLAS);
8. prints a Markdown report and writes it (``bench/results.md``; ``--quick`` writes under ``<out>``).

The measurements are in ``bench/measure.py``, the report in ``bench/report.py``.
"""

from __future__ import annotations

import os

# The parent runs the single-process scaling runs: give it one BLAS thread like every pool worker
# (must happen before numpy is imported).
for _var in (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import argparse  # noqa: E402
import datetime as dt  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

# Pool workers import this module too (spawn re-imports __main__): keep its top level to what a
# compute worker imports anyway (bench/measure.py keeps DuckDB and ingest out of its top level).
from measure import (  # noqa: E402
    BENCH,
    FULL,
    RUNS,
    SAMPLED,
    SMALL_RUNS,
    ModelSpec,
    blas_floor,
    exhaustive_blas_floor,
    gemm_rate,
    loadavg,
    machine,
    model_phases,
    profile_heads,
    scaling,
)
from report import machine_line, report, to_json  # noqa: E402

QUICK = {
    "heads": 16,
    "rows": 2000,
    "small_heads": 8,
    "scaling_heads": 4,
    "scaling_rows": "500,1000,2000",
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="small smoke run (~30 s)")
    ap.add_argument("--heads", type=int, help="query heads of the main model (300; quick 24)")
    ap.add_argument(
        "--rows", type=int, help="vectors per file of the main model (8000; quick 2000)"
    )
    ap.add_argument("--workers", type=int, default=2, help="pool workers (2)")
    ap.add_argument(
        "--small-heads",
        type=int,
        help="heads of the smaller model for the memory comparison (60; quick 8; 0 skips it)",
    )
    ap.add_argument(
        "--scaling-heads", type=int, help="heads of the scaling runs (16; quick 4; 0 skips them)"
    )
    ap.add_argument("--scaling-rows", help="vectors per file of the scaling runs (2000,8000,32000)")
    ap.add_argument(
        "--runs",
        default=",".join(RUNS),
        help=f"compute runs of the main model, besides read-only ({','.join(RUNS)})",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run each compute run N times and keep the fastest (for a shared machine)",
    )
    ap.add_argument(
        "--no-exhaustive", action="store_true", help="skip every exhaustive plasticity run"
    )
    ap.add_argument(
        "--no-jackknife",
        action="store_true",
        help="skip the document-group jackknife column of the scaling runs (about 10x the three analyses)",
    )
    ap.add_argument(
        "--no-profile",
        action="store_true",
        help="skip the cProfile of the three analyses in one process (scaling heads, main rows; "
        "its top lines go into the report, the listing to <out>/profile.txt)",
    )
    ap.add_argument("--profile-only", action="store_true", help="only the profile (printed)")
    ap.add_argument(
        "--check",
        action="store_true",
        help="only the guard's figures (ratios; bench/guard.py): exit 1 naming each one more "
        "than --tolerance worse than the accepted ones in bench/accepted.json",
    )
    ap.add_argument(
        "--accept",
        action="store_true",
        help="only the guard's figures, written to bench/accepted.json as the accepted ones",
    )
    ap.add_argument(
        "--tolerance",
        type=float,
        default=0.15,
        help="--check: how much worse a ratio may be (0.15)",
    )
    ap.add_argument(
        "--guard-heads",
        type=int,
        default=60,
        help="--check/--accept: query heads of the guard's model (60; 8,000 vectors unless --rows)",
    )
    ap.add_argument("--allow-failures", action="store_true", help="keep going when heads fail")
    ap.add_argument(
        "--out",
        type=Path,
        default=BENCH / "results",
        help="data cache, warehouses, JSON and profiles (bench/results, git-ignored)",
    )
    ap.add_argument(
        "--md", type=Path, help="Markdown report (bench/results.md; quick: <out>/quick.md)"
    )
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

    if args.check or args.accept:
        return guard_main(args, out, log)
    if args.profile_only:
        print(profile_heads(max(args.scaling_heads, 1), args.rows, out, SAMPLED, log)["text"])
        return 0
    m = machine()
    log("measuring the float64 GEMM rate on one thread ...")
    m["gemm"] = gemm_rate()
    m["blas_calls"] = blas_floor(ModelSpec(heads=args.heads, rows=args.rows))
    load0 = loadavg()
    log(f"machine: {machine_line(m)}; load average {load0}")
    if load0 != "?" and float(load0.split()[0]) > 0.5 * m["cores"]:
        log(
            f"warning: the machine is busy (load {load0} on {m['cores']} cores): timings will be inflated"
        )
    exhaustive = not args.no_exhaustive
    main_model = model_phases(
        ModelSpec(heads=args.heads, rows=args.rows),
        out,
        args.workers,
        runs=args.runs,
        allow_failures=args.allow_failures,
        log=log,
        repeat=args.repeat,
    )
    small = None
    if args.small_heads:
        small_runs = [r for r in SMALL_RUNS if r in args.runs] or args.runs[:1]
        small = model_phases(
            ModelSpec(heads=args.small_heads, rows=args.rows),
            out,
            args.workers,
            runs=small_runs,
            allow_failures=args.allow_failures,
            log=log,
            repeat=args.repeat,
        )
    scale: list[dict] = []
    if args.scaling_heads:
        rows_list = [int(r) for r in str(args.scaling_rows).split(",") if r.strip()]
        scale = scaling(
            args.scaling_heads,
            rows_list,
            out,
            exhaustive=exhaustive,
            log=log,
            jackknife=not args.no_jackknife,
        )
        if exhaustive:
            m["blas_calls_exhaustive"] = exhaustive_blas_floor(
                args.scaling_heads, args.rows, out, log
            )
    prof = None
    if not args.no_profile:
        log("profiling ...")
        prof = profile_heads(max(args.scaling_heads, 1), args.rows, out, SAMPLED, log)
        (out / "profile.txt").write_text(prof["text"])
        log(f"profile written to {out / 'profile.txt'}")
    text = report(
        m,
        main_model,
        small,
        scale,
        args.scaling_heads,
        args.workers,
        started,
        (load0, loadavg()),
        args.repeat,
        profile=prof,
    )
    print(text)
    args.md.parent.mkdir(parents=True, exist_ok=True)
    args.md.write_text(text)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    (out / f"results-{stamp}.json").write_text(
        json.dumps(
            {
                "machine": m,
                "args": {k: str(v) for k, v in vars(args).items()},
                "main": main_model,
                "small": small,
                "scaling": scale,
                "profile_top": prof["top"] if prof else None,
            },
            default=to_json,
            indent=1,
        )
    )
    log(f"report written to {args.md} (total {time.perf_counter() - t_start:.0f} s)")
    return 0


def guard_main(args: argparse.Namespace, out: Path, log) -> int:
    """--check / --accept: the guard's figures (bench/guard.py) against the accepted ones."""
    import guard

    new = guard.measure(args.guard_heads, args.rows, args.workers, max(args.repeat, 2), out, log)
    accepted = guard.load_accepted()
    print(guard.table(new, accepted, args.tolerance))
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    (out / f"guard-{stamp}.json").write_text(json.dumps(new, indent=1) + "\n")
    if args.accept:
        guard.write_accepted(new)
        log(f"accepted: {guard.ACCEPTED} written")
        return 0
    if accepted is None:
        log(f"no accepted figures ({guard.ACCEPTED}): run with --accept first")
        return 1
    worse = guard.compare(new, accepted, args.tolerance)
    for line in worse:
        print(f"WORSE: {line}", file=sys.stderr)
    log("check failed" if worse else "check passed: no figure more than the tolerance worse")
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
