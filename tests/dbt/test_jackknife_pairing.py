"""The document jackknife is paired with the parameter set it was computed with: after plasticity
is recomputed with other parameters, the marts show no document term for that model (instead of
the old set's document error beside the new estimate)."""

from __future__ import annotations

import json

import dataset_data as dd
import pytest

from qkwh import store
from qkwh.analyses import registry
from qkwh.build import build
from qkwh.params import RunConfig
from tests.dbt.conftest import Built, _quiet

DIAG = "cfg-pl-diag"


@pytest.fixture(scope="module")
def recomputed_build(build_root) -> Built:
    wh = build_root / "jk-pairing" / "qkwh.duckdb"
    wh.parent.mkdir(parents=True, exist_ok=True)
    con = store.connect(wh)
    try:
        dd.fill(con)
        # the jackknife recorded what it used, as compute does (keys sorted): plasticity with
        # cov_mode=full
        jk_params = RunConfig().analysis_params("uncertainty")
        assert jk_params["plasticity"]["cov_mode"] == "full"
        con.execute(
            "UPDATE run_config SET params_json = ? WHERE config_id = ?",
            [
                json.dumps({**jk_params, "uncertainty": {"document_groups": dd.G}}, sort_keys=True),
                dd.JK_CONFIG,
            ],
        )
        # then `compute -a plasticity -p cov_mode=diag` on tiny-code: a new current plasticity set
        diag = RunConfig.from_dict({"plasticity": {"cov_mode": "diag"}})
        con.execute(
            "INSERT INTO run_config (config_id, analysis, code_version, params_json, created_at) "
            "VALUES (?, 'plasticity', 'test', ?, now()::timestamp)",
            [DIAG, json.dumps(diag.analysis_params("plasticity"), sort_keys=True)],
        )
        for table in registry.get("plasticity").table_names:
            con.execute(f"UPDATE {table} SET config_id = ? WHERE model_id = 'tiny-code'", [DIAG])
        con.execute(
            "UPDATE current_config SET config_id = ? "
            "WHERE model_id = 'tiny-code' AND analysis = 'plasticity'",
            [DIAG],
        )
    finally:
        con.close()
    mp = pytest.MonkeyPatch()
    mp.setenv("DBT_INDIRECT_SELECTION", "cautious")  # only the tests of the selected models
    try:
        res = build(
            wh,
            select="+model_metric_ci",
            target_dir=build_root / "jk-pairing" / "target",
            log_sink=_quiet,
            dbt_vars=dd.VARS,
        )
    finally:
        mp.undo()
    return Built(wh, res)


def _se_documents(built: Built, model_id: str) -> dict[str, float | None]:
    return {
        r["metric"]: r["se_documents"]
        for r in built.dicts(
            "SELECT metric, se_documents FROM model_metric_ci WHERE model_id = ?", [model_id]
        )
    }


def test_a_jackknife_of_another_plasticity_set_gives_no_document_term(recomputed_build):
    code = _se_documents(recomputed_build, "tiny-code")
    assert code["ap_drop"] is None and code["bias_strength"] is None
    assert all(v is None for v in code.values()), {k: v for k, v in code.items() if v is not None}
    staged = recomputed_build.query(
        "SELECT count(*) FROM staging.stg_plasticity_buckets_jackknife WHERE model_id = 'tiny-code'"
    )
    assert staged == [(0,)]


def test_a_jackknife_of_the_current_sets_keeps_its_document_term(recomputed_build):
    prose = _se_documents(recomputed_build, "tiny-prose")
    expected = dd.expected_se_documents(dd.PROSE)
    for metric, se_doc in expected.items():
        assert prose[metric] == pytest.approx(se_doc, rel=1e-9), metric
