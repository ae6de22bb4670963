"""The RoPE band figures (qkwh/reports/rope.py): drawn from the rope marts when the warehouse
has rope results (cross-model figures on the index, per-model ones on each model's page, the
forest with the rope_* intervals), and left out without a note when it has none."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import duckdb
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dbt"))  # the dbt tests' data

import interval_data
import rope_data

from qkwh import store
from qkwh.build import build
from qkwh.reports.render import render

# its own dbt build of planted rope rows (about half a minute): make test, not make test-fast; the
# demo's slow test draws the rope section of a real report too
pytestmark = pytest.mark.slow

ROPE_MARTS = (
    "rope_band_energy",
    "rope_energy_spectrum",
    "rope_band_plasticity_model",
    "rope_band_logits_model",
)


@pytest.fixture(scope="module")
def rope_warehouse(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("rope-report")
    wh = root / "qkwh.duckdb"
    con = store.connect(wh)
    try:
        rope_data.fill(con)
    finally:
        con.close()
    res = build(
        wh, target_dir=root / "target", log_sink=lambda _m: None, dbt_vars=interval_data.CI_VARS
    )
    assert res.success
    return wh


def test_rope_figures_are_drawn_when_rope_results_exist(rope_warehouse, tmp_path):
    r = render(rope_warehouse, out=tmp_path / "rope", strict=True, figures=["RoPE bands"])
    models = [m.model_id for m in rope_data.MODELS]
    ids = {f.id for f in r.figures}
    per_model = ("rope-spectrum", "rope-band-profiles", "rope-band-logits")
    assert ids == {"rope-band-energy", "rope-drop-forest"} | {
        f"{k}-{m}" for k in per_model for m in models
    }
    assert r.skipped == ()
    figs = {f.id: f for f in r.figures}
    for f in r.figures:
        want = r.index if f.model_id is None else r.out / "models" / f"{f.model_id}.html"
        assert f.page == want and f'data-figure="{f.id}"' in want.read_text()
        assert f.section == "RoPE bands"
    forest = figs["rope-drop-forest"]
    spec = json.loads(forest.spec)
    [rows] = spec["datasets"].values()
    # one point per model and band of variant only, each with its model_metric_ci interval
    con = duckdb.connect(str(rope_warehouse), read_only=True)
    try:
        ci = {
            (m, metric): (lo, hi)
            for m, metric, lo, hi in con.execute(
                "SELECT model_id, metric, ci_low, ci_high FROM model_metric_ci "
                "WHERE metric LIKE 'rope_ap_drop_%_only'"
            ).fetchall()
        }
    finally:
        con.close()
    assert len(rows) == len(ci) == 2 * 3 + 1  # high, mid, low; the NoPE model's unrotated too
    for row in rows:
        assert (row["ci_low"], row["ci_high"]) == ci[
            (row["model_id"], f"rope_ap_drop_{row['band']}_only")
        ]
    assert '"errorbar"' in forest.spec
    assert (
        "layer-cluster bootstrap" in forest.caption
        and "No interval (hollow mark)" in forest.caption
    )
    spectrum = json.loads(figs[f"rope-spectrum-{rope_data.NOPE_MODEL}"].spec)
    assert any(
        enc.get("x", {}).get("scale", {}).get("type") == "log"
        for layer in spectrum["layer"]
        for enc in [layer.get("encoding", {})]
    )
    assert "unrotated plane" in figs[f"rope-spectrum-{rope_data.NOPE_MODEL}"].caption


def test_without_rope_results_no_rope_figure_and_no_note(rope_warehouse, tmp_path):
    """Rope marts without rows (the opt-in analysis not computed): the report has no RoPE
    figure, no 'left out' note and no RoPE section."""
    wh = tmp_path / "plain.duckdb"
    shutil.copy(rope_warehouse, wh)
    con = duckdb.connect(str(wh))
    try:
        for mart in ROPE_MARTS:
            con.execute(f"DELETE FROM {mart}")
    finally:
        con.close()
    r = render(wh, out=tmp_path / "plain", strict=True, figures=["RoPE bands", "ap-forest"])
    assert [f.id for f in r.figures] == ["ap-forest"]
    assert r.skipped == ()
    html = r.index.read_text()
    assert "RoPE" not in html and "Left out" not in html
