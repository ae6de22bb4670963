#!/usr/bin/env python
"""`qkwh report` on a corpus the size of the research one: 23 models and checkpoints x 300 heads.

    .venv/bin/python bench/corpus.py             # the 23 registry models, 300 heads each (~10 min the first time)
    .venv/bin/python bench/corpus.py --quick     # smoke run: 3 models x 12 heads (~1 min)

What it does (bench/README.md "The report at corpus scale"; figures in bench/corpus_results.md):

1. writes (or reuses, under ``bench/results/corpus/<key>/``) one synthetic model per model of the
   registry (configs/models.csv, the 23 that are not the fixture) with that model's shape: its
   layers, query and KV heads, head dimension, context length and bucket size, 300 query heads
   drawn with ``random.Random(seed)`` (cross-attention layers left out), ``--rows`` vectors per
   file, planted parameters jittered per head and per model (``qkwh.synth.write_dataset``, what
   ``qkwh synth`` runs); ingests each under its registry id (so families, labels and checkpoint
   order are the registry's), computes every head with a fast parameter set (fewer rotation
   pairs and plasticity pairs: the report reads the marts, whose size does not depend on them)
   and builds the marts.  The built warehouse is cached with the data;
2. copies the built warehouse and its dbt folder into a scratch folder and times, each command
   in a fresh process on that copy: ``qkwh compute --force`` with the same parameters (every head
   again: heads/s; ``--no-compute`` skips it), ``qkwh build`` twice (the first build of a copied
   warehouse parses the dbt project from scratch, the second reuses the parse; per-kind node
   times and the slowest nodes from dbt's run_results.json; ``--no-build`` skips both);
3. times ``qkwh report`` (the command, in a fresh process) on that warehouse into a fresh folder,
   ``--repeat`` times, the fastest counting; then once with ``--static`` (PNG and SVG too);
4. reports wall time, CPU time, the size of index.html, of the largest page and of the whole
   folder, and the number of files, with the machine's load, against the targets (first build
   <= 25 s, report <= 60 s, folder <= 50 MB, index.html <= 5 MB).

Nothing here is a test: tests/test_bench_corpus_smoke.py only checks that the script runs.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import hashlib
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SYNTH_CODE = ("synth.py", "synth_geometry.py")  # the generator: a change to it regenerates the data
BENCH = REPO / "bench"
OUT = BENCH / "results"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))

#: compute parameters of the corpus: fast (the marts' size does not depend on them)
FAST = {
    "rotation.max_pairs": "8",
    "rotation.omega_grid": "128",
    "plasticity.num_pairs_per_bucket": "128",
}


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--quick", action="store_true", help="3 models x 12 heads, 300 vectors (smoke run)"
    )
    p.add_argument(
        "--models", type=int, default=None, help="first N registry models (default: all 23)"
    )
    p.add_argument("--heads", type=int, default=300, help="query heads per model")
    p.add_argument("--rows", type=int, default=1000, help="vectors per q and k file")
    p.add_argument("--examples", type=int, default=100, help="source examples per model")
    p.add_argument("--seed", type=int, default=0, help="seed of the head draw and the data")
    p.add_argument("--workers", type=int, default=2, help="compute workers")
    p.add_argument("--repeat", type=int, default=1, help="timed report runs; the fastest counts")
    p.add_argument("--no-static", action="store_true", help="skip the timed `--static` run")
    p.add_argument(
        "--no-compute", action="store_true", help="skip timing `qkwh compute --force` on the copy"
    )
    p.add_argument("--no-build", action="store_true", help="skip timing `qkwh build` on the copy")
    p.add_argument(
        "--prepare-only", action="store_true", help="make (or find) the corpus, time nothing"
    )
    p.add_argument(
        "--out", type=Path, default=OUT, help="scratch folder (cached corpus, report folders)"
    )
    p.add_argument(
        "--md",
        type=Path,
        default=None,
        help="write the report here (default: bench/corpus_results.md; --quick: OUT/corpus-quick.md)",
    )
    a = p.parse_args(argv)
    if a.quick:
        a.models, a.heads, a.rows, a.examples = (
            a.models or 3,
            min(a.heads, 12),
            min(a.rows, 300),
            20,
        )
    a.md = a.md or (a.out / "corpus-quick.md" if a.quick else BENCH / "corpus_results.md")
    return a


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# the corpus
# ---------------------------------------------------------------------------------------------


def registry_models(limit: int | None) -> list[dict[str, str]]:
    """The registry's models in file order, the test fixture left out."""
    with open(REPO / "configs" / "models.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["study"] != "fixture"]
    return rows[:limit] if limit else rows


def _layers(text: str) -> set[int]:
    return {int(x) for x in text.split(";") if x.strip()}


def head_draw(entry: dict[str, str], n: int, seed: int) -> list[tuple[int, int]]:
    """``n`` (layer, q_head) pairs drawn with random.Random: cross-attention layers left out."""
    skip = _layers(entry["cross_attention_layers"])
    pool = [
        (layer, h)
        for layer in range(int(entry["num_layers"]))
        if layer not in skip
        for h in range(int(entry["num_q_heads"]))
    ]
    return sorted(random.Random(f"{seed}:{entry['model_id']}").sample(pool, min(n, len(pool))))


def corpus_key(models: list[dict[str, str]], a: argparse.Namespace) -> str:
    h = hashlib.sha256()
    for path in (*(REPO / "qkwh" / f for f in SYNTH_CODE), REPO / "configs" / "models.csv"):
        h.update(path.read_bytes())
    h.update(
        json.dumps(
            [[m["model_id"] for m in models], a.heads, a.rows, a.examples, a.seed, FAST]
        ).encode()
    )
    return f"m{len(models)}-h{a.heads}-r{a.rows}-{h.hexdigest()[:10]}"


def ensure_corpus(models: list[dict[str, str]], a: argparse.Namespace) -> tuple[Path, dict]:
    """The built warehouse of the corpus (cached) and how long making it took."""
    from qkwh.build import build
    from qkwh.compute.runner import compute
    from qkwh.ingest import ingest
    from qkwh.params import RunConfig
    from qkwh.synth import write_dataset

    root = a.out / "corpus" / corpus_key(models, a)
    db = root / "corpus.duckdb"
    done = root / "corpus.json"
    if done.exists() and db.exists():
        return db, json.loads(done.read_text())
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    times = {"synth_s": 0.0, "ingest_s": 0.0}
    heads = 0
    for i, m in enumerate(models):
        sel = head_draw(m, a.heads, a.seed)
        heads += len(sel)
        _log(
            f"[{i + 1}/{len(models)}] {m['model_id']}: {len(sel)} heads of {m['num_layers']} layers x "
            f"{m['num_q_heads']} q heads, d = {m['head_dim']}"
        )
        t0 = time.perf_counter()
        data = write_dataset(
            root / "data" / m["model_id"],
            model_name=f"synthetic/{m['model_id']}",
            n_layers=int(m["num_layers"]),
            n_q_heads=int(m["num_q_heads"]),
            n_kv_heads=int(m["num_kv_heads"]),
            heads=sel,
            d=int(m["head_dim"]),
            rows_per_file=a.rows,
            n_examples=a.examples,
            context_length=int(m["context_length"]),
            bucket_size=int(m["bucket_size"]),
            seed=a.seed * 1000 + i,
            param_jitter=0.15,
            layer_drift_decay=0.5 * (i % 4),
        )
        t1 = time.perf_counter()
        ingest(str(data), warehouse=db, model_id=m["model_id"])
        times["synth_s"] += t1 - t0
        times["ingest_s"] += time.perf_counter() - t1
    _log(
        f"computing {heads} heads on {a.workers} workers ({', '.join(f'{k}={v}' for k, v in FAST.items())}) ..."
    )
    t0 = time.perf_counter()
    rep = compute(db, workers=a.workers, config=RunConfig().with_overrides(FAST))
    if rep.failures:
        raise SystemExit(f"{len(rep.failures)} head(s) failed, e.g. {rep.failures[0]}")
    times["compute_s"] = time.perf_counter() - t0
    _log("building the marts ...")
    t0 = time.perf_counter()
    build(db)
    times["build_s"] = time.perf_counter() - t0
    info = {
        "models": len(models),
        "heads": heads,
        "rows": a.rows,
        "examples": a.examples,
        "fast_params": FAST,
        **times,
    }
    done.write_text(json.dumps(info, indent=1) + "\n")
    return db, info


# ---------------------------------------------------------------------------------------------
# compute and build, timed on a fresh copy
# ---------------------------------------------------------------------------------------------

#: targets at corpus scale (23 models x 300 heads, 2 cores)
BUILD_TARGET_S = 25.0
REPORT_TARGET_S = 60.0
FOLDER_TARGET_MB = 50.0
INDEX_TARGET_MB = 5.0


def fresh_copy(db: Path, dest: Path) -> Path:
    """A copy of the built corpus and of its dbt folder (``<name>.dbt/``) in ``dest``, under the
    same file name (dbt names the database after it)."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    shutil.copy2(db, dest / db.name)
    work = db.with_name(db.stem + ".dbt")
    if work.is_dir():
        shutil.copytree(work, dest / work.name)
    return dest / db.name


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def run_timed(cmd: list[str], cwd: Path) -> dict:
    """Run ``cmd`` in a fresh process: wall and CPU time (user + system of the process and its
    children), the CPU other processes used meanwhile (in cores), its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    b0 = _busy()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=cwd)
    wall = time.perf_counter() - t0
    b1 = _busy()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[2:])} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    hz = os.sysconf("SC_CLK_TCK")
    other = max(0.0, ((b1[0] - b0[0]) / hz - cpu) / wall) if wall > 0 else 0.0
    return {"wall_s": wall, "cpu_s": cpu, "other_cores": other, "stdout": proc.stdout}


