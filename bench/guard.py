"""The benchmark's guard: a short set of figures, as ratios, checked against accepted ones.

``bench/run.py --check`` measures them and fails (exit 1) when one is more than the tolerance
(15 %) worse than in ``bench/accepted.json``, naming it; ``bench/run.py --accept`` measures them
and writes that file.  Every figure is a ratio of two times measured in the same run, so that a
faster or slower machine, or one shared with other work, moves both sides:

* the compute of the default analyses (every registered analysis not opt-in: pca, rotation,
  plasticity and reach) against merely reading the same files (the read floor), in wall time and
  in the workers' CPU time, and the compute's CPU time against a fixed float64 GEMM on one thread;
  the same two ratios for the three analyses pca, rotation and plasticity alone (the reference of
  the cost rule for the default set, and the guard's main figure before reach was added);
* ``qkwh --help`` and a ``qkwh compute`` with nothing to do against a bare ``python -c pass``,
  in CPU time (user + system of the process: other load on the machine hardly changes it, unlike
  its wall time, which is reported beside it).

Each measurement is repeated with the two sides alternating, and the fastest of each counts;
the read runs twice per repetition (before and after the computes), its wall time being the
noisier one.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from measure import (
    ANALYSES,
    BENCH,
    DEFAULT_ANALYSES,
    SAMPLED,
    ModelSpec,
    ensure_dataset,
    fresh_ingest,
    plan_tasks,
    run_compute,
    run_read_only,
)

ACCEPTED = BENCH / "accepted.json"
TOLERANCE = 0.15
#: tries of each start-up command per repetition (a python start is ~30 ms of CPU: its fastest of
#: two tries moved by 10 %)
STARTS = 5

#: name -> what it is; every one is checked (lower is better)
FIGURES: dict[str, str] = {
    "compute/read, wall": "the default analyses against the read floor, wall time",
    "compute/read, worker CPU": "the same in the workers' CPU time (steadier on a loaded machine)",
    "compute/GEMM, worker CPU": "the compute's worker CPU against one fixed float64 GEMM (CPU time)",
    "three/read, wall": "the three analyses pca, rotation, plasticity against the read floor, wall",
    "three/read, worker CPU": "the same in the workers' CPU time",
    "--help/python, CPU": "`qkwh --help` against `python -c pass`, CPU time of the process",
    "no-op compute/python, CPU": "`qkwh compute` with every head up to date against `python -c pass`, CPU time",
}


def _gemm_seconds(repeat: int = 20) -> float:
    """Fastest of ``repeat`` float64 products X^T Y of two 8,000 x 128 matrices, in CPU time like
    the workers' figures (one thread when the caller pinned BLAS, as bench/run.py does; wall
    time of so short a product triples on a loaded machine)."""
    import numpy as np

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8000, 128)), rng.standard_normal((8000, 128))
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        x.T @ y
        best = min(best, time.process_time() - t0)
    return best


def _process(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s = user + system) of one run of ``cmd``, which must succeed."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {proc.returncode}): {err.strip()[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime


def measure(heads: int, rows: int, workers: int, repeat: int, out: Path, log) -> dict:
    """The guard's figures on a ``heads`` x ``rows`` benchmark model (generated and ingested under
    ``out`` if needed), each side measured ``repeat`` times, alternating."""
    import qkwh

    # the commands run the qkwh this process imports (PYTHONPATH may point at another checkout)
    repo = Path(qkwh.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    qkwh = [sys.executable, "-c", "from qkwh.cli import main; main()"]
    spec = ModelSpec(heads=heads, rows=rows)
    data, _ = ensure_dataset(spec, out, log)
    db, _ = fresh_ingest(spec, data, out)
    tasks = plan_tasks(db, spec.model_id, SAMPLED)
    noop = db.with_name("noop.duckdb")
    shutil.copy(db, noop)
    log(f"computing {noop.name} once (the no-op compute's warehouse) ...")
    _process([*qkwh, "compute", "--warehouse", str(noop)], env)
    keys = ("read", "compute", "three", "gemm", "python", "help", "noop")
    runs: dict[str, list] = {k: [] for k in keys}
    for i in range(repeat):
        log(f"[guard {i + 1}/{repeat}] read, compute, the three, GEMM, python, --help, no-op ...")
        runs["read"].append(run_read_only(tasks, workers))
        for key, analyses in (("compute", DEFAULT_ANALYSES), ("three", ANALYSES)):
            runs[key].append(
                run_compute(
                    "guard", db, spec.model_id, len(tasks), analyses, SAMPLED, workers, False
                )
            )
        # the read again: the floor moves more from one run to the next than the compute (on the
        # same cached files), and its fastest is what the ratios divide by
        runs["read"].append(run_read_only(tasks, workers))
        runs["gemm"].append(_gemm_seconds())
        for _ in range(STARTS):  # short and noisy: more tries, alternating
            runs["python"].append(_process([sys.executable, "-c", "pass"], env))
            runs["help"].append(_process([*qkwh, "--help"], env))
            runs["noop"].append(_process([*qkwh, "compute", "--warehouse", str(noop)], env))
        log(
            f"    read {runs['read'][-1].wall_s:.2f} s, compute {runs['compute'][-1].wall_s:.2f} s "
            f"(the three {runs['three'][-1].wall_s:.2f} s), "
            f"--help {runs['help'][-1][0]:.2f} s, no-op {runs['noop'][-1][0]:.2f} s"
        )
    shutil.rmtree(db.parent, ignore_errors=True)

    def best(key: str, attr: str) -> float:
        return min(getattr(p, attr) for p in runs[key])

    def best_proc(key: str, i: int) -> float:
        return min(r[i] for r in runs[key])

    read_wall, read_cpu = best("read", "wall_s"), best("read", "cpu_s")
    comp_wall, comp_cpu = best("compute", "wall_s"), best("compute", "cpu_s")
    three_wall, three_cpu = best("three", "wall_s"), best("three", "cpu_s")
    gemm = min(runs["gemm"])
    figures = {
        "compute/read, wall": comp_wall / read_wall,
        "compute/read, worker CPU": comp_cpu / read_cpu,
        "compute/GEMM, worker CPU": comp_cpu / gemm,
        "three/read, wall": three_wall / read_wall,
        "three/read, worker CPU": three_cpu / read_cpu,
        "--help/python, CPU": best_proc("help", 1) / best_proc("python", 1),
        "no-op compute/python, CPU": best_proc("noop", 1) / best_proc("python", 1),
    }
    seconds = {
        "read wall": read_wall,
        "read worker CPU": read_cpu,
        "compute wall": comp_wall,
        "compute worker CPU": comp_cpu,
        "three wall": three_wall,
        "three worker CPU": three_cpu,
        "GEMM": gemm,
        "python -c pass wall": best_proc("python", 0),
        "python -c pass CPU": best_proc("python", 1),
        "--help wall": best_proc("help", 0),
        "--help CPU": best_proc("help", 1),
        "no-op compute wall": best_proc("noop", 0),
        "no-op compute CPU": best_proc("noop", 1),
    }
    phases = runs["read"] + runs["compute"] + runs["three"]
    other = max((p.other_cores for p in phases), default=float("nan"))
    return {
        "figures": figures,
        "seconds": seconds,
        "other_load_cores": other,
        "settings": {
            "heads": heads,
            "rows": rows,
            "workers": workers,
            "repeat": repeat,
            "analyses": list(DEFAULT_ANALYSES),
        },
        "git": _git(repo),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "loadavg": _loadavg(),
    }


def _git(repo: Path) -> str:
    try:
        return subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def _accepted_figure(accepted: dict, name: str, analyses: list[str]) -> float | None:
    """The accepted value of figure ``name`` comparable with this run's (None: none is).

    Accepted figures written before the guard timed the default set have no ``analyses`` in their
    settings: their compute figures are those of the three analyses, so they are compared with
    this run's ``three/...`` figures, and this run's default-set figures have no accepted value.
    The compute figures of an accepted run of another default set are not compared either."""
    figures = accepted.get("figures", {})
    acc = accepted.get("settings", {}).get("analyses")
    if name in _COMPUTE_FIGURES and acc != analyses:
        return None
    if acc is None and name.startswith("three/"):
        return figures.get("compute/" + name.removeprefix("three/"))
    return figures.get(name)


#: the figures that depend on the default set of analyses
_COMPUTE_FIGURES = ("compute/read, wall", "compute/read, worker CPU", "compute/GEMM, worker CPU")


def compare(new: dict, accepted: dict, tolerance: float = TOLERANCE) -> list[str]:
    """One line per figure more than ``tolerance`` worse than the accepted one (empty: passed)."""
    if (
        accepted.get("settings", {}).get("heads") != new["settings"]["heads"]
        or accepted.get("settings", {}).get("rows") != new["settings"]["rows"]
    ):
        return [
            f"the accepted figures are for {accepted.get('settings')}, this run for "
            f"{new['settings']}: run with the same --guard-heads/--rows, or --accept"
        ]
    worse = []
    analyses = new["settings"].get("analyses")
    for name in FIGURES:
        old, now = _accepted_figure(accepted, name, analyses), new["figures"][name]
        if old is not None and now > old * (1 + tolerance):
            worse.append(
                f"{name}: {now:.2f}, accepted {old:.2f} (+{100 * (now / old - 1):.0f} %, "
                f"more than {100 * tolerance:.0f} % worse)"
            )
    return worse


def table(new: dict, accepted: dict | None, tolerance: float = TOLERANCE) -> str:
    """The figures as a Markdown table, beside the accepted ones."""
    lines = [
        "| figure | this run | accepted | change | limit |",
        "|---|---:|---:|---:|---:|",
    ]
    analyses = new["settings"].get("analyses")
    for name in FIGURES:
        now = new["figures"][name]
        old = _accepted_figure(accepted, name, analyses) if accepted else None
        change = f"{100 * (now / old - 1):+.0f} %" if old else ""
        limit = f"{old * (1 + tolerance):.2f}" if old else ""
        lines.append(
            f"| {name} | {now:.2f} | {'' if old is None else f'{old:.2f}'} | {change} | {limit} |"
        )
    lines += ["", "| time (fastest of the run) | seconds |", "|---|---:|"]
    lines += [f"| {k} | {v:.3f} |" for k, v in new["seconds"].items()]
    lines.append(
        f"\n{new['settings']}; git {new['git']}; {new['date']}; load average {new['loadavg']}; "
        f"other load during the model runs up to {new['other_load_cores']:.1f} cores"
    )
    return "\n".join(lines)


def load_accepted(path: Path = ACCEPTED) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def write_accepted(new: dict, path: Path = ACCEPTED) -> None:
    path.write_text(json.dumps(new, indent=1, sort_keys=False) + "\n")
