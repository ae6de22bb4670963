"""Staleness is judged from what the marts hold, not from the last full build (issue 23, item 1).

A `qkwh build` killed after it rebuilt head_metrics from another parameter set, followed by a
switch back to the set last fully built, leaves head_metrics on one set and model_summary on the
other: `qkwh status`, `qkwh sql` and `qkwh report` must call the marts stale, and a full build
must make them agree again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qkwh import store
from qkwh.build import build, dbt_work_dir
from qkwh.compute.runner import compute
from qkwh.config import load_run_config
from qkwh.ingest import ingest
from qkwh.runs import resolve, use
from qkwh.status import staleness
from tests.conftest import SAMPLE
from tests.conftest import qkwh_cli as cli

REPO = Path(__file__).resolve().parents[2]
MODEL = "smollm2-135m"


def rows_of(db: Path, sql: str) -> list[tuple]:
    con = store.connect(db, read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def two_sets(tmp_path_factory) -> Path:
    """The sample computed with the defaults (set `base`) and with seed=1 (set `s1`, current)."""
    db = tmp_path_factory.mktemp("mixed") / "wh.duckdb"
    ingest(str(SAMPLE), warehouse=db)
    compute(db, workers=1, name="base")
    compute(
        db, workers=1, name="s1", config=load_run_config(params=["seed=1", "rotation.t_active=0.4"])
    )
    return db


def _build_killed_after(db: Path, node: str) -> None:
    """Run `qkwh build` in a child process and kill -9 it as soon as dbt's log says ``node`` is
    built (`qkwh build` prints a summary; dbt's own lines go to <warehouse>.dbt/logs/dbt.log)."""
    env = {k: v for k, v in os.environ.items() if k != "QKWH_WAREHOUSE"}
    log = dbt_work_dir(db) / "logs" / "dbt.log"
    start = log.stat().st_size if log.exists() else 0  # only what this build writes counts
    proc = subprocess.Popen(
        [sys.executable, "-m", "qkwh.cli", "build", "-w", str(db)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    needle = f"OK created sql table model main.{node} "
    seen = ""
    try:
        deadline = time.monotonic() + 300
        while needle not in seen:  # bounded polling of the log file: the event is its new line
            assert proc.poll() is None, f"the build ended before {node} was built:\n{seen[-2000:]}"
            assert time.monotonic() < deadline, seen[-2000:]
            if log.exists():
                with log.open(encoding="utf-8", errors="replace") as fh:
                    fh.seek(start)
                    seen = fh.read()
            time.sleep(0.02)
        proc.kill()
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(60)


@pytest.mark.slow
def test_interrupted_build_leaves_marts_that_are_told_stale(two_sets: Path, tmp_path: Path):
    db = tmp_path / "wh.duckdb"
    shutil.copy(two_sets, db)
    build(db, target_dir=tmp_path / "target")  # every mart from s1
    con = store.connect(db, read_only=True)
    ids = {name: resolve(con, name)["rotation"] for name in ("base", "s1")}
    assert not staleness(con).stale
    con.close()

    use(db, "base")
    _build_killed_after(db, "head_metrics")  # head_metrics from base, model_summary still from s1
    use(db, "s1")  # back to the set of the last full build

    held = {
        table: {r[0] for r in rows_of(db, f"SELECT DISTINCT config_id_rotation FROM {table}")}
        for table in ("head_metrics", "model_summary")
    }
    assert held == {"head_metrics": {ids["base"]}, "model_summary": {ids["s1"]}}  # mixed, really

    con = store.connect(db, read_only=True)
    st = staleness(con)
    con.close()
    assert st.stale and MODEL in st.changed
    r = cli("status", "-w", str(db))
    assert r.exit_code == 0, r.output
    assert "up to date" not in r.stdout and "stale" in r.stdout and "qkwh build" in r.stderr
    r = cli("sql", "SELECT count(*) FROM model_summary", "-w", str(db))
    assert r.exit_code == 0 and "marts are stale" in r.stderr
    r = cli("sql", "SELECT count(*) FROM head_metrics", "-w", str(db))
    assert r.exit_code == 0 and "marts are stale" in r.stderr

    build(db, target_dir=tmp_path / "target")
    held = {
        table: {r[0] for r in rows_of(db, f"SELECT DISTINCT config_id_rotation FROM {table}")}
        for table in ("head_metrics", "model_summary")
    }
    assert held == {"head_metrics": {ids["s1"]}, "model_summary": {ids["s1"]}}
    con = store.connect(db, read_only=True)
    assert not staleness(con).stale
    con.close()
    r = cli("status", "-w", str(db))
    assert "up to date" in r.stdout and "stale" not in r.stderr


def test_a_build_whose_inputs_changed_before_dbt_ran_gets_unknown_inputs(
    two_sets: Path, tmp_path: Path
):
    """Another process writing between the build's record and dbt taking the file: the tables of
    that build may hold either state, so the build's inputs become unknown (its tables stale)."""
    from qkwh.status import finish_build, start_build

    db = tmp_path / "wh.duckdb"
    shutil.copy(two_sets, db)
    con = store.connect(db)
    try:
        unchanged = start_build(con)
        con.execute(
            "INSERT INTO mart_relations VALUES ('model_summary', ?)", [unchanged]
        )  # as dbt does
        finish_build(con, unchanged)
        changed = start_build(con)
        con.execute("INSERT INTO mart_relations VALUES ('head_metrics', ?)", [changed])
    finally:
        con.close()
    use(db, "base")  # s1 was current when the build was recorded
    con = store.connect(db)
    try:
        finish_build(con, changed)
        rows = dict(
            con.execute(
                "SELECT build_id, inputs_json FROM mart_builds WHERE NOT running"
            ).fetchall()
        )
    finally:
        con.close()
    assert rows[changed] == "null" and MODEL in rows[unchanged]
