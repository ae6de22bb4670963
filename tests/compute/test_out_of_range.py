"""A model whose rows reach past its context length (an older qkwh only warned at ingest) is left
out of `qkwh compute` with a warning naming it; the other models are computed as usual, so its
impossible buckets (bucket_frac > 1) never reach the marts and cannot fail the others' build."""

from __future__ import annotations

import shutil
from pathlib import Path

from typer.testing import CliRunner

from qkwh import store
from qkwh.cli import app
from qkwh.ingest import ingest
from tests.conftest import SAMPLE

runner = CliRunner()


def _warehouse(tmp_path: Path) -> Path:
    db = tmp_path / "wh.duckdb"
    for model_id in ("good", "old"):
        data = tmp_path / model_id
        shutil.copytree(SAMPLE, data)
        ingest(str(data), warehouse=db, model_id=model_id)
    # what an older ingest let through: positions at or beyond the context length
    con = store.connect(db)
    try:
        ctx = con.execute("SELECT context_length FROM models WHERE model_id = 'old'").fetchone()[0]
        con.execute(
            "UPDATE files SET max_position = ? WHERE model_id = 'old' AND layer = 1", [ctx + 99]
        )
    finally:
        con.close()
    return db


def _computed(db: Path) -> set[str]:
    con = store.connect(db, read_only=True)
    try:
        return {m for (m,) in con.execute("SELECT DISTINCT model_id FROM head_runs").fetchall()}
    finally:
        con.close()


def test_a_model_with_rows_beyond_the_context_is_left_out_and_the_others_computed(tmp_path):
    db = _warehouse(tmp_path)
    r = runner.invoke(app, ["compute", "-w", str(db), "-a", "pca", "-j", "1"])
    assert r.exit_code == 0, r.output + r.stderr
    assert "model 'old' is left out" in r.stderr and "qkwh remove old" in r.stderr
    assert _computed(db) == {"good"}


def test_asking_only_for_such_a_model_is_bad_input(tmp_path):
    db = _warehouse(tmp_path)
    r = runner.invoke(app, ["compute", "-w", str(db), "-m", "old", "-a", "pca", "-j", "1"])
    assert r.exit_code == 2
    assert "nothing to compute" in r.stderr and "context length" in r.stderr
    assert _computed(db) == set()
