"""`qkwh report` on the fixture warehouse: every expected figure file, a self-contained index.html,
figures without data left out with a reason, and the figures the fixture cannot feed (training
dynamics, published comparison, benchmarks) drawn from hand-filled mart rows."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import duckdb
import pytest

from qkwh.errors import NotFoundError, QkwhError
from qkwh.reports.render import CATALOGUE, render

MODEL = "smollm2-135m"

# Every figure the fixture (one model, 12 heads, no checkpoints, no published values, no
# benchmark scores) has data for.
EXPECTED = {
    "pca-pc-roles", "pca-rq-rk-scatter", "pca-depth-rq0", "pca-depth-rk0", "pca-explained-variance",
    f"pca-collage-{MODEL}", "pca-taxonomy",
    f"rot-ab-collage-{MODEL}", "rot-abs-r", "rot-variance", "rot-bias-distribution", "rot-slope-ratio",
    "rot-depth-abs-rka", "rot-depth-bias", "rot-bias-vs-separation", f"rot-complement-collage-{MODEL}",
    f"ap-heatmap-{MODEL}", f"ap-head-profiles-{MODEL}", "ap-component-weights", "ap-decile-profiles",
}
LEFT_OUT = {  # id -> a word the reason must contain
    "train-bias-decomposition": "checkpoint", "train-rotation": "checkpoint",
    "train-plasticity": "checkpoint", "train-pca": "checkpoint", "train-taxonomy": "checkpoint",
    "pub-comparison": "published", "ap-drop-vs-benchmark": "benchmark",
}


class _Refs(HTMLParser):
    """Collects what an HTML page would load: script src, link href, img/iframe/source src."""

    def __init__(self) -> None:
        super().__init__()
        self.loads: list[str] = []
        self.links: list[str] = []
        self.inline_scripts = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script":
            if a.get("src"):
                self.loads.append(a["src"])
            else:
                self.inline_scripts += 1
        elif tag == "link":
            self.loads.append(a.get("href") or "")
        elif tag in ("img", "iframe", "source", "embed", "object", "audio", "video"):
            self.loads.append(a.get("src") or a.get("data") or "")
        elif tag == "a" and a.get("href"):
            self.links.append(a["href"])


def test_every_expected_figure_file_exists(fixture_report):
    r = fixture_report
    ids = {f.id for f in r.figures}
    assert EXPECTED <= ids, sorted(EXPECTED - ids)
    assert r.failed == ()
    for f in r.figures:
        assert f.png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f.png.stat().st_size > 5_000, f.id
        root = ET.parse(f.svg).getroot()
        assert root.tag.endswith("svg"), f.id
        assert len(list(root.iter())) > 30, f"{f.id}: SVG looks empty"
        spec = json.loads(f.spec.read_text())
        assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/")
        assert f.png.parent == r.out / "figures"
    # nothing from an earlier render lingers; every file belongs to a listed figure
    names = {p.name for p in (r.out / "figures").iterdir()}
    assert names == {p for f in r.figures for p in (f.png.name, f.svg.name, f.spec.name)}


FAMILY_LEGEND = ("pca-pc-roles", "pca-rq-rk-scatter", "pca-explained-variance", "rot-slope-ratio",
                 "rot-bias-vs-separation", "ap-component-weights", "ap-decile-profiles")


def test_family_legends_filter_and_axes_have_titles(fixture_report):
    specs = {f.id: json.loads(f.spec.read_text()) for f in fixture_report.figures}
    for fid in FAMILY_LEGEND:
        text = json.dumps(specs[fid])
        assert '"bind": "legend"' in text and '"family"' in text, fid
    for fid, spec in specs.items():  # every positional channel carries a title
        for enc in _encodings(spec):
            for ch in ("x", "y"):
                if isinstance(enc.get(ch), dict) and "field" in enc[ch]:
                    assert "title" in enc[ch], (fid, ch, enc[ch])  # set explicitly (null = in subtitle)


def _encodings(node):
    if isinstance(node, dict):
        if isinstance(node.get("encoding"), dict):
            yield node["encoding"]
        for v in node.values():
            yield from _encodings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _encodings(v)


def test_figures_without_data_are_left_out_with_a_reason(fixture_report):
    skipped = {s.id: s for s in fixture_report.skipped}
    for fid, word in LEFT_OUT.items():
        assert fid in skipped, fid
        assert word in skipped[fid].reason.lower(), (fid, skipped[fid].reason)
    html = fixture_report.index.read_text()
    assert "Left out" in html
    for fid in LEFT_OUT:
        assert f'id="fig-{fid}"' not in html
    index = json.loads(fixture_report.figure_index.read_text())
    assert {s["id"] for s in index["skipped"]} == set(skipped)
    assert [f["id"] for f in index["figures"]] == [f.id for f in fixture_report.figures]


def test_index_html_is_self_contained(fixture_report):
    html = fixture_report.index.read_text()
    refs = _Refs()
    refs.feed(html)
    assert refs.loads == [], f"index.html loads external resources: {refs.loads}"
    assert refs.inline_scripts >= 2  # the Vega bundle and the embedding script
    assert "@import" not in html and "url(http" not in html
    for href in refs.links:  # links go to our own files or anchors, never to the network
        assert not href.startswith(("http:", "https:", "//")), href
        if not href.startswith("#"):
            assert (fixture_report.out / href).is_file(), href
    assert "vegaEmbed" in html and "vegaLite" in html
    for f in fixture_report.figures:
        assert f'id="vis-{f.id}"' in html and f'data-figure="{f.id}"' in html


def test_the_catalogue_covers_every_figure_family():
    sections = {f.section for f in CATALOGUE}
    assert sections == {"PCA", "Rotation", "Plasticity", "Training dynamics", "Published comparison"}
    keys = [f.key for f in CATALOGUE]
    assert len(keys) == len(set(keys))
    for f in CATALOGUE:
        assert f.sources and f.title and f.caption


def test_unknown_model_figure_and_unbuilt_warehouse(report_warehouse, tmp_path):
    with pytest.raises(NotFoundError, match="no-such-model"):
        render(report_warehouse, out=tmp_path / "r", models=["no-such-model"])
    with pytest.raises(QkwhError, match="no figure 'no-such-figure'"):
        render(report_warehouse, out=tmp_path / "r", figures=["no-such-figure"])
    bare = tmp_path / "bare.duckdb"
    duckdb.connect(str(bare)).close()
    with pytest.raises(QkwhError, match="qkwh build"):
        render(bare, out=tmp_path / "r2")


# ------------------------------------------------------------------------------------------
# figures the fixture cannot feed, from hand-filled mart rows
# ------------------------------------------------------------------------------------------

CKPTS = [("ckpt-a", "pretrain", 1, 40000), ("ckpt-b", "pretrain", 2, 1200000), ("ckpt-c", "lc_4k_32k", 3, 4000)]


@pytest.fixture(scope="module")
def filled_warehouse(report_warehouse, tmp_path_factory) -> Path:
    """A copy of the fixture warehouse whose marts also describe three checkpoints, published
    values and benchmark scores (values are made up; only the drawing is under test)."""
    db = tmp_path_factory.mktemp("filled") / "wh.duckdb"
    shutil.copy(report_warehouse, db)
    con = duckdb.connect(str(db))
    try:
        for i, (mid, phase, rank, step) in enumerate(CKPTS):
            f = 1.0 + 0.2 * i
            con.execute(
                "INSERT INTO model_summary BY NAME SELECT * REPLACE (? AS model_id, 'SmolLM3' AS family, "
                "? AS checkpoint_phase, ? AS trajectory_rank, ? AS checkpoint_step) "
                "FROM model_summary WHERE model_id = ?", [mid, phase, rank, step, MODEL])
            con.execute(
                """INSERT INTO training_trajectory BY NAME SELECT
                   'SmolLM3' AS family, ? AS model_id, ? AS checkpoint_phase, ? AS trajectory_rank,
                   ? AS checkpoint_step, ? * bias_strength AS bias_strength, mu_q_a, alpha_k,
                   abs_r_k_a, separation_strength, plane_var_fraction,
                   abs_r_k_a - 0.05 AS abs_r_k_a_q25, abs_r_k_a AS abs_r_k_a_q50, abs_r_k_a + 0.03 AS abs_r_k_a_q75,
                   0.8 * separation_strength AS separation_strength_q25, separation_strength AS separation_strength_q50,
                   1.2 * separation_strength AS separation_strength_q75,
                   0.8 * ? * bias_strength AS bias_strength_q25, ? * bias_strength AS bias_strength_q50,
                   1.2 * ? * bias_strength AS bias_strength_q75,
                   0.9 * plane_var_fraction AS plane_var_fraction_q25, plane_var_fraction AS plane_var_fraction_q50,
                   1.1 * plane_var_fraction AS plane_var_fraction_q75,
                   ap_overall, ap_first_20pct, ? * ap_last_20pct AS ap_last_20pct, ap_drop,
                   r_q_0 AS r_q0_mean, 0.05 AS r_q0_sd, r_k_0 AS r_k0_mean, 0.1 AS r_k0_sd,
                   ev_0 AS ev0_mean, 0.02 AS ev0_sd,
                   frac_position_dominated, frac_q_positional, frac_k_positional, frac_content_focused, frac_mixed
                   FROM model_summary WHERE model_id = ?""",
                [mid, phase, rank, step, f, f, f, f, 1 / f, MODEL])
            con.execute(
                """INSERT INTO bias_decomposition BY NAME SELECT ? AS model_id, 'SmolLM3' AS family,
                   true AS is_checkpoint, ? AS checkpoint_phase, ? AS checkpoint_step, ? AS trajectory_rank,
                   ? * mu_q_a AS mu_q_a, alpha_k, ? * bias_strength AS bias_strength, 0.1 AS rel_change_bias_strength
                   FROM model_summary WHERE model_id = ?""", [mid, phase, step, rank, f, f, MODEL])
            con.execute(
                """INSERT INTO published_comparison BY NAME SELECT 'model' AS level, ? AS model_id,
                   metric, 'Table 5' AS source_table, true AS is_preferred, value * ? AS published_value,
                   value AS our_value, 0.01 AS tolerance, abs(value * ? - value) <= 0.01 AS within_tolerance
                   FROM (VALUES ('ap_overall', 0.55), ('ap_drop', 0.2), ('abs_r_k_a', 0.9),
                                ('bias_strength', 0.009)) AS t(metric, value)""", [mid, f, f])
            con.execute(
                """INSERT INTO benchmark_joins BY NAME SELECT
                   'longbench_pro' AS benchmark, 'non-thinking' AS mode, 'overall' AS length_scope,
                   'ap_drop' AS metric, ? AS model_id, 'SmolLM3' AS family, ? AS score, ? AS metric_value""",
                [mid, 30.0 + 5 * i, 0.2 - 0.03 * i])
        con.execute(
            """INSERT INTO benchmark_correlations BY NAME SELECT
               'longbench_pro' AS benchmark, 'non-thinking' AS mode, 'overall' AS length_scope,
               'ap_drop' AS metric, 3 AS n, -1.0 AS pearson_r, -1.0 AS boot_ci_low, -0.5 AS boot_ci_high""")
    finally:
        con.close()
    return db


def test_training_published_and_benchmark_figures_draw_when_marts_have_rows(filled_warehouse, tmp_path):
    r = render(filled_warehouse, out=tmp_path / "filled", strict=True,
               models=[MODEL] + [c[0] for c in CKPTS],
               figures=["Training dynamics", "published comparison", "ap-drop-vs-benchmark", "ap-heatmap"])
    ids = {f.id for f in r.figures}
    assert ids == set(LEFT_OUT) | {f"ap-heatmap-{MODEL}"}, ids
    for fid in LEFT_OUT:
        assert fid in ids, (fid, [s for s in r.skipped if s.id == fid])
    assert r.failed == ()
    # checkpoints come in training order, after the fixture model (family order)
    assert list(r.models) == [MODEL] + [c[0] for c in CKPTS]
    # the fake checkpoints have no vectors: their per-model figures are left out, not broken
    assert any(s.id == "ap-heatmap-ckpt-a" for s in r.skipped)


def test_cli_report_exits_non_zero_when_a_figure_fails_to_draw(report_warehouse, tmp_path, monkeypatch):
    """A figure that raises is left out with its error, the rest is written, and the exit code says so."""
    import dataclasses

    from typer.testing import CliRunner

    from qkwh.cli import app
    from qkwh.reports import render as render_mod

    def broken(marts):
        raise RuntimeError("simulated drawing bug")

    first = render_mod.CATALOGUE[0]
    bad = dataclasses.replace(first, key="broken-figure", build=broken, per_model=False)
    monkeypatch.setattr(render_mod, "CATALOGUE", (bad, first))
    r = CliRunner().invoke(app, ["report", "-w", str(report_warehouse), "-o", str(tmp_path / "rep"), "-m", "smollm2-135m"])
    assert r.exit_code == 1, r.output
    assert "left out broken-figure: failed: RuntimeError: simulated drawing bug" in r.output
    assert "1 figure(s) failed to render" in r.stderr
    assert (tmp_path / "rep" / "index.html").exists()
    assert (tmp_path / "rep" / "figures" / f"{first.key}.png").exists()
