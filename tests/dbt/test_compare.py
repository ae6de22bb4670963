"""`qkwh compare A B`: differences with intervals from the marts, as a table, CSV or JSON."""

from __future__ import annotations

import csv
import io
import json
import shutil

import pytest
from typer.testing import CliRunner

from qkwh import store
from qkwh.cli import app
from qkwh.compare import compare
from qkwh.errors import QkwhError


def _run(*args: str):
    return CliRunner().invoke(app, ["compare", *args])


def test_compare_orients_the_stored_pair_as_a_minus_b(ci_build):
    ab = {r.metric: r for r in compare(ci_build.warehouse, "qwen3-4b", "ministral3-3b")}
    ba = {r.metric: r for r in compare(ci_build.warehouse, "ministral3-3b", "qwen3-4b")}
    assert set(ab) == set(ba) and "ap_drop" in ab
    stored = ci_build.dicts(
        "SELECT * FROM model_comparisons WHERE model_a = 'ministral3-3b' "
        "AND model_b = 'qwen3-4b' AND metric = 'ap_drop'"
    )[0]
    assert ba["ap_drop"].difference == stored["difference"]
    assert (ba["ap_drop"].ci_low, ba["ap_drop"].ci_high) == (stored["ci_low"], stored["ci_high"])
    assert ab["ap_drop"].difference == -stored["difference"]
    assert (ab["ap_drop"].ci_low, ab["ap_drop"].ci_high) == (-stored["ci_high"], -stored["ci_low"])
    assert ab["ap_drop"].verdict == "A > B" and ba["ap_drop"].verdict == "A < B"
    ci = ci_build.dicts(
        "SELECT * FROM model_metric_ci WHERE model_id = 'qwen3-4b' AND metric = 'ap_drop'"
    )[0]
    assert (ab["ap_drop"].estimate_a, ab["ap_drop"].ci_low_a) == (ci["estimate"], ci["ci_low"])
    assert ab["ap_drop"].label_a == "Qwen3 4B"


def test_compare_table_csv_and_json(ci_build):
    wh = str(ci_build.warehouse)
    r = _run("qwen3-4b", "qwen3-8b", "-w", wh)
    assert r.exit_code == 0, r.output
    assert "Qwen3 4B" in r.output and "ap_drop" in r.output and "gauss_gap" in r.output
    assert "A − B" in r.output and "200 replicates" in r.output

    r = _run("qwen3-4b", "qwen3-8b", "-w", wh, "--metric", "ap_drop,gauss_gap", "--format", "csv")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [row["metric"] for row in rows] == ["ap_drop", "gauss_gap"]
    gap = rows[1]
    assert gap["verdict"] == "A > B" and gap["distinguishable"] == "True"
    assert float(gap["ci_low"]) > 0 and float(gap["level"]) == 0.95

    r = _run("qwen3-8b", "qwen3-4b", "-w", wh, "-m", "gauss_gap", "-f", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert len(data) == 1 and data[0]["model_a"] == "qwen3-8b" and data[0]["verdict"] == "A < B"
    assert data[0]["difference"] == pytest.approx(-float(gap["difference"]))


def test_compare_names_unknown_models_and_metrics(ci_build):
    wh = str(ci_build.warehouse)
    r = _run("qwen3-4b", "qwen9-1b", "-w", wh)
    assert r.exit_code == 4
    assert "qwen9-1b" in r.stderr and "ministral3-8b" in r.stderr  # the known models are listed
    r = _run("qwen3-4b", "qwen3-8b", "-w", wh, "-m", "ap_dorp")
    assert r.exit_code == 4 and "ap_dorp" in r.stderr and "ap_drop" in r.stderr
    r = _run("qwen3-4b", "qwen3-8b", "-w", wh, "-f", "xml")
    assert r.exit_code == 2
    with pytest.raises(QkwhError):
        compare(ci_build.warehouse, "qwen3-4b", "qwen3-4b")


def test_compare_without_marts_asks_for_a_build(tmp_path):
    wh = tmp_path / "fresh.duckdb"
    store.connect(wh).close()
    r = _run("a", "b", "-w", str(wh))
    assert r.exit_code == 1
    assert "qkwh build" in r.stderr and "model_comparisons" in r.stderr
    with pytest.raises(QkwhError, match="no warehouse"):
        compare(tmp_path / "missing.duckdb", "a", "b")


def test_compare_sets_ablation_effects_side_by_side(ci_build, tmp_path):
    wh = tmp_path / "ablated.duckdb"
    shutil.copy(ci_build.warehouse, wh)
    before = _run("qwen3-4b", "qwen3-8b", "-w", str(wh))
    assert before.exit_code == 0 and "head ablation" not in before.output  # no runs: no section
    con = store.connect(wh)
    try:
        con.execute("DELETE FROM ablation_effects")
        cols = "(model_id, run_id, metric, rank_order, method, selection_kind, k, length, "
        cols += "mean_logprob, accuracy, diff_random_logprob, distinguishable)"
        for model, run, lp in (("qwen3-4b", "ra", -1.25), ("qwen3-8b", "rb", -2.5)):
            con.execute(
                f"INSERT INTO ablation_effects {cols} VALUES "
                "(?, ?, 'ap_overall', 'lowest', 'mean', 'metric', 4, 512, ?, 0.75, -0.625, ?), "
                "(?, ?, 'ap_overall', 'lowest', 'mean', 'random', 4, 512, -9.0, 0.0, NULL, NULL)",
                [model, run, lp, model == "qwen3-4b", model, run],
            )
        # a setting only A has stays out
        con.execute(
            f"INSERT INTO ablation_effects {cols} VALUES ('qwen3-4b', 'ra', 'bias_strength', "
            "'highest', 'mean', 'metric', 4, 512, -7.5, 0.5, 0.0, false)"
        )
    finally:
        con.close()
    after = _run("qwen3-4b", "qwen3-8b", "-w", str(wh))
    assert after.exit_code == 0, after.output
    # the metric comparison is untouched, the ablation table follows it
    assert after.output.startswith(before.output)
    section = after.output[len(before.output) :]
    assert "head ablation" in section and "ap_overall" in section
    assert "-1.25" in section and "-2.5" in section and "-0.625 *" in section
    assert "bias_strength" not in section and "-9" not in section
    # csv and json keep their shape
    csv_out = _run("qwen3-4b", "qwen3-8b", "-w", str(wh), "-f", "csv")
    assert "head ablation" not in csv_out.stdout
