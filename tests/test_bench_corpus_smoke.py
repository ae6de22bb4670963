"""bench/corpus.py runs end to end on a small corpus and writes its report.

Timings and sizes are not asserted: the report at corpus scale is measured by ``bench/corpus.py``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench  # runs a benchmark script end to end (not by make test-fast)

REPO = Path(__file__).resolve().parents[1]


def test_bench_corpus_quick_produces_the_report(tmp_path: Path):
    md = tmp_path / "corpus.md"
    cmd = [
        sys.executable,
        str(REPO / "bench" / "corpus.py"),
        "--quick",
        "--models",
        "2",
        "--heads",
        "6",
        "--no-static",
        "--out",
        str(tmp_path / "out"),
        "--md",
        str(md),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = md.read_text()
    assert text.strip() == proc.stdout.strip()
    for part in (
        "**Machine:**",
        "**Corpus:** 2 synthetic models",
        "12 query heads",
        "| `qkwh report` |",
        "index.html",
        "## Targets",
        "target <= 5 MB",
        "target <= 60 s",
        "report folder",
        "first `qkwh build` of the corpus",
        "| first (copied warehouse) |",
        "| again |",
        "| partial |",  # the second build reuses the parse
        "heads/s",
    ):
        assert part in text, part
    report = tmp_path / "out" / "corpus-report"
    assert (report / "index.html").is_file() and (report / "vega.js").is_file()
    assert len(list((report / "models").glob("*.html"))) == 2
    assert not list(report.rglob("*.png"))