def time_compute(db: Path, heads: int, a: argparse.Namespace) -> dict:
    """``qkwh compute --force`` on the copy, with the corpus's parameters: every head again."""
    cmd = [sys.executable, "-m", "qkwh.cli", "compute", "-w", str(db), "--force"]
    cmd += ["-j", str(a.workers)] + [x for k, v in FAST.items() for x in ("-p", f"{k}={v}")]
    r = run_timed(cmd, db.parent)
    r["heads"] = heads
    r["heads_per_s"] = heads / r["wall_s"]
    del r["stdout"]
    return r


def _dbt_log_phases(log: Path) -> dict:
    """How the last dbt run in ``log`` parsed (full or partial) and the seconds from its start to
    the end of parsing."""
    import re
    from datetime import datetime

    lines = log.read_text(errors="replace").splitlines()
    starts = [i for i, line in enumerate(lines) if "Running with dbt=" in line]
    lines = lines[starts[-1] :] if starts else lines

    def stamp(line: str) -> datetime | None:
        m = re.match(r"(\d\d:\d\d:\d\d\.\d+)", line)
        return datetime.strptime(m.group(1), "%H:%M:%S.%f") if m else None

    t0 = stamp(lines[0]) if lines else None
    found = next((stamp(x) for x in lines if " Found " in x and stamp(x)), None)
    how = "partial" if any("Partial parsing enabled" in x for x in lines) else "full"
    parse_s = (found - t0).total_seconds() if t0 and found else None
    return {"parse": how, "parse_s": parse_s}


