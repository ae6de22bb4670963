"""`qkwh report` on the fixture warehouse: every expected figure on its page (the index for
cross-model figures, one page per model for the others), pages that work offline from the one
vega.js of the folder, PNG/SVG only when asked, figures without data left out with a reason,
intervals drawn and explained, models told apart by their labels, figures reading marts only,
and the figures the fixture cannot feed (training dynamics, published comparison, benchmarks)
drawn from hand-filled mart rows.  The report of a mid-sized corpus (6 models x 48 heads):
bounded index size, point clouds sampled deterministically and within their budget."""

from __future__ import annotations

import ast
import json
import re
import shutil
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import duckdb
import pytest

from qkwh.errors import NotFoundError, QkwhError
from qkwh.reports.base import MARTS, Marts
from qkwh.reports.catalogue import catalogue, only
from qkwh.reports.page import read_specs
from qkwh.reports.render import render
from tests.conftest import REPO
from tests.reports.conftest import MODEL, SYNTH, SYNTH_LABEL

PER_MODEL = (
    "pca-collage",
    "rot-ab-collage",
    "rot-complement-collage",
    "ap-heatmap",
    "ap-head-profiles",
)
# Every figure the fixture (two models, no checkpoints, no published values, no benchmark scores)
# has data for.
EXPECTED = {
    "pca-pc-roles",
    "pca-rq-rk-scatter",
    "pca-depth-rq0",
    "pca-depth-rk0",
    "pca-explained-variance",
    "pca-taxonomy",
    "rot-abs-r",
    "rot-variance",
    "rot-bias-distribution",
    "rot-slope-ratio",
    "rot-depth-abs-rka",
    "rot-depth-bias",
    "rot-bias-vs-separation",
    "ap-component-weights",
    "ap-decile-profiles",
    "ap-forest",
    "ap-gauss-vs-empirical",
} | {f"{fig}-{m}" for fig in PER_MODEL for m in (MODEL, SYNTH)}
LEFT_OUT = {  # id -> a word the reason must contain
    "train-bias-decomposition": "checkpoint",
    "train-rotation": "checkpoint",
    "train-plasticity": "checkpoint",
    "train-pca": "checkpoint",
    "train-taxonomy": "checkpoint",
    "pub-comparison": "published",
    "ap-drop-vs-benchmark": "benchmark",
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


def test_every_expected_figure_is_drawn_on_its_page_without_static_files(fixture_report):
    r = fixture_report
    ids = {f.id for f in r.figures}
    assert ids >= EXPECTED, sorted(EXPECTED - ids)
    assert r.failed == ()
    for f in r.figures:
        spec = json.loads(f.spec)
        assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/")
        assert f.png is None and f.svg is None  # PNG and SVG only with --static
        want = r.index if f.model_id is None else r.out / "models" / f"{f.model_id}.html"
        assert f.page == want, f.id
        assert f'data-figure="{f.id}"' in f.page.read_text(), f.id
    # each spec is written once, inline in its page: no copies in figures/ (which holds only
    # --static files), and read back from the pages it is the spec of the result
    assert not (r.out / "figures").exists()
    assert read_specs(r.out) == {f.id: json.loads(f.spec) for f in r.figures}
    assert not list(r.out.rglob("*.png")) and not list(r.out.rglob("*.svg"))


def test_static_files_are_written_when_asked(report_warehouse, tmp_path):
    r = render(
        report_warehouse,
        out=tmp_path / "static",
        models=[SYNTH],
        strict=True,
        figures=["pca-taxonomy", "pca-collage"],
        formats=("png", "svg"),
    )
    assert {f.id for f in r.figures} == {"pca-taxonomy", f"pca-collage-{SYNTH}"}
    for f in r.figures:
        assert f.png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f.png.stat().st_size > 5_000, f.id
        root = ET.parse(f.svg).getroot()
        assert root.tag.endswith("svg"), f.id
        assert len(list(root.iter())) > 30, f"{f.id}: SVG looks empty"
        assert f.png.parent == f.svg.parent == r.out / "figures"
    # a render without static files removes those of the earlier one
    again = render(
        report_warehouse, out=tmp_path / "static", models=[SYNTH], figures=["pca-taxonomy"]
    )
    assert not (again.out / "figures").exists()
    assert not (again.out / "models").exists() or not list((again.out / "models").iterdir())


# cross-model figures with a colour per model and a legend that picks models
MODEL_LEGEND = (
    "pca-pc-roles",
    "pca-rq-rk-scatter",
    "pca-explained-variance",
    "rot-slope-ratio",
    "rot-bias-vs-separation",
    "ap-component-weights",
    "ap-decile-profiles",
    "ap-gauss-vs-empirical",
)
# cross-model figures whose models sit on an axis or in panels, named by their label
MODEL_AXIS = (
    "pca-depth-rq0",
    "pca-depth-rk0",
    "pca-taxonomy",
    "rot-abs-r",
    "rot-variance",
    "rot-bias-distribution",
    "rot-depth-abs-rka",
    "rot-depth-bias",
    "ap-forest",
)


def test_model_legends_filter_and_axes_have_titles(fixture_report):
    specs = {f.id: json.loads(f.spec) for f in fixture_report.figures}
    for fid in MODEL_LEGEND:
        sels = [p for p in _params(specs[fid]) if isinstance(p.get("select"), dict)]
        assert any(
            p.get("bind") == "legend" and p["select"].get("fields") == ["model"] for p in sels
        ), fid
    for fid, spec in specs.items():  # every positional channel carries a title
        for enc in _encodings(spec):
            for ch in ("x", "y"):
                if isinstance(enc.get(ch), dict) and "field" in enc[ch]:
                    assert "title" in enc[ch], (
                        fid,
                        ch,
                        enc[ch],
                    )  # set explicitly (null = in subtitle)


def _params(node):
    if isinstance(node, dict):
        yield from node.get("params") or []
        for v in node.values():
            yield from _params(v)
    elif isinstance(node, list):
        for v in node:
            yield from _params(v)


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


def _page_refs(page: Path) -> _Refs:
    refs = _Refs()
    refs.feed(page.read_text())
    return refs


def test_pages_work_offline_from_the_one_vega_js(fixture_report):
    out = fixture_report.out
    vendor = out / "vega.js"
    assert "vegaEmbed" in vendor.read_text() and "vegaLite" in vendor.read_text()
    pages = [fixture_report.index, *fixture_report.model_pages]
    assert len(pages) == 3
    for page in pages:
        html = page.read_text()
        refs = _page_refs(page)
        # the one script loaded from a file is the report folder's vega.js (relative: the folder
        # can be moved, and file:// works); the embedding script is inline
        assert [(page.parent / s).resolve() for s in refs.loads] == [vendor], (page, refs.loads)
        assert refs.inline_scripts >= 1
        assert "@import" not in html and "url(http" not in html
        for href in refs.links:  # links go to our own files or anchors, never to the network
            assert not href.startswith(("http:", "https:", "//")), href
            target, _, anchor = href.partition("#")
            dest = (page.parent / target).resolve() if target else page
            assert dest.is_file(), (page, href)
            if anchor:
                assert f'id="{anchor}"' in dest.read_text(), (page, href)
    for f in fixture_report.figures:
        html = f.page.read_text()
        assert f'id="vis-{f.id}"' in html and f'data-figure="{f.id}"' in html


def test_per_model_figures_are_on_model_pages_linked_from_the_index(fixture_report):
    r = fixture_report
    index = r.index.read_text()
    per_model = [f for f in r.figures if f.model_id]
    assert per_model
    for f in per_model:  # never on the index: the index does not grow with models x figures
        assert f'data-figure="{f.id}"' not in index
        assert f'href="models/{f.model_id}.html#fig-{f.id}"' in index, f.id
    for m in (MODEL, SYNTH):
        page = r.out / "models" / f"{m}.html"
        assert page in r.model_pages
        html = page.read_text()
        assert f'href="models/{m}.html"' in index  # the model list and the selector
        assert html.count('class="vl-spec"') == sum(1 for f in per_model if f.model_id == m)
        assert 'href="../index.html"' in html  # back to the cross-model figures
        # the selector on every page reaches every model page
        assert all(f'value="{p.name}"' in html for p in r.model_pages if p != page)
    # figures.json names every figure's page
    index_json = json.loads(r.figure_index.read_text())
    assert {f["id"]: f["page"] for f in index_json["figures"]} == {
        f.id: f.page.relative_to(r.out).as_posix() for f in r.figures
    }
    assert index_json["vendor_js"] == "vega.js"


def test_the_catalogue_covers_every_figure_family():
    CATALOGUE = catalogue()
    sections = {f.section for f in CATALOGUE}
    assert sections == {
        "PCA",
        "Rotation",
        "Plasticity",
        "RoPE bands",
        "Softmax reach",
        "Training dynamics",
        "Published comparison",
        "Head ablation",
    }
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
    with pytest.raises(QkwhError, match="not a qkwh warehouse"):  # an empty DuckDB file
        render(bare, out=tmp_path / "r2")
    from qkwh import store

    unbuilt = tmp_path / "unbuilt.duckdb"
    store.connect(unbuilt).close()  # a new file gets the schema: catalog tables, no marts
    with pytest.raises(QkwhError, match="qkwh build"):  # a warehouse whose marts were never built
        render(unbuilt, out=tmp_path / "r2")


# ------------------------------------------------------------------------------------------
# figures the fixture cannot feed, from hand-filled mart rows
# ------------------------------------------------------------------------------------------

CKPTS = [
    ("ckpt-a", "pretrain", 1, 40000),
    ("ckpt-b", "pretrain", 2, 1200000),
    ("ckpt-c", "lc_4k_32k", 3, 4000),
]


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
                "INSERT INTO model_summary BY NAME SELECT * REPLACE (? AS model_id, ? AS label, "
                "'SmolLM3' AS family, ? AS checkpoint_phase, ? AS trajectory_rank, ? AS checkpoint_step) "
                "FROM model_summary WHERE model_id = ?",
                [mid, mid, phase, rank, step, MODEL],
            )
            con.execute(
                "INSERT INTO model_metric_ci BY NAME SELECT * REPLACE (? AS model_id, ? AS label) "
                "FROM model_metric_ci WHERE model_id = ?",
                [mid, mid, MODEL],
            )
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
                [mid, phase, rank, step, f, f, f, f, 1 / f, MODEL],
            )
            con.execute(
                """INSERT INTO bias_decomposition BY NAME SELECT ? AS model_id, 'SmolLM3' AS family,
                   true AS is_checkpoint, ? AS checkpoint_phase, ? AS checkpoint_step, ? AS trajectory_rank,
                   ? * mu_q_a AS mu_q_a, alpha_k, ? * bias_strength AS bias_strength, 0.1 AS rel_change_bias_strength
                   FROM model_summary WHERE model_id = ?""",
                [mid, phase, step, rank, f, f, MODEL],
            )
            con.execute(
                """INSERT INTO published_comparison BY NAME SELECT 'model' AS level, ? AS model_id,
                   metric, 'Table 5' AS source_table, true AS is_preferred, value * ? AS published_value,
                   value AS our_value, 0.01 AS tolerance, abs(value * ? - value) <= 0.01 AS within_tolerance
                   FROM (VALUES ('ap_overall', 0.55), ('ap_drop', 0.2), ('abs_r_k_a', 0.9),
                                ('bias_strength', 0.009)) AS t(metric, value)""",
                [mid, f, f],
            )
            con.execute(
                """INSERT INTO benchmark_joins BY NAME SELECT
                   'longbench_pro' AS benchmark, 'non-thinking' AS mode, 'overall' AS length_scope,
                   'ap_drop' AS metric, ? AS model_id, 'SmolLM3' AS family, ? AS score, ? AS metric_value""",
                [mid, 30.0 + 5 * i, 0.2 - 0.03 * i],
            )
        con.execute(
            """INSERT INTO benchmark_correlations BY NAME SELECT
               'longbench_pro' AS benchmark, 'non-thinking' AS mode, 'overall' AS length_scope,
               'ap_drop' AS metric, 3 AS n, -1.0 AS pearson_r, -1.0 AS boot_ci_low, -0.5 AS boot_ci_high"""
        )
    finally:
        con.close()
    return db


