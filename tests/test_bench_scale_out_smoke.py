"""bench/scale_out.py (Ray against the pool) runs end to end on a tiny model and writes its report.

Timings are not asserted; the harness's own check is asserted: both executors, and Ray reading
over HTTP, wrote identical tables (exit code 0).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench  # runs a benchmark script end to end

pytest.importorskip(
    "ray", reason="Ray is not installed (pip install 'qkwh[ray]'; make test installs it)"
)

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(
    any(ch.isspace() for ch in sys.executable),
    reason=f"this Python's path holds a space ({sys.executable!r}): Ray cannot start workers from "
    "it, and the benchmark refuses to start a local cluster",
)
def test_scale_out_bench_quick_run_writes_its_report(tmp_path: Path):
    md = tmp_path / "ray.md"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "scale_out.py"),
            "--quick",
            "--out",
            str(tmp_path / "out"),
            "--md",
            str(md),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = md.read_text()
    for row in (
        "| pool |",
        "| ray |",
        "| ray, files read over HTTP (--remote) |",
        "## Cost per head",
        "Tables identical (pool vs Ray): **True**; Ray reading over HTTP vs pool: **True**",
    ):
        assert row in text, row
