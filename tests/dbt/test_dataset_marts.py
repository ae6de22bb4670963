"""Document-level intervals (model_metric_ci.se_documents and the combined interval), the
`interval` column of model_comparisons, the dataset_comparisons mart and `qkwh compare`'s
paired form, on the warehouse of dataset_data (one dbt build for the module)."""

from __future__ import annotations

import json
import math

import dataset_data as dd
import numpy as np
import pytest
from typer.testing import CliRunner

from qkwh import store
from qkwh.build import build
from qkwh.cli import app
from qkwh.compare import compare
from tests.dbt.conftest import Built, _quiet

Z95 = 1.959963984540054


@pytest.fixture(scope="module")
def dataset_build(build_root) -> Built:
    wh = build_root / "datasets" / "qkwh.duckdb"
    con = store.connect(wh)
    try:
        dd.fill(con)
    finally:
        con.close()
    mp = pytest.MonkeyPatch()
    mp.setenv("DBT_INDIRECT_SELECTION", "cautious")
    try:
        res = build(
            wh,
            select="+dataset_comparisons +model_comparisons +model_summary",
            target_dir=build_root / "datasets" / "target",
            log_sink=_quiet,
            dbt_vars=dd.VARS,
        )
    finally:
        mp.undo()
    return Built(wh, res)


def _ci(built: Built, model_id: str) -> dict[str, dict]:
    return {
        r["metric"]: r
        for r in built.dicts("SELECT * FROM model_metric_ci WHERE model_id = ?", [model_id])
    }


@pytest.mark.parametrize("spec", [dd.PROSE, dd.CODE], ids=lambda s: s.model_id)
def test_se_documents_is_the_jackknife_formula(dataset_build, spec):
    ci = _ci(dataset_build, spec.model_id)
    expected = dd.expected_se_documents(spec)
    for metric, se_doc in expected.items():
        assert se_doc > 0
        assert ci[metric]["se_documents"] == pytest.approx(se_doc, rel=1e-9), metric
        assert ci[metric]["n_document_groups"] == dd.G - 1  # the empty group is left out


def test_combined_interval_and_the_percentile_interval_beside_it(dataset_build):
    ci = _ci(dataset_build, "tiny-prose")
    row = ci["ap_drop"]
    half = Z95 * math.sqrt(row["se"] ** 2 + row["se_documents"] ** 2)
    assert row["ci_low_combined"] == pytest.approx(row["estimate"] - half, rel=1e-12)
    assert row["ci_high_combined"] == pytest.approx(row["estimate"] + half, rel=1e-12)
    assert row["ci_low"] is not None and row["ci_low"] < row["estimate"] < row["ci_high"]
    # no jackknife: no document term, no combined interval, the percentile interval unchanged
    web = _ci(dataset_build, "tiny-web")["ap_drop"]
    assert web["se_documents"] is None and web["ci_low_combined"] is None
    assert web["ci_low"] is not None
    # a metric the jackknife does not cover (a median) has no document term
    assert ci["bias_strength_median"]["se_documents"] is None


def test_model_comparisons_say_which_interval(dataset_build):
    rows = {
        (r["model_a"], r["model_b"]): r
        for r in dataset_build.dicts("SELECT * FROM model_comparisons WHERE metric = 'ap_drop'")
    }
    both = rows[("tiny-code", "tiny-prose")]
    assert both["interval"] == "layers+documents" and both["note"] is None
    half = Z95 * math.sqrt(
        both["se"] ** 2 + both["se_documents_a"] ** 2 + both["se_documents_b"] ** 2
    )
    assert both["ci_low"] == pytest.approx(both["difference"] - half, rel=1e-12)
    one = rows[("tiny-prose", "tiny-web")]
    assert one["interval"] == "layers+documents" and "tiny-prose" in one["note"]
    none = rows[("other", "tiny-web")]
    assert none["interval"] == "layers" and none["se_documents_a"] is None


def test_dataset_comparisons_pair_captures_of_one_model(dataset_build):
    rows = dataset_build.dicts("SELECT * FROM dataset_comparisons")
    pairs = {(r["model_a"], r["model_b"]) for r in rows}
    assert pairs == {  # same hf_model and checkpoint, another dataset
        ("tiny-code", "tiny-prose"),
        ("tiny-code", "tiny-web"),
        ("tiny-prose", "tiny-web"),
        ("tiny-code", "tiny-prose-again"),
        ("tiny-prose-again", "tiny-web"),
    }
    by = {(r["model_a"], r["model_b"], r["metric"]): r for r in rows}
    cp = by[("tiny-code", "tiny-prose", "ap_drop")]
    assert (cp["dataset_a"], cp["dataset_b"], cp["hf_model"]) == ("code", "prose", dd.HF_MODEL)
    ci_code, ci_prose = _ci(dataset_build, "tiny-code"), _ci(dataset_build, "tiny-prose")
    # the same heads in both captures: the estimates are the models' own, the difference B - A
    assert cp["estimate_a"] == pytest.approx(ci_code["ap_drop"]["estimate"], rel=1e-12)
    assert cp["estimate_b"] == pytest.approx(ci_prose["ap_drop"]["estimate"], rel=1e-12)
    assert cp["difference"] == pytest.approx(cp["estimate_b"] - cp["estimate_a"], rel=1e-12)
    # both terms: sqrt(se_layers^2 + se_doc_A^2 + se_doc_B^2)
    assert cp["interval"] == "layers+documents"
    assert cp["se_documents_a"] == ci_code["ap_drop"]["se_documents"]
    assert cp["se_documents_b"] == ci_prose["ap_drop"]["se_documents"]
    se = math.sqrt(cp["se_layers"] ** 2 + cp["se_documents_a"] ** 2 + cp["se_documents_b"] ** 2)
    assert cp["se"] == pytest.approx(se, rel=1e-12)
    assert cp["ci_low"] == pytest.approx(cp["difference"] - Z95 * se, rel=1e-12)
    assert cp["ci_high"] == pytest.approx(cp["difference"] + Z95 * se, rel=1e-12)
    assert cp["distinguishable"] is True  # planted slopes 0.30 vs 0.20
    assert cp["n_heads"] == len(dd.HEADS) and cp["n_layers"] == 6
    # the same planted values: difference 0, cannot tell; no jackknife on web -> a note
    pw = by[("tiny-prose", "tiny-web", "ap_drop")]
    assert pw["difference"] == 0 and pw["distinguishable"] is False
    assert pw["interval"] == "layers+documents" and "only A" in pw["note"]


