"""The whole chain on synthetic models with planted, different plasticity decay:
`synth` -> `ingest` -> `compute` (with the empirical estimator) -> `dbt build`, and the marts
rank the models correctly and carry both estimators.

(test_dbt_build.py checks the mart arithmetic on hand-made compute rows; this one checks that the
planted geometry survives every stage.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from qkwh import store
from qkwh.build import build
from qkwh.compute.runner import compute
from qkwh.ingest import ingest
from qkwh.params import RunConfig
from qkwh.synth import write_dataset

# drift_scale scales the planted positional slopes of Q and K: stronger drift orders distant keys
# more deterministically, so plasticity falls faster along the context
DRIFT = {"synth-flat": 0.2, "synth-mid": 0.7, "synth-steep": 1.5}


@pytest.mark.slow  # three models ingested, computed and built
def test_marts_rank_planted_plasticity_decay(tmp_path: Path):
    db = tmp_path / "wh.duckdb"
    for model_id, drift in DRIFT.items():
        root = write_dataset(
            tmp_path / model_id,
            n_layers=2,
            n_q_heads=4,
            n_kv_heads=2,
            heads=[(0, 0), (0, 2), (1, 1), (1, 3)],
            d=32,
            rows_per_file=1500,
            n_examples=16,
            seed=1,
            drift_scale=drift,
        )
        ingest(str(root), warehouse=db, model_id=model_id, family="Synth", label=model_id.upper())
    report = compute(
        db, workers=1, config=RunConfig().with_overrides({"plasticity.empirical": "true"})
    )
    assert report.failures == [] and report.n_written == 12
    result = build(db)
    assert not result.failed

    con = store.connect(db, read_only=True)
    drop = dict(con.execute("SELECT model_id, ap_drop FROM model_summary").fetchall())
    assert sorted(drop, key=drop.get) == ["synth-flat", "synth-mid", "synth-steep"], drop
    assert drop["synth-steep"] - drop["synth-flat"] > 0.2
    # the same order in model_summary, and bias_strength grows with the planted drift too
    rows = con.execute(
        "SELECT model_id, ap_drop, bias_strength FROM model_summary ORDER BY ap_drop"
    ).fetchall()
    assert [r[0] for r in rows] == ["synth-flat", "synth-mid", "synth-steep"]
    assert rows[0][2] < rows[1][2] < rows[2][2]

    # the empirical estimator reaches every head: finite values and a gap beside the Gaussian
    heads = con.execute(
        "SELECT has_empirical, ap_overall, ap_overall_empirical, ap_drop_empirical, gauss_gap, "
        "gauss_gap_drop, gauss_gap_sampled_se, decile_0_empirical, label, family FROM head_metrics"
    ).fetchall()
    assert len(heads) == 12
    for has, ap, ap_emp, drop_emp, gap, gap_drop, gap_se, d0, label, family in heads:
        assert has and family == "Synth" and label.startswith("SYNTH-")
        assert 0 < ap_emp < 1 and -1 < drop_emp < 1 and 0 < d0 < 1
        assert abs(gap - (ap - ap_emp)) < 1e-12 and abs(gap_drop) < 1 and gap_se > 0
    n_gap = con.execute("SELECT count(*) FROM plasticity_buckets_gap").fetchone()[0]
    assert n_gap == con.execute("SELECT count(*) FROM plasticity_buckets").fetchone()[0] > 0
    emp = dict(con.execute("SELECT model_id, ap_drop_empirical FROM model_summary").fetchall())
    assert sorted(emp, key=emp.get) == ["synth-flat", "synth-mid", "synth-steep"], emp
    metrics = {r[0] for r in con.execute("SELECT DISTINCT metric FROM model_metric_ci").fetchall()}
    assert {"gauss_gap", "gauss_gap_drop", "ap_drop_empirical", "ap_drop"} <= metrics
    con.close()
