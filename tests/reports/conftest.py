"""The fixture warehouse for the report tests: the embedded sample ingested, computed and built
once per test session (the dbt build is the slow part), and its report rendered once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SAMPLE

MODEL = "smollm2-135m"


@pytest.fixture(scope="session")
def report_warehouse(tmp_path_factory) -> Path:
    from qkwh.build import build
    from qkwh.compute.runner import compute
    from qkwh.ingest import ingest

    root = tmp_path_factory.mktemp("report-wh")
    db = root / "wh.duckdb"
    ingest(str(SAMPLE), warehouse=db)
    rep = compute(db, workers=1)
    assert rep.failures == [], rep.failures
    build(db, target_dir=root / "dbt-target")
    return db


@pytest.fixture(scope="session")
def fixture_report(report_warehouse: Path, tmp_path_factory):
    from qkwh.reports.render import render

    out = tmp_path_factory.mktemp("report") / "latest"
    return render(report_warehouse, out=out, models=None, strict=True)
