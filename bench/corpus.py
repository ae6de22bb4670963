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
2. times ``qkwh report`` (the command, in a fresh process) on that warehouse into a fresh folder,
   ``--repeat`` times, the fastest counting; then once with ``--static`` (PNG and SVG too);
3. reports wall time, CPU time, the size of index.html, of the largest page and of the whole
   folder, and the number of files, with the machine's load.

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
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
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
        machine(), info, best, [r["wall_s"] for r in runs], static, started, (load0, loadavg())
    )
    print(text)
    a.md.parent.mkdir(parents=True, exist_ok=True)
    a.md.write_text(text)
    (a.out / "corpus-last.json").write_text(
        json.dumps({"info": info, "runs": runs, "static": static}, indent=1)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
