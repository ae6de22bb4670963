"""bench/writer.py runs end to end on tiny heads and writes its report.

Timings are not asserted: the writer's speed is measured by ``bench/writer.py``, not by tests.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench  # runs a benchmark script end to end

REPO = Path(__file__).resolve().parents[1]


def test_bench_writer_quick_produces_the_report(tmp_path: Path):
    md = tmp_path / "writer.md"
    cmd = [
        sys.executable,
        str(REPO / "bench" / "writer.py"),
        "--quick",
        "--out",
        str(tmp_path / "out"),
        "--md",
        str(md),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = md.read_text()
    assert text.strip() == proc.stdout.strip()
    for part in (
        "**Machine:**",
        "## Ceiling",
        "| 4 | 40 |",
        "| 16 | 40 |",
        "Receiving",
        "## At the benchmark's pace",
        "ms/head** amortised",
        "## Growth: 80 heads",
    ):
        assert part in text, part
    assert list((tmp_path / "out" / "writer").glob("base.duckdb"))