def time_build(db: Path) -> dict:
    """``qkwh build`` on the copy: wall and CPU, how dbt parsed, node seconds per kind (summed
    over dbt's threads) and the slowest nodes (dbt's run_results.json)."""
    cmd = [sys.executable, "-m", "qkwh.cli", "build", "-w", str(db)]
    r = run_timed(cmd, db.parent)
    del r["stdout"]
    work = db.with_name(db.stem + ".dbt")
    results = json.loads((work / "target" / "run_results.json").read_text())
    kinds: dict[str, float] = {}
    counts: dict[str, int] = {}
    for n in results["results"]:
        kind = n["unique_id"].split(".")[0]
        kinds[kind] = kinds.get(kind, 0.0) + n["execution_time"]
        counts[kind] = counts.get(kind, 0) + 1
    slow = sorted(results["results"], key=lambda n: -n["execution_time"])[:10]
    r.update(_dbt_log_phases(work / "logs" / "dbt.log"))
    r["dbt_elapsed_s"] = results["elapsed_time"]
    r["node_s"] = kinds
    r["nodes"] = counts
    r["slowest"] = [[n["unique_id"], n["execution_time"]] for n in slow]
    return r


def fresh_section(compute: dict | None, builds: list[dict], info: dict) -> list[str]:
    """Markdown: the compute and the two builds timed on the fresh copy."""
    lines = ["", "## Compute and build on a fresh copy of the corpus", ""]
    if compute:
        lines.append(
            f"`qkwh compute --force` ({info['heads']:,} heads, every one again, the corpus's "
            f"parameters): {compute['wall_s']:.1f} s wall, {compute['cpu_s']:.1f} s CPU, "
            f"**{compute['heads_per_s']:.1f} heads/s**, other load {compute['other_cores']:.1f} "
            "cores."
        )
        lines.append("")
    if builds:
        lines += [
            "| `qkwh build` | wall s | CPU s | other load, cores | parse | parse s | dbt run s "
            "| node s: models / data tests / unit tests / seeds |",
            "|---|---:|---:|---:|---|---:|---:|---|",
        ]
        for name, b in zip(("first (copied warehouse)", "again"), builds):
            k = b["node_s"]
            parse_s = f"{b['parse_s']:.1f}" if b["parse_s"] is not None else "?"
            lines.append(
                f"| {name} | {b['wall_s']:.1f} | {b['cpu_s']:.1f} | {b['other_cores']:.1f} | "
                f"{b['parse']} | {parse_s} | {b['dbt_elapsed_s']:.1f} | "
                + " / ".join(f"{k.get(x, 0.0):.1f}" for x in ("model", "test", "unit_test", "seed"))
                + " |"
            )
        lines += [
            "",
            "The first build of a copied warehouse parses the dbt project from scratch (dbt's saved "
            "parse is tied to the warehouse path); the second reuses it, as every later build of "
            "one warehouse does. Node seconds are summed over dbt's threads. Slowest nodes of the "
            "first build: "
            + ", ".join(f"{u.split('.', 2)[-1]} {t:.1f} s" for u, t in builds[0]["slowest"])
            + ".",
        ]
    return lines


