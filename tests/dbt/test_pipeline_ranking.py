"""The whole chain on synthetic models with planted, different plasticity decay:
`synth` -> `ingest` -> `compute` -> `dbt build`, and the marts rank the models correctly.

(test_dbt_build.py checks the mart arithmetic on hand-made compute rows; this one checks that the
planted geometry survives every stage.)"""

from __future__ import annotations

from pathlib import Path

from qkwh import store
from qkwh.build import build
from qkwh.compute.runner import compute
from qkwh.ingest import ingest
from qkwh.synth import write_dataset

# drift_scale scales the planted positional slopes of Q and K: stronger drift orders distant keys
# more deterministically, so plasticity falls faster along the context
DRIFT = {"synth-flat": 0.2, "synth-mid": 0.7, "synth-steep": 1.5}


def test_marts_rank_planted_plasticity_decay(tmp_path: Path):
    db = tmp_path / "wh.duckdb"
    for model_id, drift in DRIFT.items():
        root = write_dataset(tmp_path / model_id, n_layers=2, n_q_heads=4, n_kv_heads=2,
                             heads=[(0, 0), (0, 2), (1, 1), (1, 3)], d=32, rows_per_file=1500,
                             n_examples=16, seed=1, drift_scale=drift)
        ingest(str(root), warehouse=db, model_id=model_id)
    report = compute(db, workers=1)
    assert report.failures == [] and report.n_written == 12
    result = build(db)
    assert not result.failed

    con = store.connect(db, read_only=True)
    drop = dict(con.execute("SELECT model_id, ap_drop FROM model_summary").fetchall())
    assert sorted(drop, key=drop.get) == ["synth-flat", "synth-mid", "synth-steep"], drop
    assert drop["synth-steep"] - drop["synth-flat"] > 0.2
    # the same order in model_summary, and bias_strength grows with the planted drift too
    rows = con.execute("SELECT model_id, ap_drop, bias_strength FROM model_summary ORDER BY ap_drop").fetchall()
    assert [r[0] for r in rows] == ["synth-flat", "synth-mid", "synth-steep"]
    assert rows[0][2] < rows[1][2] < rows[2][2]
    con.close()