def test_training_published_and_benchmark_figures_draw_when_marts_have_rows(
    filled_warehouse, tmp_path
):
    r = render(
        filled_warehouse,
        out=tmp_path / "filled",
        strict=True,
        models=[MODEL] + [c[0] for c in CKPTS],
        figures=["Training dynamics", "published comparison", "ap-drop-vs-benchmark", "ap-heatmap"],
    )
    ids = {f.id for f in r.figures}
    assert ids == set(LEFT_OUT) | {f"ap-heatmap-{MODEL}"}, ids
    for fid in LEFT_OUT:
        assert fid in ids, (fid, [s for s in r.skipped if s.id == fid])
    assert r.failed == ()
    # checkpoints come in training order, after the fixture model (family order)
    assert list(r.models) == [MODEL] + [c[0] for c in CKPTS]
    # the fake checkpoints have no vectors: their per-model figures are left out, not broken
    assert any(s.id == "ap-heatmap-ckpt-a" for s in r.skipped)
    # every checkpoint panel draws its values with intervals (copied from the sample's rows) and
    # the caption says what they are; the benchmark figure gives r with both intervals
    figs = {f.id: f for f in r.figures}
    for fid in (
        "train-bias-decomposition",
        "train-rotation",
        "train-plasticity",
        "train-pca",
        "train-taxonomy",
        "pub-comparison",
        "ap-drop-vs-benchmark",
    ):
        assert '"errorbar"' in figs[fid].spec, fid
        assert "layer-cluster bootstrap" in figs[fid].caption, (fid, figs[fid].caption)
    bench = figs["ap-drop-vs-benchmark"].caption
    assert "r = -1.00 (n = 3)" in bench and "two-stage bootstrap [-1.00, -0.50]" in bench, bench
    assert "Fisher-z interval n/a" in bench