def fresh_targets(builds: list[dict], best: dict) -> list[str]:
    lines = []
    if builds:
        w = builds[0]["wall_s"]
        lines.append(
            f"- first `qkwh build` of the corpus {w:.1f} s (target <= {BUILD_TARGET_S:g} s): "
            f"{_verdict(w <= BUILD_TARGET_S)}; again {builds[-1]['wall_s']:.1f} s"
        )
    mb = best["bytes"] / 1e6
    lines.append(
        f"- report folder {mb:.1f} MB (target <= {FOLDER_TARGET_MB:g} MB): "
        f"{_verdict(mb <= FOLDER_TARGET_MB)}"
    )
    return lines


def _verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


# ---------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------


def folder_stats(folder: Path) -> dict:
    files = [p for p in folder.rglob("*") if p.is_file()]
    pages = [p for p in files if p.suffix == ".html"]
    index = folder / "index.html"
    biggest = max(pages, key=lambda p: p.stat().st_size)
    by_ext: dict[str, int] = {}
    for p in files:
        ext = "".join(p.suffixes[-2:]) if p.name.endswith(".vl.json") else p.suffix
        by_ext[ext] = by_ext.get(ext, 0) + 1
    model_pages = [p for p in pages if p.parent.name == "models"]
    largest_model = max(model_pages, key=lambda p: p.stat().st_size) if model_pages else None
    return {
        "files": len(files),
        "bytes": sum(p.stat().st_size for p in files),
        "largest_model_page": largest_model.relative_to(folder).as_posix()
        if largest_model
        else None,
        "index_bytes": index.stat().st_size,
        "pages": len(pages),
        "largest_page": biggest.relative_to(folder).as_posix(),
        "largest_page_bytes": biggest.stat().st_size,
        "by_ext": dict(sorted(by_ext.items())),
    }


