"""The compute worker keeps freed memory (glibc malloc settings): no page faults head after head."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import resource, sys
    import numpy as np
    if sys.argv[1] == "tuned":
        from qkwh.compute.memory import keep_freed_memory
        assert keep_freed_memory() is True
        assert keep_freed_memory() is True  # idempotent
    def work():  # temporaries of a few MB, like one head's analyses
        for mb in (3, 9, 20, 5, 12):
            a = np.ones(mb * 131072); b = np.ones(mb * 65536); del a, b
    work()
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        work()
    print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 20)
""")


def _faults_per_round(mode: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="glibc malloc tuning is Linux-only"
)
def test_tuned_process_reuses_freed_pages():
    tuned = _faults_per_round("tuned")
    default = _faults_per_round("default")
    assert tuned < 1.0, f"{tuned} page faults per round of temporaries with freed memory kept"
    assert tuned <= default


def test_worker_path_tunes_the_process(monkeypatch):
    """run_group calls keep_freed_memory before any head (cheap: once per process)."""
    from qkwh.compute import work

    calls = []
    monkeypatch.setattr(work, "keep_freed_memory", lambda: calls.append(1) or True)
    monkeypatch.setattr(work, "_run_group", lambda task: [])
    assert work.run_group(object()) == []
    assert calls == [1]