def test_cli_report_exits_non_zero_when_a_figure_fails_to_draw(
    report_warehouse, tmp_path, monkeypatch
):
    """A figure that raises is left out with its error, the rest is written, and the exit code says so."""
    import dataclasses

    from typer.testing import CliRunner

    from qkwh.cli import app

    def broken(marts):
        raise RuntimeError("simulated drawing bug")

    first = catalogue()[0]
    bad = dataclasses.replace(first, key="broken-figure", build=broken, per_model=False)
    with only(bad, first):
        r = CliRunner().invoke(
            app,
            [
                "report",
                "-w",
                str(report_warehouse),
                "-o",
                str(tmp_path / "rep"),
                "-m",
                "smollm2-135m",
            ],
        )
    assert r.exit_code == 1, r.output
    assert "left out broken-figure: failed: RuntimeError: simulated drawing bug" in r.output
    assert "1 figure(s) failed to render" in r.stderr
    assert (tmp_path / "rep" / "index.html").exists()
    assert f'data-figure="{first.key}"' in (tmp_path / "rep" / "index.html").read_text()
    assert not (tmp_path / "rep" / "figures" / f"{first.key}.png").exists()  # no --static


def test_cli_report_static_writes_png_and_svg(report_warehouse, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from qkwh.cli import app

    fig = next(f for f in catalogue() if f.key == "pca-taxonomy")
    with only(fig):
        r = CliRunner().invoke(
            app, ["report", "--static", "-w", str(report_warehouse), "-o", str(tmp_path / "rep")]
        )
    assert r.exit_code == 0, r.output
    for ext in ("png", "svg"):
        assert (tmp_path / "rep" / "figures" / f"pca-taxonomy.{ext}").is_file(), ext
    assert "--static" in CliRunner().invoke(app, ["report", "--help"]).output


# ------------------------------------------------------------------------------------------
# intervals, the forest plot, Gaussian vs empirical, models told apart
# ------------------------------------------------------------------------------------------

# figures that draw a model-level value with its interval
INTERVAL_FIGURES = (
    "pca-pc-roles",
    "pca-explained-variance",
    "pca-taxonomy",
    "rot-abs-r",
    "rot-variance",
    "rot-bias-distribution",
    "rot-slope-ratio",
    f"ap-head-profiles-{MODEL}",
    "ap-decile-profiles",
    "ap-forest",
    "ap-gauss-vs-empirical",
)


def _query(db: Path, sql: str, params: list | None = None) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def _records(spec: dict) -> list[dict]:
    """Every inline data record of a spec (top-level datasets and inline values)."""
    out = [r for rows in (spec.get("datasets") or {}).values() for r in rows]

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("data"), dict) and isinstance(node["data"].get("values"), list):
                out.extend(node["data"]["values"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(spec)
    return out


def test_captions_say_what_the_interval_is(fixture_report, report_warehouse):
    [(level, n_boot, method)] = _query(
        report_warehouse, "SELECT DISTINCT level, n_boot, method FROM model_metric_ci"
    )
    assert method == "layer_cluster_bootstrap_percentile"
    [(note,)] = _query(
        report_warehouse,
        "SELECT DISTINCT note FROM model_metric_ci WHERE model_id = ? AND ci_low IS NULL",
        [SYNTH],
    )
    figs = {f.id: f for f in fixture_report.figures}
    for fid in INTERVAL_FIGURES:
        cap, text = figs[fid].caption, figs[fid].spec
        assert f"{100 * level:.0f} % layer-cluster bootstrap percentile interval" in cap, (fid, cap)
        assert (
            f"B = {n_boot:,} replicates" in cap and "layers are redrawn with replacement" in cap
        ), fid
        assert '"ci_low"' in text and (
            '"errorbar"' in text or '"area"' in text or '"rect"' in text
        ), fid
        # the 4-layer model has no interval: drawn hollow, and the caption says why
        if fid not in (f"ap-head-profiles-{MODEL}",):
            assert f"No interval (hollow mark) for {SYNTH_LABEL}: {note}." in cap, (fid, cap)
    # any figure with error bars explains them
    for f in fixture_report.figures:
        if '"errorbar"' in f.spec:
            assert "interval" in f.caption and "B = " in f.caption, f.id
    # the figure without intervals says so
    assert "without an interval" in figs["ap-component-weights"].caption


def test_forest_plot_order_and_intervals_come_from_the_marts(fixture_report, report_warehouse):
    order = _query(
        report_warehouse,
        "SELECT model_id, label FROM model_summary WHERE ap_drop IS NOT NULL ORDER BY ap_drop DESC",
    )
    assert len(order) == 2 and order[0][1] != order[1][1]
    spec = json.loads(next(f for f in fixture_report.figures if f.id == "ap-forest").spec)
    sorts = [
        enc["y"]["sort"]
        for enc in _encodings(spec)
        if isinstance(enc.get("y"), dict) and enc["y"].get("field") == "model"
    ]
    assert sorts and all(s == [label for _, label in order] for s in sorts), sorts
    ci = {
        (m, metric): (lo, hi)
        for m, metric, lo, hi in _query(
            report_warehouse,
            "SELECT model_id, metric, ci_low, ci_high FROM model_metric_ci "
            "WHERE metric IN ('ap_drop', 'ap_overall')",
        )
    }
    drawn = [r for r in _records(spec) if "metric" in r and "ci_low" in r]
    assert len(drawn) == 4
    for r in drawn:
        metric = "ap_drop" if r["metric"].startswith("ap_drop") else "ap_overall"
        assert (r["ci_low"], r["ci_high"]) == ci[(r["model_id"], metric)], r
    assert any(r["model_id"] == SYNTH and r["ci_low"] is None for r in drawn)
    assert any(r["model_id"] == MODEL and r["ci_low"] < r["value"] < r["ci_high"] for r in drawn)


def test_gauss_vs_empirical_is_drawn_with_empirical_results_and_left_out_without(
    fixture_report, report_warehouse, tmp_path
):
    fig = next(f for f in fixture_report.figures if f.id == "ap-gauss-vs-empirical")
    spec = json.loads(fig.spec)
    n_buckets = _query(report_warehouse, "SELECT count(*) FROM plasticity_buckets_gap")[0][0]
    buckets = [r for r in _records(spec) if "ap_bucket_empirical" in r]
    assert 0 < len(buckets) == n_buckets
    assert {r["model"] for r in buckets} == {MODEL, SYNTH_LABEL}
    text = json.dumps(spec)
    assert '"gauss_gap"' in text and '"depth_bin"' in text
    # no empirical results: left out with a note saying how to get them
    db = tmp_path / "no-empirical.duckdb"
    shutil.copy(report_warehouse, db)
    con = duckdb.connect(str(db))
    try:
        con.execute("DELETE FROM plasticity_buckets_gap")
    finally:
        con.close()
    r = render(db, out=tmp_path / "r", figures=["ap-gauss-vs-empirical"], formats=("svg",))
    assert r.figures == ()
    [skip] = r.skipped
    assert skip.id == "ap-gauss-vs-empirical" and "plasticity.empirical=true" in skip.reason
    assert "plasticity.empirical=true" in r.index.read_text()


def test_models_are_told_apart_by_colour_and_named_by_label(fixture_report, report_warehouse):
    assert _query(
        report_warehouse, "SELECT label, family FROM model_summary WHERE model_id = ?", [SYNTH]
    ) == [(SYNTH_LABEL, "Synthetic")]
    specs = {f.id: json.loads(f.spec) for f in fixture_report.figures}
    for fid in MODEL_LEGEND:
        colors = [
            enc["color"]
            for enc in _encodings(specs[fid])
            if isinstance(enc.get("color"), dict) and enc["color"].get("field") == "model"
        ]
        assert colors, fid
        for c in colors:
            assert c["scale"]["domain"] == [MODEL, SYNTH_LABEL], (fid, c["scale"])
            assert len(set(c["scale"]["range"])) == 2, (fid, c["scale"])
        records = _records(specs[fid])
        assert any(r.get("model") == SYNTH_LABEL and r.get("model_id") == SYNTH for r in records), (
            fid
        )
    for fid in MODEL_AXIS:
        fields = [
            enc[ch]
            for enc in _encodings(specs[fid])
            for ch in ("x", "y")
            if isinstance(enc.get(ch), dict) and enc[ch].get("field") == "model"
        ]
        fields += [specs[fid].get("facet", {}).get("row", {})] if "facet" in specs[fid] else []
        assert any(SYNTH_LABEL in (f.get("sort") or []) for f in fields), fid
        assert SYNTH_LABEL in json.dumps(_records(specs[fid])), fid


# ------------------------------------------------------------------------------------------
# reports read marts only (raw vectors and axes through the one reader)
# ------------------------------------------------------------------------------------------

REPORTS_DIR = REPO / "qkwh" / "reports"
READER = "vectors.py"
READER_TABLES = {"files", "rotation_axes", "pca_axes", "read_parquet"}
_RELATION = re.compile(r"\b(?:FROM|JOIN)\s+(\"?)([A-Za-z_][\w.]*)\1", re.IGNORECASE)


def test_the_mart_list_is_the_dbt_projects():
    marts = {
        p.stem
        for p in (REPO / "dbt_project" / "models" / "marts").iterdir()
        if p.suffix in (".sql", ".py")
    }
    assert marts == MARTS


def test_every_report_query_reads_a_mart_or_goes_through_the_vector_reader(recorded_report):
    _, log = recorded_report
    seen: dict[str, set[str]] = {}
    for caller, sql in log:
        path = Path(caller)
        assert path.parent == REPORTS_DIR, (
            f"SQL run from outside the report layer's readers: {caller}"
        )
        rels = {m.group(2) for m in _RELATION.finditer(sql)}
        seen.setdefault(path.name, set()).update(rels)
        if path.name == READER:
            assert rels <= READER_TABLES, (sql, rels - READER_TABLES)
        else:
            assert path.name == "base.py", f"{path.name} runs SQL itself: {sql}"
            bad = {r for r in rels if r not in MARTS and not r.startswith("information_schema.")}
            assert not bad, (sql, bad)
    # the render did read marts (intervals included) and the collages' vectors and axes
    assert {"model_summary", "model_metric_ci", "head_metrics", "head_rotation_pairs"} <= seen[
        "base.py"
    ]
    assert {"files", "rotation_axes", "pca_axes", "read_parquet"} <= seen[READER]


def test_figure_modules_never_touch_the_connection():
    for path in sorted(REPORTS_DIR.glob("*.py")):
        if path.name in ("base.py", READER):
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                assert node.attr not in ("con", "_query"), (
                    f"{path.name}:{node.lineno} uses .{node.attr}"
                )
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not re.search(r"\bSELECT\b.*\bFROM\b", node.value, re.S), (
                    f"{path.name}:{node.lineno} holds SQL"
                )


def test_marts_rows_refuses_anything_but_a_mart(report_warehouse):
    con = duckdb.connect(str(report_warehouse), read_only=True)
    try:
        marts = Marts(con, [MODEL])
        for name in ("rotation_pairs", "files", "stg_models", "int_models", "heads"):
            with pytest.raises(ValueError, match="marts only"):
                marts.rows(name)
        assert marts.rows("head_rotation_pairs", "model_id = ?", [MODEL])
    finally:
        con.close()


def test_model_colours_are_distinct_shades_of_the_family_colour():
    import colorsys

    from qkwh.reports.base import FAMILY_COLORS, model_look

    con = duckdb.connect()
    try:
        con.execute("CREATE TABLE model_summary (model_id VARCHAR, label VARCHAR, family VARCHAR)")
        con.execute(
            "INSERT INTO model_summary VALUES ('q-a', 'Qwen A', 'Qwen3'), ('q-b', 'Qwen B', 'Qwen3'), "
            "('q-c', 'q-c', 'Qwen3'), ('x-1', 'same', NULL), ('x-2', 'same', NULL), "
            "('l-1', 'Llama', 'Llama3.2')"
        )
        marts = Marts(con, ["l-1", "q-a", "q-b", "q-c", "x-1", "x-2"])
        look = model_look(marts)
    finally:
        con.close()
    # labels name the models; a label two models share gets the id appended
    assert look.models == ("Llama", "Qwen A", "Qwen B", "q-c", "same (x-1)", "same (x-2)")
    assert len(set(look.colors)) == len(look.colors)
    colours = dict(zip(look.models, look.colors))
    assert colours["Llama"] == FAMILY_COLORS["Llama3.2"]  # alone in its family: the family colour

    def hue(c: str) -> float:
        return colorsys.rgb_to_hls(*(int(c[i : i + 2], 16) / 255 for i in (1, 3, 5)))[0]

    qwen = [colours[m] for m in ("Qwen A", "Qwen B", "q-c")]
    assert all(abs(hue(c) - hue(FAMILY_COLORS["Qwen3"])) < 0.02 for c in qwen)
    # models without a family are not grouped: each has its own hue
    assert abs(hue(colours["same (x-1)"]) - hue(colours["same (x-2)"])) > 0.02
    assert look.families == ("Llama3.2", "Qwen3", "unknown")


def _walk(node):
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


def test_taxonomy_thresholds_classes_and_colours_come_from_the_build(report_warehouse, tmp_path):
    """A build with other --vars (here: the taxonomy_classes mart edited as such a build writes
    it) draws its own threshold lines, class order, labels and colours: nothing is hard-coded."""
    from qkwh.reports import pca

    wh = tmp_path / "other_vars.duckdb"
    shutil.copy(report_warehouse, wh)
    con = duckdb.connect(str(wh))
    try:
        con.execute(
            "UPDATE taxonomy_classes SET taxonomy_low = 0.25, taxonomy_high = 0.8, "
            "label = upper(label), color = '#0000' || cast(class_order AS varchar) || '0', "
            "class_order = 10 - class_order"
        )
        want = con.execute(
            "SELECT label, color FROM taxonomy_classes ORDER BY class_order"
        ).fetchall()
    finally:
        con.close()
    con = duckdb.connect(str(wh), read_only=True)
    try:
        marts = Marts(con, [MODEL])
        scatter = pca.rq_rk_scatter(marts).to_dict()
        shares = pca.taxonomy(marts).chart.to_dict()
    finally:
        con.close()
    rules = {d["datum"] for d in _walk(scatter) if isinstance(d.get("datum"), float)}
    assert rules == {0.25, 0.8, -0.25, -0.8}
    assert "0.25 / 0.8" in json.dumps(scatter["title"]) and "0.25 / 0.8" in json.dumps(
        shares["title"]
    )
    scales = [d for d in _walk(shares) if "range" in d and "domain" in d]
    assert [(lab, col) for s in scales for lab, col in zip(s["domain"], s["range"])] == want


# ------------------------------------------------------------------------------------------
# a mid-sized corpus: the index stays small, point clouds are sampled within their budget
# ------------------------------------------------------------------------------------------

#: index.html of 6 models x 48 heads: 1.7 MB (1.1 MB of it the Gaussian-vs-empirical buckets).
#: With the per-model figures on it, as before, it was 20 MB; without the bucket sample 3.4 MB.
#: (The corpus-scale target, 10 MB at 23 x 300, is measured by bench/corpus.py.)
CORPUS_INDEX_BYTES = 2_500_000


@pytest.fixture(scope="module")
def corpus_report(corpus_warehouse, tmp_path_factory):
    return render(corpus_warehouse, out=tmp_path_factory.mktemp("corpus-report") / "r", strict=True)


def test_corpus_index_stays_small_and_each_model_has_its_page(corpus_report):
    r = corpus_report
    assert len(r.models) == 6 and r.failed == ()
    assert r.index.stat().st_size <= CORPUS_INDEX_BYTES, r.index.stat().st_size
    assert not list(r.out.rglob("*.png")) and not list(r.out.rglob("*.svg"))
    assert sorted(p.name for p in r.model_pages) == [f"corpus-{i}.html" for i in range(6)]
    index = r.index.read_text()
    assert index.count('class="vl-spec"') == sum(1 for f in r.figures if f.model_id is None)
    assert "<script src=" in index and index.count("vegaEmbed(") == 1  # the bundle is not inlined
    per_model = {f.id.removesuffix(f"-{f.model_id}") for f in r.figures if f.model_id}
    assert {"pca-collage", "rot-ab-collage", "ap-heatmap"} <= per_model
    for page in r.model_pages:  # a model page holds its own figures only
        assert page.read_text().count('class="vl-spec"') == len(per_model)


def _points(spec: dict) -> dict[str, list[tuple]]:
    """model_id -> sorted (layer, q_head) of the records of a head scatter."""
    out: dict[str, list[tuple]] = {}
    for rec in _records(spec):
        if rec.get("q_head") is not None:  # head marks, not the fit lines drawn from the same data
            out.setdefault(rec["model_id"], []).append((rec["layer"], rec["q_head"]))
    return {m: sorted(v) for m, v in out.items()}


def test_point_clouds_are_capped_deterministic_and_stable(corpus_warehouse, tmp_path):
    figs = ["pca-rq-rk-scatter", "rot-bias-vs-separation"]
    a = render(corpus_warehouse, out=tmp_path / "a", figures=figs, point_budget=60, strict=True)
    b = render(corpus_warehouse, out=tmp_path / "b", figures=figs, point_budget=60, strict=True)
    two = render(
        corpus_warehouse,
        out=tmp_path / "two",
        figures=figs,
        point_budget=20,
        strict=True,
        models=["corpus-0", "corpus-3"],
    )
    for fid in figs:
        fa, fb, ft = ({f.id: f for f in r.figures}[fid] for r in (a, b, two))
        pa = _points(json.loads(fa.spec))
        assert sorted(pa) == [f"corpus-{i}" for i in range(6)], fid
        assert all(len(v) == 10 for v in pa.values()), fid  # 60 marks, 10 per model, of 48 heads
        assert "Points: 60 of 288 heads drawn, at most 10 per model" in fa.caption, fa.caption
        assert fa.spec == fb.spec, fid  # the same run after run
        # a model's heads do not depend on the other models in the report
        pt = _points(json.loads(ft.spec))
        assert pt == {m: pa[m] for m in ("corpus-0", "corpus-3")}, fid
        # not simply the first heads: drawn from every layer copy
        assert len({q // 100 for _, q in pa["corpus-0"]}) > 1
    # with room for every head nothing is left out and the caption says nothing
    full = render(
        corpus_warehouse, out=tmp_path / "full", figures=["pca-rq-rk-scatter"], point_budget=288
    )
    assert sum(map(len, _points(json.loads(full.figures[0].spec)).values())) == 288
    assert "Points:" not in full.figures[0].caption


def test_specs_carry_only_the_data_columns_they_name():
    import altair as alt

    from qkwh.reports.base import table_of
    from qkwh.reports.specs import spec_of as _spec

    rows = [{"model_id": "m", "x": 1.0, "y": 2.0, "label_unused": "a" * 50, "z": 3.0}]
    chart = (
        alt.Chart(table_of(rows))
        .mark_point()
        .encode(x="x:Q", y="y:Q", tooltip=[alt.Tooltip("model_id:N")])
        .transform_filter("datum.z > 0")
    )
    [data] = _spec(chart)["datasets"].values()
    assert data == [{"model_id": "m", "x": 1.0, "y": 2.0, "z": 3.0}]  # z: named in an expression
    # a tooltip showing every field keeps every column
    every = alt.Chart(table_of(rows)).mark_point(tooltip=True).encode(x="x:Q")
    [data] = _spec(every)["datasets"].values()
    assert data == rows


def test_captions_cite_no_unexplained_figure_tags():
    """Captions are for a reader with only the report: no "(qk-pca/02)"-style research tags."""
    import re

    tag = re.compile(r"(qk-(pca|rotation)|attention-plasticity)/\d|Tables? \d")
    captions = [f.caption for f in catalogue()]
    assert captions and not [c for c in captions if tag.search(c)]
