"""The Markdown report of the compute benchmark (``bench/run.py``) from its measurements."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

from measure import FULL, GROUP_COLUMNS, MiB, ModelSpec, Phase


def machine_line(m: dict) -> str:
    gemm = m.get("gemm")
    rate = (
        (
            f"; float64 GEMM on one thread {gemm['gflops_xtx']:.0f} GFLOP/s for {gemm['shape_xtx']}, "
            f"{gemm['gflops_square']:.0f} GFLOP/s for 1024 x 1024"
        )
        if gemm
        else ""
    )
    return (
        f"{m['cpu']}, {m['cores']} cores, {m['ram_gib']:.1f} GiB RAM, {m['os']}; Python {m['python']}, "
        f"numpy {m['numpy']} ({m['blas']}), scipy {m['scipy']}, duckdb {m['duckdb']}, "
        f"pyarrow {m['pyarrow']}{rate}"
    )


def _mib(b: int) -> str:
    return f"{b / MiB:,.0f}" if b else "-"


def _s(x: float) -> str:
    return f"{x:,.1f}" if x >= 10 else f"{x:.2f}"


def _ms(x: float) -> str:
    return f"{x * 1e3:,.0f}" if x >= 0.01 else f"{x * 1e3:.1f}"


def phase_table(main: dict) -> list[str]:
    read: Phase = main["read"]
    lines = [
        "| run | wall s | heads/s | x read-only | worker CPU s | parent CPU s | parent write s "
        "| write ms/head, first -> last tenth | max worker RSS MiB | parent RSS MiB | other load, cores |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in [read, *main["phases"]]:
        ratio = "1.0" if p is read else f"{p.wall_s / read.wall_s:.1f}"
        fail = f" ({p.failures} failed)" if p.failures else ""
        wr = f"{p.write_first_ms:.0f} -> {p.write_last_ms:.0f}" if p is not read else "-"
        lines.append(
            f"| {p.name}{fail} | {_s(p.wall_s)} | {p.heads_per_s:.1f} | {ratio} | {_s(p.cpu_s)} | "
            f"{_s(p.parent_cpu_s)} | {_s(p.consumer_s)} | {wr} | {_mib(p.worker_peak)} | "
            f"{_mib(p.parent_peak)} | {p.other_cores:.1f} |"
        )
    return lines


def find_phase(main: dict, name: str) -> Phase | None:
    return next((p for p in main["phases"] if p.name == name), None)


def memory_table(models: list[dict]) -> list[str]:
    names = ["read only", "all three (sampled)", "plasticity (exhaustive)"]
    head = (
        "| model | "
        + " | ".join(f"max worker RSS MiB, {n}" for n in names)
        + " | parent RSS MiB, all three |"
    )
    lines = [head, "|---|" + "---:|" * (len(names) + 1)]
    for m in models:
        cells = []
        for n in names:
            p = m["read"] if n == "read only" else find_phase(m, n)
            cells.append(
                (_mib(p.worker_peak) + (" (in-process)" if p.workers <= 1 else "")) if p else "-"
            )
        allp = find_phase(m, "all three (sampled)")
        lines.append(
            f"| {m['spec'].heads} heads x {m['spec'].rows:,} vectors | "
            + " | ".join(cells)
            + f" | {_mib(allp.parent_peak) if allp else '-'} |"
        )
    return lines


def scaling_table(rows: list[dict], heads: int) -> list[str]:
    if not rows:
        return []
    names = list(rows[0]["median_s"])
    lines = [
        "| vectors per file | " + " | ".join(f"{n} ms/head" for n in names) + " |",
        "|---:|" + "---:|" * len(names),
    ]
    for r in rows:
        lines.append(
            f"| {r['rows']:,} | " + " | ".join(_ms(r["median_s"][n]) for n in names) + " |"
        )
    if len(rows) >= 2 and rows[-1]["rows"] != rows[0]["rows"]:
        lo, hi = rows[0], rows[-1]
        span = math.log(hi["rows"] / lo["rows"])
        exps = []
        for n in names:
            a, b = lo["median_s"][n], hi["median_s"][n]
            exps.append(f"{math.log(b / a) / span:.2f}" if a > 0 and b > 0 else "-")
        lines.append(
            f"| growth exponent {lo['rows']:,} -> {hi['rows']:,} | " + " | ".join(exps) + " |"
        )
    return lines


def head_flops(spec: ModelSpec) -> dict[str, float]:
    """Floating-point operations (2 per multiply-add) of the dense linear algebra of one head with
    the default parameters: what no implementation of these analyses avoids.

    * scatter matrices: the keys' Gram matrix (made once per k file and shared by its query heads)
      and the queries' per-bucket Gram matrices (which add up to the queries' scatter matrix and
      are plasticity's query covariances), n d (d + 1) each side;
    * rotation: the projections of all rows on a, b and the 2 x 30 complement directions, and
      their Chebyshev moments (order K for the ω grid; the constant weight to order 2K);
    * plasticity: per bucket, the P = 1024 pair variances (a triangular d x d product each) and
      means.
    """
    from qkwh.analyses.fourier import cheb_order
    from qkwh.params import RunConfig

    cfg = RunConfig()
    n, d, buckets = spec.rows, spec.d, spec.n_buckets
    dirs = 2 + 2 * min(cfg.rotation.max_pairs, (d - 2) // 2)
    half = 0.5 * (spec.context_length - 1)
    k1 = cheb_order(math.pi / spec.bucket_size * half)
    k2 = cheb_order(2.0 * math.pi / spec.bucket_size * half)
    pairs = cfg.plasticity.num_pairs_per_bucket
    per_k = spec.heads / spec.n_k_files
    return {
        f"key scatter matrix (per k file, over its {per_k:.2f} query heads)": n
        * d
        * (d + 1)
        / per_k,
        "query scatter matrices (per bucket)": n * d * (d + 1),
        "rotation projections": 2.0 * (2 * n) * d * dirs,
        "rotation Chebyshev moments": 2.0 * (2 * n) * (k1 * dirs + k2),
        "plasticity pair variances and means": 2.0 * buckets * pairs * (d * (d + 1) / 2 + d),
    }


def bound_lines(m: dict, spec: ModelSpec, scale: list[dict]) -> list[str]:
    gemm = m.get("gemm")
    if not gemm:
        return []
    flops = head_flops(spec)
    total = sum(flops.values())
    rate = gemm["gflops_xtx"] * 1e9
    lines = ["| part | GFLOP per head | ms at the GEMM rate |", "|---|---:|---:|"]
    for name, f in flops.items():
        lines.append(f"| {name} | {f / 1e9:.3f} | {1e3 * f / rate:.1f} |")
    lines.append(f"| **total** | **{total / 1e9:.3f}** | **{1e3 * total / rate:.1f}** |")
    row = next((r for r in scale if r["rows"] == spec.rows), None)
    text = (
        f"At {gemm['gflops_xtx']:.0f} GFLOP/s (float64, one thread, a general product "
        f"{gemm['shape_xtx']}), the dense algebra of one head of {spec.rows:,} vectors needs at least "
        f"{1e3 * total / rate:.1f} ms."
    )
    blas = m.get("blas_calls") or {}
    blas_total = sum(blas.values()) / 1e3
    if blas:
        lines += ["", "| BLAS call, at its shape, one thread | ms per head |", "|---|---:|"]
        lines += [f"| {name} | {ms:.1f} |" for name, ms in blas.items()]
        lines.append(f"| **total** | **{1e3 * blas_total:.1f}** |")
        text += (
            f" BLAS does not reach that rate on these shapes (tall-skinny products, symmetric "
            f"rank-k updates, small triangular multiplies): the same calls, timed at their real "
            f"shapes, take {1e3 * blas_total:.1f} ms per head."
        )
    read_g, all_g = GROUP_COLUMNS
    if row and all_g in row["median_s"]:
        read = row["median_s"][read_g]
        allt = row["median_s"][all_g]
        text += (
            f" Measured (scaling table, CPU time per head, a GQA group at a time as `qkwh compute` runs "
            f"them): reading {_ms(read)} ms (the q file, and the group's k file shared), the three "
            f"analyses {_ms(allt)} ms, so (read + analyses) / read = {(read + allt) / read:.1f}; with the "
            f"analyses at their flop floor it would be {(read + total / rate) / read:.1f}"
        )
        if blas:
            text += (
                f", and with nothing but their BLAS calls {(read + blas_total) / read:.1f}: the part of the "
                f"analyses that is not BLAS takes {_ms(max(allt - blas_total, 0.0))} ms per head."
            )
        else:
            text += "."
    exh = m.get("blas_calls_exhaustive") or {}
    if exh:
        exh_total = sum(exh.values())
        lines += [
            "",
            "| BLAS call of exhaustive plasticity, at its shape, one thread | ms per head |",
            "|---|---:|",
        ]
        lines += [f"| {name} | {ms:.1f} |" for name, ms in exh.items()]
        lines.append(f"| **total** | **{exh_total:.1f}** |")
        if row and read_g in row["median_s"]:
            read = row["median_s"][read_g]
            text += (
                f" Exhaustive plasticity alone: its BLAS calls at the shapes of the model's own heads take "
                f"{exh_total:.1f} ms per head, so with nothing but them (read + BLAS) / read would be "
                f"{(read + exh_total / 1e3) / read:.1f}"
            )
            if "plasticity (exhaustive)" in row["median_s"]:
                text += f"; measured alone, one head at a time: {_ms(row['median_s']['plasticity (exhaustive)'])} ms."
            else:
                text += "."
    return [*lines, "", text]


def _exponent(scale: list[dict], name: str) -> float | None:
    if len(scale) < 2 or name not in scale[0]["median_s"] or scale[-1]["rows"] == scale[0]["rows"]:
        return None
    a, b = scale[0]["median_s"][name], scale[-1]["median_s"][name]
    if a <= 0 or b <= 0:
        return None
    return math.log(b / a) / math.log(scale[-1]["rows"] / scale[0]["rows"])


def _verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def _ratio_target(what: str, wall_s: float, read_s: float, target: float, detail: str) -> str:
    """One target line: ``what`` = wall / read-only, its verdict against ``target`` and, when
    missed, by how much."""
    r = wall_s / read_s
    return (
        f"- {what} = {r:.1f} x read-only ({detail}; target <= {target:g} x): {_verdict(r <= target)}"
        + ("" if r <= target else f", by {r / target:.1f} x")
    )


def verdicts(
    main: dict,
    small: dict | None,
    scale: list[dict] | None = None,
    target: float = 3.0,
    exhaustive_target: float = 5.0,
    exponent_target: float = 1.05,
    plasticity_ms: float = 40.0,
) -> list[str]:
    out = []
    scale = scale or []
    spec: ModelSpec = main["spec"]
    if (spec.heads, spec.rows, spec.d) != (FULL["heads"], FULL["rows"], 128):
        out.append(
            f"- note: the targets are set for {FULL['heads']} heads x {FULL['rows']:,} vectors, d = 128; on "
            "a smaller model pool start-up dominates both times and the ratio means little"
        )
    read = main["read"]
    allp = find_phase(main, "all three (sampled)")
    if allp:
        out.append(
            _ratio_target(
                "time: all three (sampled plasticity)",
                allp.wall_s,
                read.wall_s,
                target,
                f"{_s(allp.wall_s)} s vs {_s(read.wall_s)} s",
            )
        )
        if read.cpu_s > 0:
            out.append(
                f"- in the workers alone (CPU time of the tasks: no pool start-up, no parent writes): all "
                f"three (sampled) = {allp.cpu_s / read.cpu_s:.1f} x read-only ({_s(allp.cpu_s)} s vs "
                f"{_s(read.cpu_s)} s)"
            )
    exh = find_phase(main, "plasticity (exhaustive)")
    if exh:
        out.append(
            _ratio_target(
                "exhaustive plasticity",
                exh.wall_s,
                read.wall_s,
                exhaustive_target,
                f"{_s(exh.wall_s)} s",
            )
        )
    allx = find_phase(main, "all three (exhaustive)")
    if allx:
        out.append(
            f"- all three with exhaustive plasticity = {allx.wall_s / read.wall_s:.1f} x read-only "
            f"({_s(allx.wall_s)} s)"
        )
    for name in (
        "pca",
        "rotation",
        "plasticity (sampled)",
        "plasticity (exhaustive)",
        "all three (sampled)",
    ):
        e = _exponent(scale, name)
        if e is not None:
            out.append(
                f"- growth exponent of {name}, {scale[0]['rows']:,} -> {scale[-1]['rows']:,} vectors: "
                f"{e:.3f} (target <= {exponent_target:g}): {_verdict(e <= exponent_target)}"
            )
    row = next((r for r in scale if r["rows"] == spec.rows), None)
    if row and "plasticity (sampled)" in row["median_s"]:
        ms = 1e3 * row["median_s"]["plasticity (sampled)"]
        out.append(
            f"- plasticity per head on one core at {spec.rows:,} vectors: {ms:.0f} ms CPU (target <= "
            f"{plasticity_ms:g} ms): {_verdict(ms <= plasticity_ms)}"
        )
    for name, base in (
        ("plasticity (sampled, empirical)", "plasticity (sampled)"),
        ("plasticity (exhaustive, empirical)", "plasticity (exhaustive)"),
    ):
        e, b = find_phase(main, name), find_phase(main, base)
        if e:
            vs = (
                f", {e.cpu_s / b.cpu_s:.1f} x the worker CPU of {base}" if b and b.cpu_s > 0 else ""
            )
            out.append(
                f"- cost of the empirical estimator: {name} = {e.wall_s / read.wall_s:.1f} x read-only "
                f"({_s(e.wall_s)} s){vs}"
            )
    if small:
        a, b = find_phase(small, "all three (sampled)"), allp
        if a and b and a.worker_peak and b.worker_peak:
            grew = b.worker_peak / a.worker_peak
            ok = b.worker_peak <= 1.10 * a.worker_peak + 16 * MiB
            out.append(
                f"- memory: max worker RSS {_mib(a.worker_peak)} MiB at {small['spec'].heads} heads, "
                f"{_mib(b.worker_peak)} MiB at {main['spec'].heads} heads (x{grew:.2f}; criterion: "
                f"within 10 % + 16 MiB): **{'independent of model size' if ok else 'grows with the model'}**"
            )
    return out


def profile_lines(profile: dict | None) -> list[str]:
    if not profile:
        return []
    lines = ["| function (own time) | ms per head | share |", "|---|---:|---:|"]
    for name, ms, share in profile["top"]:
        lines.append(f"| `{name}` | {ms:.1f} | {100 * share:.0f} % |")
    return lines


def report(
    m: dict,
    main: dict,
    small: dict | None,
    scale: list[dict],
    scale_heads: int,
    workers: int,
    started: str,
    loads: tuple[str, str],
    repeat: int = 1,
    profile: dict | None = None,
) -> str:
    spec: ModelSpec = main["spec"]
    gen = main["generation_s"]
    gen_txt = (f"generated in {gen:.1f} s" if gen is not None else "generation time unknown") + (
        " (reused from the cache)" if main["generation_cached"] else ""
    )
    tries = f", fastest of {repeat} tries" if repeat > 1 else ""
    reads = ", ".join(f"{w:.2f}" for w in main["read_walls"])
    notes = (
        f"wall: `runner.compute` end to end on a fresh copy of the ingested warehouse (pool start, reads, "
        f"analyses, DuckDB writes){tries}. read only: the same group tasks through the same executor, "
        f"reading files only (best of {len(main['read_walls'])}: {reads} s). worker CPU: CPU time of all "
        "tasks in the workers (process_time). parent CPU: CPU time of the parent process, all threads "
        "(DuckDB's included). parent write: parent time spent between results (receiving them and the "
        "batched DuckDB writes), in all and per head over the first and the last tenth of the heads "
        "written. RSS: "
        "peak resident set (VmHWM) of each process; workers report their own. other load: CPU time used "
        "by other processes on the machine during the run (/proc/stat minus this run's processes), in "
        "cores; above ~0.2 the wall times are inflated. empirical: `plasticity.empirical=true`, the "
        "real-query estimator on the same pairs as the Gaussian one."
    )
    lines = [
        f"# qkwh benchmark ({started}, qkwh {m['qkwh']}, git {m['git'] or '?'})",
        "",
        f"**Machine:** {machine_line(m)}. Load average (1, 5, 15 min) at start {loads[0]}, "
        f"at end {loads[1]}.",
        "",
        f"**Model:** {spec.describe()}; {main['n_files']} files, {main['data_bytes'] / MiB:,.0f} MiB of zstd "
        f"parquet; {gen_txt}; ingested in {main['ingest_s']:.1f} s. {main['n_tasks']} group tasks "
        f"(one per k file), {workers} workers, BLAS 1 thread per worker.",
        "",
        f"## Compute, {spec.heads} heads, {workers} workers",
        "",
        *phase_table(main),
        "",
        notes,
        "",
    ]
    if small:
        lines += ["## Peak memory against model size", "", *memory_table([small, main]), ""]
    if scale:
        lines += [
            f"## Scaling with vectors per head ({scale_heads} heads, 1 process, median per head)",
            "",
            *scaling_table(scale, scale_heads),
            "",
            "Per head, CPU time (process_time, fastest of up to 3 tries): q and k files read (k re-read "
            "for every head here), then each analysis alone on the same arrays, and the three in one "
            "call (they share the head's query and key moments); no pool, no DuckDB; the process "
            "keeps freed memory like a compute worker. Growth exponent: slope of log time against log "
            "vectors (1 = linear).",
            "",
        ]
    bound = bound_lines(m, spec, scale)
    if bound:
        lines += ["## What bounds the analyses: flops and BLAS", "", *bound, ""]
    if profile:
        lines += [
            f"## Profile (cProfile, the three analyses, {profile['heads']} heads of {spec.rows:,} vectors, "
            "one process)",
            "",
            *profile_lines(profile),
            "",
        ]
    lines += ["## Targets", "", *verdicts(main, small, scale), ""]
    return "\n".join(lines)


def to_json(obj):
    if isinstance(obj, (Phase, ModelSpec)):
        return {
            **asdict(obj),
            **({"heads_per_s": obj.heads_per_s} if isinstance(obj, Phase) else {}),
        }
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(type(obj).__name__)


# ---------------------------------------------------------------------------------------------
# the report at corpus scale (bench/corpus.py)
# ---------------------------------------------------------------------------------------------


def _mb(b: int) -> str:
    return f"{b / 1e6:,.1f}"


def corpus_report(
    m: dict,
    info: dict,
    best: dict,
    walls: list[float],
    static: dict | None,
    started: str,
    loads: tuple[str, str],
    index_target_mb: float = 10.0,
    wall_target_s: float = 60.0,
) -> str:
    """The Markdown report of ``bench/corpus.py``: `qkwh report` on a corpus of ``info['models']``
    models, with and without ``--static``."""
    tries = (
        f", fastest of {len(walls)} ({', '.join(f'{w:.1f}' for w in walls)} s)"
        if len(walls) > 1
        else ""
    )
    made = (
        f"synthesised in {info['synth_s']:.0f} s, ingested in {info['ingest_s']:.0f} s, computed in "
        f"{info['compute_s']:.0f} s ({', '.join(f'{k}={v}' for k, v in info['fast_params'].items())}), "
        f"built in {info['build_s']:.0f} s (once, then cached: these times depend on the machine's load "
        f"then)"
    )
    lines = [
        f"# `qkwh report` at corpus scale ({started}, qkwh {m['qkwh']}, git {m['git'] or '?'})",
        "",
        f"**Machine:** {machine_line(m)}. Load average (1, 5, 15 min) at start {loads[0]}, at end "
        f"{loads[1]}.",
        "",
        f"**Corpus:** {info['models']} synthetic models shaped like the registry's models and checkpoints "
        f"(layers, query and KV heads, head dimension, context length, bucket size), {info['heads']:,} "
        f"query heads in all, {info['rows']:,} vectors per file, {info['examples']} examples; {made}.",
        "",
        "| run | wall s | CPU s | other load, cores | index.html MB | largest page MB | pages | files "
        "| folder MB | files by kind |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, r in (("`qkwh report`", best), ("`qkwh report --static`", static)):
        if r is None:
            continue
        kinds = ", ".join(f"{n} {k}" for k, n in r["by_ext"].items())
        lines.append(
            f"| {name} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['other_cores']:.1f} | "
            f"{_mb(r['index_bytes'])} | {_mb(r['largest_page_bytes'])} (`{r['largest_page']}`) | "
            f"{r['pages']} | {r['files']} | {_mb(r['bytes'])} | {kinds} |"
        )
    if best.get("browser_index_s") is not None:
        page = best.get("browser_page_s")
        lines += [
            "",
            f"Opened from file:// in headless Chromium, every chart drawn: index.html in "
            f"{best['browser_index_s']:.1f} s"
            + (
                f", the largest model page (`{best['largest_model_page']}`) in {page:.1f} s"
                if page
                else ""
            )
            + ".",
        ]
    lines += [
        "",
        f"wall: the command in a fresh process (imports included), into an empty folder{tries}. "
        "CPU: user + system time of that process. other load: CPU time of the rest of the machine "
        "during the run, in cores (/proc/stat minus the run's own); above ~0.2 the wall time is inflated.",
        "",
        "## Targets",
        "",
    ]
    idx = best["index_bytes"] / 1e6
    lines.append(
        f"- index.html {idx:.1f} MB (target <= {index_target_mb:g} MB): {_verdict(idx <= index_target_mb)}"
    )
    lines.append(
        f"- whole report {best['wall_s']:.1f} s on {m['cores']} cores (target <= {wall_target_s:g} s): "
        f"{_verdict(best['wall_s'] <= wall_target_s)}"
    )
    return "\n".join(lines) + "\n"
