"""`qkwh report` on the fixture warehouse: every expected figure file, a self-contained index.html,
figures without data left out with a reason, intervals drawn and explained, models told apart by
their labels, figures reading marts only, and the figures the fixture cannot feed (training
dynamics, published comparison, benchmarks) drawn from hand-filled mart rows."""

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
from qkwh.reports.render import CATALOGUE, render
from tests.conftest import REPO
from tests.reports.conftest import MODEL, SYNTH, SYNTH_LABEL

PER_MODEL = ("pca-collage", "rot-ab-collage", "rot-complement-collage", "ap-heatmap", "ap-head-profiles")
# Every figure the fixture (two models, no checkpoints, no published values, no benchmark scores)
# has data for.
EXPECTED = {
    "pca-pc-roles", "pca-rq-rk-scatter", "pca-depth-rq0", "pca-depth-rk0", "pca-explained-variance",
    "pca-taxonomy", "rot-abs-r", "rot-variance", "rot-bias-distribution", "rot-slope-ratio",
    "rot-depth-abs-rka", "rot-depth-bias", "rot-bias-vs-separation", "ap-component-weights",
    "ap-decile-profiles", "ap-forest", "ap-gauss-vs-empirical",
} | {f"{fig}-{m}" for fig in PER_MODEL for m in (MODEL, SYNTH)}
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
    assert ids >= EXPECTED, sorted(EXPECTED - ids)
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


# cross-model figures with a colour per model and a legend that picks models
MODEL_LEGEND = ("pca-pc-roles", "pca-rq-rk-scatter", "pca-explained-variance", "rot-slope-ratio",
                "rot-bias-vs-separation", "ap-component-weights", "ap-decile-profiles",
                "ap-gauss-vs-empirical")
# cross-model figures whose models sit on an axis or in panels, named by their label
MODEL_AXIS = ("pca-depth-rq0", "pca-depth-rk0", "pca-taxonomy", "rot-abs-r", "rot-variance",
              "rot-bias-distribution", "rot-depth-abs-rka", "rot-depth-bias", "ap-forest")


def test_model_legends_filter_and_axes_have_titles(fixture_report):
    specs = {f.id: json.loads(f.spec.read_text()) for f in fixture_report.figures}
    for fid in MODEL_LEGEND:
        sels = [p for p in _params(specs[fid]) if isinstance(p.get("select"), dict)]
        assert any(p.get("bind") == "legend" and p["select"].get("fields") == ["model"] for p in sels), fid
    for fid, spec in specs.items():  # every positional channel carries a title
        for enc in _encodings(spec):
            for ch in ("x", "y"):
                if isinstance(enc.get(ch), dict) and "field" in enc[ch]:
                    assert "title" in enc[ch], (fid, ch, enc[ch])  # set explicitly (null = in subtitle)


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
                "INSERT INTO model_summary BY NAME SELECT * REPLACE (? AS model_id, ? AS label, "
                "'SmolLM3' AS family, ? AS checkpoint_phase, ? AS trajectory_rank, ? AS checkpoint_step) "
                "FROM model_summary WHERE model_id = ?", [mid, mid, phase, rank, step, MODEL])
            con.execute(
                "INSERT INTO model_metric_ci BY NAME SELECT * REPLACE (? AS model_id, ? AS label) "
                "FROM model_metric_ci WHERE model_id = ?", [mid, mid, MODEL])
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
    # every checkpoint panel draws its values with intervals (copied from the sample's rows) and
    # the caption says what they are; the benchmark figure gives r with both intervals
    figs = {f.id: f for f in r.figures}
    for fid in ("train-bias-decomposition", "train-rotation", "train-plasticity", "train-pca",
                "train-taxonomy", "pub-comparison", "ap-drop-vs-benchmark"):
        assert '"errorbar"' in figs[fid].spec.read_text(), fid
        assert "layer-cluster bootstrap" in figs[fid].caption, (fid, figs[fid].caption)
    bench = figs["ap-drop-vs-benchmark"].caption
    assert "r = -1.00 (n = 3)" in bench and "two-stage bootstrap [-1.00, -0.50]" in bench, bench
    assert "Fisher-z interval n/a" in bench


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


