"""The fixture warehouse for the report tests, built once per test session (the dbt build is the
slow part) through the real pipeline:

* the embedded SmolLM2 sample (registry model, 9 layers: its model values get intervals);
* a small synthetic model ingested with ``--family``/``--label`` (4 layers: fewer than the
  bootstrap's minimum, so its values are drawn without an interval);

both computed with the empirical plasticity estimator, so the Gaussian-vs-empirical figure has
data.  The report is rendered once, with every SQL statement the report layer runs recorded.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import SAMPLE

MODEL = "smollm2-135m"
SYNTH = "synth-4l"
SYNTH_FAMILY = "Synthetic"
SYNTH_LABEL = "Synthetic 4-layer"


@pytest.fixture(scope="session")
def report_warehouse(tmp_path_factory) -> Path:
    from qkwh.build import build
    from qkwh.compute.runner import compute
    from qkwh.ingest import ingest
    from qkwh.params import RunConfig
    from qkwh.synth import write_dataset

    root = tmp_path_factory.mktemp("report-wh")
    db = root / "wh.duckdb"
    ingest(str(SAMPLE), warehouse=db)
    synth = write_dataset(root / SYNTH, n_layers=4, n_q_heads=2, n_kv_heads=1, d=16,
                          rows_per_file=600, seed=5)
    ingest(str(synth), warehouse=db, model_id=SYNTH, family=SYNTH_FAMILY, label=SYNTH_LABEL)
    cfg = RunConfig().with_overrides({"plasticity.empirical": "true"})
    rep = compute(db, workers=1, config=cfg)
    assert rep.failures == [], rep.failures
    build(db, target_dir=root / "dbt-target")
    return db


class RecordingConnection:
    """A DuckDB connection that records (calling module file, SQL) for every statement."""

    def __init__(self, con) -> None:
        self._con = con
        self.log: list[tuple[str, str]] = []

    def _note(self, sql: str) -> None:
        caller = sys._getframe(2).f_code.co_filename  # who called execute / sql
        self.log.append((caller, str(sql)))

    def execute(self, sql, *args, **kw):
        self._note(sql)
        return self._con.execute(sql, *args, **kw)

    def sql(self, sql, *args, **kw):
        self._note(sql)
        return self._con.sql(sql, *args, **kw)

    def __getattr__(self, name):
        return getattr(self._con, name)


@pytest.fixture(scope="session")
def recorded_report(report_warehouse: Path, tmp_path_factory):
    """(ReportResult, [(module file, sql), ...]) of one full render of the fixture warehouse."""
    from qkwh.reports import render as render_mod

    out = tmp_path_factory.mktemp("report") / "latest"
    recorders: list[RecordingConnection] = []
    real_open = render_mod._open

    def recording_open(warehouse):
        rec = RecordingConnection(real_open(warehouse))
        recorders.append(rec)
        return rec

    mp = pytest.MonkeyPatch()
    mp.setattr(render_mod, "_open", recording_open)
    try:
        result = render_mod.render(report_warehouse, out=out, models=None, strict=True)
    finally:
        mp.undo()
    return result, [entry for rec in recorders for entry in rec.log]


@pytest.fixture(scope="session")
def fixture_report(recorded_report):
    return recorded_report[0]