def time_report(db: Path, out: Path, static: bool) -> dict:
    """One `qkwh report` in a fresh process into a fresh folder: wall and CPU time, the folder."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "qkwh.cli", "report", "-w", str(db), "-o", str(out)] + (
        ["--static"] if static else []
    )
    env = _env()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=out.parent)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"qkwh report failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "summary": proc.stdout.strip().splitlines()[0],
        **folder_stats(out),
    }


def browser_seconds(page: Path) -> float | None:
    """Seconds until headless Chromium has drawn every chart of ``page`` (from file://), or None
    without Chromium and Playwright (tests/reports/test_browser.py needs the same)."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not exe:
        return None
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=exe, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            tab = browser.new_page(viewport={"width": 1400, "height": 1000})
            t0 = time.perf_counter()
            tab.goto(page.as_uri(), wait_until="load")
            tab.wait_for_function(
                "window.qkwhReport && window.qkwhReport.ready === true", timeout=300_000
            )
            secs = time.perf_counter() - t0
            if tab.evaluate("window.qkwhReport.errors.length"):
                raise SystemExit(
                    f"{page}: charts failed in the browser: {tab.evaluate('window.qkwhReport.errors')}"
                )
            return secs
        finally:
            browser.close()


def _mb(b: int) -> str:
    return f"{b / 1e6:,.1f}"


def _busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    try:
        parts = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except OSError:
        return 0.0, 0.0
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0.0)
    return sum(parts) - idle, sum(parts)


def main(argv: list[str] | None = None) -> int:
    from measure import loadavg, machine
    from report import corpus_report

    a = _args(argv)
    a.out = a.out.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    models = registry_models(a.models)
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    db, info = ensure_corpus(models, a)
    _log(f"corpus: {db} ({info['models']} models, {info['heads']} heads)")
    if a.prepare_only:
        return 0
    load0 = loadavg()
    compute = None
    builds: list[dict] = []
    if not (a.no_compute and a.no_build):
        db = fresh_copy(db, a.out / "corpus-copy")
        if not a.no_compute:
            _log(f"timing qkwh compute --force on a copy ({info['heads']} heads) ...")
            compute = time_compute(db, info["heads"], a)
            _log(f"compute: {compute['wall_s']:.1f} s, {compute['heads_per_s']:.1f} heads/s")
        if not a.no_build:
            for i in range(2):
                b = time_build(db)
                _log(
                    f"build {i + 1}: {b['wall_s']:.1f} s wall, {b['cpu_s']:.1f} s CPU, "
                    f"{b['parse']} parse"
                )
                builds.append(b)
    runs = []
    for i in range(max(1, a.repeat)):
        b0 = _busy()
        r = time_report(db, a.out / "corpus-report", static=False)
        b1 = _busy()
        # other load: CPU time of everything on the machine minus the report's own, in cores
        hz = os.sysconf("SC_CLK_TCK")
        r["other_cores"] = max(0.0, ((b1[0] - b0[0]) / hz - r["cpu_s"]) / r["wall_s"])
        _log(
            f"report {i + 1}: {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU, index {_mb(r['index_bytes'])} MB, "
            f"{r['files']} files, {_mb(r['bytes'])} MB"
        )
        runs.append(r)
    best = min(runs, key=lambda r: r["wall_s"])
    folder = a.out / "corpus-report"
    best["browser_index_s"] = browser_seconds(folder / "index.html")
    best["browser_page_s"] = (
        browser_seconds(folder / best["largest_model_page"]) if best["largest_model_page"] else None
    )
    static = None
    if not a.no_static:
        b0 = _busy()
        static = time_report(db, a.out / "corpus-report-static", static=True)
        b1 = _busy()
        hz = os.sysconf("SC_CLK_TCK")
        static["other_cores"] = max(
            0.0, ((b1[0] - b0[0]) / hz - static["cpu_s"]) / static["wall_s"]
        )
        _log(
            f"report --static: {static['wall_s']:.1f} s wall, {static['files']} files, {_mb(static['bytes'])} MB"
        )
    text = corpus_report(
        machine(),
        info,
        best,
        [r["wall_s"] for r in runs],
        static,
        started,
        (load0, loadavg()),
        index_target_mb=INDEX_TARGET_MB,
        wall_target_s=REPORT_TARGET_S,
    )
    text += "\n".join(fresh_targets(builds, best) + fresh_section(compute, builds, info)) + "\n"
    print(text)
    a.md.parent.mkdir(parents=True, exist_ok=True)
    a.md.write_text(text)
    (a.out / "corpus-last.json").write_text(
        json.dumps(
            {"info": info, "compute": compute, "builds": builds, "runs": runs, "static": static},
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