# ------------------------------------------------------------------------------------------
# intervals, the forest plot, Gaussian vs empirical, models told apart
# ------------------------------------------------------------------------------------------

# figures that draw a model-level value with its interval
INTERVAL_FIGURES = ("pca-pc-roles", "pca-explained-variance", "pca-taxonomy", "rot-abs-r",
                    "rot-variance", "rot-bias-distribution", "rot-slope-ratio",
                    f"ap-head-profiles-{MODEL}", "ap-decile-profiles", "ap-forest",
                    "ap-gauss-vs-empirical")


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
    [(level, n_boot, method)] = _query(report_warehouse,
                                       "SELECT DISTINCT level, n_boot, method FROM model_metric_ci")
    assert method == "layer_cluster_bootstrap_percentile"
    [(note,)] = _query(report_warehouse, "SELECT DISTINCT note FROM model_metric_ci WHERE model_id = ? "
                                         "AND ci_low IS NULL", [SYNTH])
    figs = {f.id: f for f in fixture_report.figures}
    for fid in INTERVAL_FIGURES:
        cap, text = figs[fid].caption, figs[fid].spec.read_text()
        assert f"{100 * level:.0f} % layer-cluster bootstrap percentile interval" in cap, (fid, cap)
        assert f"B = {n_boot:,} replicates" in cap and "layers are redrawn with replacement" in cap, fid
        assert '"ci_low"' in text and ('"errorbar"' in text or '"area"' in text or '"rect"' in text), fid
        # the 4-layer model has no interval: drawn hollow, and the caption says why
        if fid not in (f"ap-head-profiles-{MODEL}",):
            assert f"No interval (hollow mark) for {SYNTH_LABEL}: {note}." in cap, (fid, cap)
    # any figure with error bars explains them
    for f in fixture_report.figures:
        if '"errorbar"' in f.spec.read_text():
            assert "interval" in f.caption and "B = " in f.caption, f.id
    # the figure without intervals says so
    assert "without an interval" in figs["ap-component-weights"].caption


def test_forest_plot_order_and_intervals_come_from_the_marts(fixture_report, report_warehouse):
    order = _query(report_warehouse, "SELECT model_id, label FROM model_summary "
                                     "WHERE ap_drop IS NOT NULL ORDER BY ap_drop DESC")
    assert len(order) == 2 and order[0][1] != order[1][1]
    spec = json.loads(next(f for f in fixture_report.figures if f.id == "ap-forest").spec.read_text())
    sorts = [enc["y"]["sort"] for enc in _encodings(spec)
             if isinstance(enc.get("y"), dict) and enc["y"].get("field") == "model"]
    assert sorts and all(s == [label for _, label in order] for s in sorts), sorts
    ci = {(m, metric): (lo, hi) for m, metric, lo, hi in _query(
        report_warehouse, "SELECT model_id, metric, ci_low, ci_high FROM model_metric_ci "
                          "WHERE metric IN ('ap_drop', 'ap_overall')")}
    drawn = [r for r in _records(spec) if "metric" in r and "ci_low" in r]
    assert len(drawn) == 4
    for r in drawn:
        metric = "ap_drop" if r["metric"].startswith("ap_drop") else "ap_overall"
        assert (r["ci_low"], r["ci_high"]) == ci[(r["model_id"], metric)], r
    assert any(r["model_id"] == SYNTH and r["ci_low"] is None for r in drawn)
    assert any(r["model_id"] == MODEL and r["ci_low"] < r["value"] < r["ci_high"] for r in drawn)


