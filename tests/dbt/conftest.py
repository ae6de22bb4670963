"""Shared, session-scoped dbt builds for the build/export tests (dbt runs cost ~30-45 s each).

* ``empty_build``     - schema only: every mart builds (0 rows) and every test passes
* ``synthetic_build`` - the hand-made models of synthetic_marts.BASE_MODELS
* ``extended_build``  - a copy of the synthetic warehouse plus one more model, rebuilt
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import duckdb
import interval_data
import pytest
import synthetic_marts as sm

from qkwh import store
from qkwh.build import BuildResult, build


@dataclass
class Built:
    warehouse: Path
    result: BuildResult
    notes: dict | None = None

    def query(self, sql: str, params: list | None = None) -> list[tuple]:
        con = duckdb.connect(str(self.warehouse), read_only=True)
        try:
            return con.execute(sql, params or []).fetchall()
        finally:
            con.close()

    def dicts(self, sql: str, params: list | None = None) -> list[dict]:
        con = duckdb.connect(str(self.warehouse), read_only=True)
        try:
            cur = con.execute(sql, params or [])
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, row)) for row in cur.fetchall()]
        finally:
            con.close()


def _quiet(_msg: str) -> None:
    pass


def _new_warehouse(path: Path, specs: list[sm.ModelSpec]) -> Path:
    con = store.connect(path)
    try:
        sm.fill(con, specs)
    finally:
        con.close()
    return path


@pytest.fixture(scope="session")
def build_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("dbt_build")


@pytest.fixture(scope="session")
def empty_build(build_root: Path) -> Built:
    wh = _new_warehouse(build_root / "empty" / "qkwh.duckdb", [])
    res = build(wh, target_dir=build_root / "empty" / "target", log_sink=_quiet, unit_tests=True)
    return Built(wh, res)


@pytest.fixture(scope="session")
def synthetic_build(build_root: Path) -> Built:
    wh = _new_warehouse(build_root / "synthetic" / "qkwh.duckdb", sm.BASE_MODELS)
    res = build(
        wh, target_dir=build_root / "synthetic" / "target", log_sink=_quiet, unit_tests=True
    )
    return Built(wh, res)


@pytest.fixture(scope="session")
def extended_build(build_root: Path, synthetic_build: Built) -> Built:
    """The synthetic warehouse, copied under another file name, plus EXTRA_MODEL, rebuilt."""
    wh = build_root / "extended" / "other_name.duckdb"
    wh.parent.mkdir(parents=True)
    shutil.copy(synthetic_build.warehouse, wh)
    con = store.connect(wh)
    try:
        # views must survive the rename (DuckDB names the catalog after the file stem)
        notes = {
            "stg_models_rows_after_copy": con.execute(
                "SELECT count(*) FROM staging.stg_models"
            ).fetchall()[0][0]
        }
        sm.fill(con, [sm.EXTRA_MODEL], with_run_config=False)
    finally:
        con.close()
    res = build(wh, target_dir=build_root / "extended" / "target", log_sink=_quiet)
    return Built(wh, res, notes)


@pytest.fixture(scope="session")
def real_build(build_root: Path) -> Built:
    """The embedded SmolLM2 sample through the real pipeline: ingest, compute, build."""
    compute_mod = pytest.importorskip("qkwh.compute.runner")
    from qkwh.ingest import ingest
    from qkwh.paths import SAMPLE_DIR

    wh = build_root / "real" / "qkwh.duckdb"
    ingest(str(SAMPLE_DIR), warehouse=wh)
    report = compute_mod.compute(wh, workers=1)
    assert not report.failures, report.failures[:3]
    res = build(wh, target_dir=build_root / "real" / "target", log_sink=_quiet)
    return Built(wh, res, {"heads_computed": report.n_written})


# ------------------------------------------------------------------------------------------
# warehouses for the interval marts
# ------------------------------------------------------------------------------------------

from interval_data import CI_VARS, SIM_BOOT, SIM_HEADS_PER_LAYER, SIM_LAYERS, SIM_MODELS  # noqa: E402


@pytest.fixture(scope="session")
def ci_build(build_root: Path) -> Built:
    """Five registry models with benchmark scores, heads over 8 layers and the empirical
    estimator (interval_data.CI_MODELS), built with n_boot = 200."""
    wh = build_root / "ci" / "qkwh.duckdb"
    con = store.connect(wh)
    try:
        interval_data.fill_ci(con)
    finally:
        con.close()
    res = build(wh, target_dir=build_root / "ci" / "target", log_sink=_quiet, dbt_vars=CI_VARS)
    return Built(wh, res)


@pytest.fixture(scope="session")
def simulation_build(build_root: Path) -> Built:
    """SIM_MODELS models with a known mean per model (interval_data.simulated_rows), built up to
    model_metric_ci with n_boot = SIM_BOOT.  notes['truth'] = {model_id: (mu_bias, mu_sep)}."""
    wh = build_root / "sim" / "qkwh.duckdb"
    con = store.connect(wh)
    try:
        truth = interval_data.fill_simulated(
            con, SIM_MODELS, SIM_LAYERS, SIM_HEADS_PER_LAYER, seed=7
        )
    finally:
        con.close()
    # cautious: only tests whose every parent is selected (not the relationship tests of
    # unselected marts that point at a selected staging view)
    mp = pytest.MonkeyPatch()
    mp.setenv("DBT_INDIRECT_SELECTION", "cautious")
    try:
        res = build(
            wh,
            select="+model_metric_ci",
            target_dir=build_root / "sim" / "target",
            log_sink=_quiet,
            dbt_vars={"n_boot": SIM_BOOT},
        )
    finally:
        mp.undo()
    return Built(wh, res, {"truth": truth})