def test_dataset_comparison_layer_term_is_the_paired_bootstrap(dataset_build):
    """se_layers = sd over replicates of mean_B - mean_A, both over model_a's layer draw."""
    draws = dataset_build.dicts(
        "SELECT replicate, multiplicity FROM intermediate.int_bootstrap_draws WHERE model_id = 'tiny-code' "
        "AND replicate > 0 ORDER BY replicate"
    )
    layers = [
        r[0]
        for r in dataset_build.query(
            "SELECT layer FROM intermediate.int_bootstrap_clusters WHERE model_id = 'tiny-code' "
            "ORDER BY cluster_index"
        )
    ]
    vals = {
        (m, layer, h): v
        for m, layer, h, v in dataset_build.query(
            "SELECT model_id, layer, q_head, value FROM intermediate.int_head_metric_values "
            "WHERE metric = 'bias_strength' AND model_id IN ('tiny-code', 'tiny-prose')"
        )
    }
    diffs = []
    for d in draws:
        w = dict(zip(layers, d["multiplicity"]))
        num = sum(
            w[layer] * (vals[("tiny-prose", layer, h)] - vals[("tiny-code", layer, h)])
            for layer, h in dd.HEADS
        )
        diffs.append(num / sum(w[layer] for layer, _ in dd.HEADS))
    row = dataset_build.dicts(
        "SELECT * FROM dataset_comparisons WHERE model_a = 'tiny-code' "
        "AND model_b = 'tiny-prose' AND metric = 'bias_strength'"
    )[0]
    assert row["se_layers"] == pytest.approx(float(np.std(diffs, ddof=1)), rel=1e-9)


def test_compare_uses_the_paired_form_for_one_model(dataset_build):
    wh = dataset_build.warehouse
    ab = {r.metric: r for r in compare(wh, "tiny-prose", "tiny-code")}
    stored = dataset_build.dicts(
        "SELECT * FROM dataset_comparisons WHERE model_a = 'tiny-code' "
        "AND model_b = 'tiny-prose' AND metric = 'ap_drop'"
    )[0]
    r = ab["ap_drop"]
    assert r.paired and r.interval == "layers+documents"
    assert r.difference == stored["difference"]  # prose - code, as stored (B - A of the mart)
    assert (r.ci_low, r.ci_high) == (stored["ci_low"], stored["ci_high"])
    ba = {r.metric: r for r in compare(wh, "tiny-code", "tiny-prose")}["ap_drop"]
    assert ba.difference == -stored["difference"]
    assert (ba.ci_low, ba.ci_high) == (-stored["ci_high"], -stored["ci_low"])
    prose = _ci(dataset_build, "tiny-prose")["ap_drop"]
    assert (r.ci_low_a, r.ci_high_a) == (prose["ci_low_combined"], prose["ci_high_combined"])
    # two different models: the unpaired form
    other = {r.metric: r for r in compare(wh, "other", "tiny-web")}["ap_drop"]
    assert not other.paired and other.interval == "layers"

    res = CliRunner().invoke(app, ["compare", "tiny-prose", "tiny-code", "-w", str(wh)])
    assert res.exit_code == 0, res.output
    assert "paired head by head" in res.output and "layers+documents" in res.output
    res = CliRunner().invoke(
        app, ["compare", "tiny-prose", "tiny-code", "-w", str(wh), "-f", "json", "-m", "ap_drop"]
    )
    data = json.loads(res.stdout)
    assert data[0]["paired"] is True and data[0]["interval"] == "layers+documents"


def test_report_draws_the_dataset_comparisons_and_the_combined_forest(dataset_build, tmp_path):
    from qkwh.reports.render import render

    r = render(
        dataset_build.warehouse,
        out=tmp_path / "report",
        strict=True,
        figures=["ap-dataset-comparisons", "ap-forest"],
    )
    figs = {f.id: f for f in r.figures}
    assert set(figs) == {"ap-dataset-comparisons", "ap-forest"}, r.skipped
    pairs = figs["ap-dataset-comparisons"]
    assert "layers+documents" in pairs.caption and "layers" in pairs.caption
    spec = pairs.spec
    assert "code" in spec and "prose" in spec and "web" in spec
    forest = figs["ap-forest"]
    assert "combined interval (layers+documents)" in forest.caption
    prose = _ci(dataset_build, "tiny-prose")["ap_drop"]
    assert json.dumps(prose["ci_low_combined"]) in forest.spec


def test_report_leaves_the_dataset_figure_out_without_pairs(dataset_build, tmp_path):
    from qkwh.reports.render import render

    r = render(
        dataset_build.warehouse,
        out=tmp_path / "report",
        models=["tiny-prose", "other"],
        figures=["ap-dataset-comparisons"],
    )
    [skip] = r.skipped
    assert "two datasets" in skip.reason