def test_gauss_vs_empirical_is_drawn_with_empirical_results_and_left_out_without(
        fixture_report, report_warehouse, tmp_path):
    fig = next(f for f in fixture_report.figures if f.id == "ap-gauss-vs-empirical")
    spec = json.loads(fig.spec.read_text())
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
    assert _query(report_warehouse, "SELECT label, family FROM model_summary WHERE model_id = ?",
                  [SYNTH]) == [(SYNTH_LABEL, "Synthetic")]
    specs = {f.id: json.loads(f.spec.read_text()) for f in fixture_report.figures}
    for fid in MODEL_LEGEND:
        colors = [enc["color"] for enc in _encodings(specs[fid])
                  if isinstance(enc.get("color"), dict) and enc["color"].get("field") == "model"]
        assert colors, fid
        for c in colors:
            assert c["scale"]["domain"] == [MODEL, SYNTH_LABEL], (fid, c["scale"])
            assert len(set(c["scale"]["range"])) == 2, (fid, c["scale"])
        records = _records(specs[fid])
        assert any(r.get("model") == SYNTH_LABEL and r.get("model_id") == SYNTH for r in records), fid
    for fid in MODEL_AXIS:
        fields = [enc[ch] for enc in _encodings(specs[fid]) for ch in ("x", "y")
                  if isinstance(enc.get(ch), dict) and enc[ch].get("field") == "model"]
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
    marts = {p.stem for p in (REPO / "dbt_project" / "models" / "marts").iterdir()
             if p.suffix in (".sql", ".py")}
    assert marts == MARTS


def test_every_report_query_reads_a_mart_or_goes_through_the_vector_reader(recorded_report):
    _, log = recorded_report
    seen: dict[str, set[str]] = {}
    for caller, sql in log:
        path = Path(caller)
        assert path.parent == REPORTS_DIR, f"SQL run from outside the report layer's readers: {caller}"
        rels = {m.group(2) for m in _RELATION.finditer(sql)}
        seen.setdefault(path.name, set()).update(rels)
        if path.name == READER:
            assert rels <= READER_TABLES, (sql, rels - READER_TABLES)
        else:
            assert path.name == "base.py", f"{path.name} runs SQL itself: {sql}"
            bad = {r for r in rels if r not in MARTS and not r.startswith("information_schema.")}
            assert not bad, (sql, bad)
    # the render did read marts (intervals included) and the collages' vectors and axes
    assert {"model_summary", "model_metric_ci", "head_metrics", "head_rotation_pairs"} <= seen["base.py"]
    assert {"files", "rotation_axes", "pca_axes", "read_parquet"} <= seen[READER]


def test_figure_modules_never_touch_the_connection():
    for path in sorted(REPORTS_DIR.glob("*.py")):
        if path.name in ("base.py", READER):
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                assert node.attr not in ("con", "_query"), f"{path.name}:{node.lineno} uses .{node.attr}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not re.search(r"\bSELECT\b.*\bFROM\b", node.value, re.S), \
                    f"{path.name}:{node.lineno} holds SQL"


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
        con.execute("INSERT INTO model_summary VALUES ('q-a', 'Qwen A', 'Qwen3'), ('q-b', 'Qwen B', 'Qwen3'), "
                    "('q-c', 'q-c', 'Qwen3'), ('x-1', 'same', NULL), ('x-2', 'same', NULL), "
                    "('l-1', 'Llama', 'Llama3.2')")
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
        return colorsys.rgb_to_hls(*(int(c[i:i + 2], 16) / 255 for i in (1, 3, 5)))[0]

    qwen = [colours[m] for m in ("Qwen A", "Qwen B", "q-c")]
    assert all(abs(hue(c) - hue(FAMILY_COLORS["Qwen3"])) < 0.02 for c in qwen)
    # models without a family are not grouped: each has its own hue
    assert abs(hue(colours["same (x-1)"]) - hue(colours["same (x-2)"])) > 0.02
    assert look.families == ("Llama3.2", "Qwen3", "unknown")
