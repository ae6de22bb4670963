"""The benchmark harness runs end to end on a tiny model and writes its report.

Timings are not asserted: speed and memory are measured by ``bench/run.py``, not by tests.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench  # runs a benchmark script end to end

REPO = Path(__file__).resolve().parents[1]


def test_bench_quick_harness_produces_the_report(tmp_path: Path):
    md = tmp_path / "bench.md"
    cmd = [
        sys.executable,
        str(REPO / "bench" / "run.py"),
        "--quick",
        "--heads",
        "5",
        "--rows",
        "300",
        "--small-heads",
        "1",
        "--scaling-heads",
        "1",
        "--scaling-rows",
        "200,300",
        "--workers",
        "2",
        "--runs",
        "all",
        "--out",
        str(tmp_path / "out"),
        "--md",
        str(md),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = md.read_text()
    assert text == proc.stdout.strip() + "\n" or text.strip() == proc.stdout.strip()
    assert "**Machine:**" in text
    # 5 heads = 2 GQA groups: the read-only and compute runs go through the 2-worker process pool
    for row in (
        "| read only |",
        "| all three (sampled) |",
        "plasticity (exhaustive) ms/head",
        "| 300 |",
        "growth exponent",
        "Peak memory against model size",
    ):
        assert row in text, row
    assert "## Targets" in text and "x read-only" in text
    assert list((tmp_path / "out").glob("results-*.json"))
