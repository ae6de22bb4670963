"""The CLI end to end on synthetic data with planted geometry: `qkwh synth` -> `qkwh ingest`
-> `qkwh compute`, and the planted drift slopes and bias come back out of the warehouse."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from qkwh import store
from qkwh.cli import app

runner = CliRunner()


def test_planted_parameters_come_back_through_the_cli(tmp_path: Path):
    data, db = tmp_path / "synth-a", tmp_path / "wh.duckdb"
    r = runner.invoke(
        app,
        [
            "synth",
            str(data),
            "--layers",
            "2",
            "--q-heads",
            "4",
            "--kv-heads",
            "2",
            "--rows",
            "4000",
            "--seed",
            "3",
            "--set",
            "alpha_k=2e-3",
            "--set",
            "mu_q_a=5",
        ],
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["ingest", str(data), "-w", str(db)])
    assert r.exit_code == 2 and "unknown model" in r.stderr  # synthetic: not in the registry
    r = runner.invoke(app, ["ingest", str(data), "--model-id", "synth-a", "-w", str(db)])
    assert r.exit_code == 0, r.output + r.stderr
    r = runner.invoke(app, ["compute", "-w", str(db), "-j", "1", "-a", "rotation,pca"])
    assert r.exit_code == 0, r.output + r.stderr

    truth = {
        (h["layer"], h["q_head"]): h
        for h in json.loads((data / "_synth_truth.json").read_text())["heads"]
    }
    con = store.connect(db, read_only=True)
    rows = con.execute(
        "SELECT layer, q_head, alpha_k, alpha_q, mu_q_a, bias_strength, degenerate "
        "FROM rotation_heads ORDER BY 1, 2"
    ).fetchall()
    assert len(rows) == 8
    for layer, q_head, alpha_k, alpha_q, mu_q_a, bias, degenerate in rows:
        t = truth[(layer, q_head)]
        assert not degenerate
        # 4,000 rows per kind: slopes within ~5 %; the pooled axis a also picks up the Q-K
        # centroid offset (spec §8), which moves mu_q_a by a few per cent
        np.testing.assert_allclose(alpha_k, t["alpha_k"], rtol=0.05)
        np.testing.assert_allclose(alpha_q, t["alpha_q"], rtol=0.10)
        np.testing.assert_allclose(mu_q_a, t["mu_q_a"], rtol=0.05)
        np.testing.assert_allclose(bias, t["bias_strength"], rtol=0.08)
    con.close()


def test_synth_rejects_bad_settings(tmp_path: Path):
    r = runner.invoke(app, ["synth", str(tmp_path / "x"), "--set", "alpha_k"])
    assert r.exit_code == 2 and "expected key=value" in r.stderr
    r = runner.invoke(app, ["synth", str(tmp_path / "y"), "--set", "no_such_knob=1"])
    assert r.exit_code == 2 and "no_such_knob" in r.stderr
