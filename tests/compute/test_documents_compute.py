"""The document-group jackknife through `qkwh compute --documents`: opt-in, stored per head and
group, bit-identical across worker counts, and each leave-group-out value equal to a fresh
compute of the same model captured without that group's examples."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from qkwh import store
from qkwh.analyses import jackknife, registry
from qkwh.cli import app
from qkwh.sniffed.reader import read_file
from qkwh.sniffed.writer import write_vectors_file
from tests.conftest import SMALL_SYNTH
from tests.conftest import qkwh_ok as cli

G = 4
EXHAUSTIVE = ["-p", "plasticity.pairs=exhaustive"]
TABLES = ("plasticity_buckets_jackknife", "head_jackknife")


def rows(db: Path, sql: str) -> list[tuple]:
    con = store.connect(db, read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A small synthetic model whose documents differ (doc_spread), 16 examples."""
    out = tmp_path_factory.mktemp("jk") / "synth"
    cli("synth", str(out), *SMALL_SYNTH, "--set", "doc_spread=0.5")
    return out


@pytest.fixture(scope="module")
def computed(data: Path, tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("jkwh") / "wh.duckdb"
    cli("ingest", str(data), "--model-id", "synth-a", "-w", str(db))
    cli("compute", "-w", str(db), "-j", "1", "--documents", str(G), *EXHAUSTIVE)
    return db


def test_documents_adds_the_jackknife_with_g_groups(computed: Path):
    params = dict(rows(computed, "SELECT analysis, params_json FROM run_config"))
    assert set(params) == {"pca", "rotation", "plasticity", "reach", "uncertainty"}
    assert json.loads(params["uncertainty"])["uncertainty"]["document_groups"] == G
    heads = rows(computed, "SELECT count(*) FROM heads")[0][0]
    per_group = rows(
        computed,
        "SELECT doc_group, count(DISTINCT (layer, q_head)) FROM head_jackknife GROUP BY 1 ORDER BY 1",
    )
    assert per_group == [(g, heads) for g in range(G)]
    metrics = rows(computed, "SELECT DISTINCT metric FROM head_jackknife")
    expected = {m for a in ("pca", "rotation", "plasticity") for m in _metrics(a)}
    assert {m for (m,) in metrics} == expected
    n = rows(computed, "SELECT count(*) FROM plasticity_buckets_jackknife WHERE q_bucket < 0")
    assert n == [(0,)]  # 16 examples: no group is empty


def _metrics(analysis: str) -> tuple[str, ...]:
    return jackknife.metric_columns(registry.get(analysis))


@pytest.mark.slow
def test_without_documents_the_jackknife_is_not_computed(data: Path, tmp_path: Path):
    db = tmp_path / "wh.duckdb"
    cli("ingest", str(data), "--model-id", "synth-a", "-w", str(db))
    cli("compute", "-w", str(db), "-j", "1", "-a", "pca")
    assert rows(db, "SELECT count(*) FROM head_jackknife") == [(0,)]
    r = cli("compute", "-w", str(db), "-j", "1", "-a", "pca", "--documents")  # G defaults to 10
    assert "warning" not in r.stderr  # 16 documents fill 10 groups
    params = dict(rows(db, "SELECT analysis, params_json FROM run_config"))
    assert json.loads(params["uncertainty"])["uncertainty"]["document_groups"] == 10
    assert rows(db, "SELECT count(DISTINCT doc_group) FROM head_jackknife") == [(10,)]


@pytest.mark.slow
def test_more_groups_than_documents_warns_and_still_computes(data: Path, tmp_path: Path):
    db = tmp_path / "wh.duckdb"
    cli("ingest", str(data), "--model-id", "synth-a", "-w", str(db))
    r = cli("compute", "-w", str(db), "-j", "1", "-a", "pca", "--documents", "20")
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, r.stderr
    assert "'synth-a' holds 16 document(s)" in warnings[0] and "document_groups=20" in warnings[0]
    assert "at least 4 group(s) stay empty" in warnings[0]
    assert rows(
        db, "SELECT count(DISTINCT doc_group) FROM head_jackknife WHERE metric <> 'no_rows'"
    ) == [(16,)]


def test_document_groups_below_two_are_refused(data: Path, tmp_path: Path):
    db = tmp_path / "wh.duckdb"
    cli("ingest", str(data), "--model-id", "synth-a", "-w", str(db))
    r = CliRunner().invoke(app, ["compute", "-w", str(db), "--documents", "1"])
    assert r.exit_code == 2, r.output + r.stderr
    assert "document_groups" in r.stderr
    assert rows(db, "SELECT count(*) FROM head_runs") == [(0,)]


@pytest.mark.slow
def test_two_workers_write_the_same_rows(data: Path, computed: Path, tmp_path: Path):
    db = tmp_path / "wh2.duckdb"
    cli("ingest", str(data), "--model-id", "synth-a", "-w", str(db))
    cli("compute", "-w", str(db), "-j", "2", "--documents", str(G), *EXHAUSTIVE)
    for table in TABLES:
        sql = f"SELECT * EXCLUDE (config_id) FROM {table} ORDER BY ALL"
        one, two = rows(computed, sql), rows(db, sql)
        assert len(one) > 0
        assert repr(one) == repr(two), table  # repr: NaN == NaN, and every bit of every float


def _without_group(src: Path, dst: Path, group: int) -> None:
    """A copy of the capture ``src`` with the rows of document group ``group`` left out."""
    shutil.copytree(src, dst)
    for path in sorted(dst.glob("*/data.parquet")):
        f = read_file(path)
        keep = np.asarray(f.example_id) % G != group
        write_vectors_file(
            path,
            position=np.asarray(f.position)[keep],
            example_id=np.asarray(f.example_id)[keep],
            bucket=np.asarray(f.bucket)[keep],
            vectors=np.asarray(f.vectors)[keep],
        )


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return a == b or (math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("group", [0, 3])
def test_a_leave_group_out_value_is_a_fresh_compute_without_the_group(
    data: Path, computed: Path, tmp_path: Path, group: int
):
    cut, db = tmp_path / "cut", tmp_path / "cut.duckdb"
    _without_group(data, cut, group)
    cli("ingest", str(cut), "--model-id", "synth-cut", "-w", str(db))
    cli("compute", "-w", str(db), "-j", "1", *EXHAUSTIVE)
    cols = ", ".join(("q_bucket", *jackknife.BUCKET_COLUMNS))
    fresh = rows(db, f"SELECT layer, q_head, {cols} FROM plasticity_buckets ORDER BY ALL")
    mine = rows(
        computed,
        f"SELECT layer, q_head, {cols} FROM plasticity_buckets_jackknife "
        f"WHERE doc_group = {group} ORDER BY ALL",
    )
    assert len(mine) == len(fresh) > 0
    for m, f in zip(mine, fresh):
        assert all(_same(x, y) for x, y in zip(m, f)), (m, f)
    # the head-level scalars, unpivoted
    got = {
        (layer, q_head, metric): value
        for layer, q_head, metric, value in rows(
            computed,
            f"SELECT layer, q_head, metric, value FROM head_jackknife WHERE doc_group = {group}",
        )
    }
    n = 0
    for analysis in ("pca", "rotation", "plasticity"):
        names = _metrics(analysis)
        table = registry.get(analysis).head_table.name
        for layer, q_head, *values in rows(
            db, f"SELECT layer, q_head, {', '.join(names)} FROM {table}"
        ):
            for name, value in zip(names, values):
                want = None if value is None else float(value)
                assert _same(got[(layer, q_head, name)], want), (analysis, name)
                n += 1
    assert n == len(got)


def test_the_sql_function_returns_the_stored_rows(computed: Path):
    """`qkwh_uncertainty(head)` (qkwh.udf) gives the rows compute stored, value for value."""
    import duckdb

    from qkwh import udf
    from qkwh.config import load_run_config

    config = load_run_config(
        params=[f"uncertainty.document_groups={G}", "plasticity.pairs=exhaustive"]
    )
    con = duckdb.connect(str(computed), read_only=True)
    try:
        udf.register(con, config)
        got = con.execute(
            "SELECT layer, q_head, qkwh_uncertainty(h) FROM head_inputs('synth-a') AS h"
        ).fetchall()
    finally:
        con.close()
    sql_rows = sorted(
        (layer, q_head, r["doc_group"], r["metric"], r["value"])
        for layer, q_head, s in got
        for r in s["metrics"]
    )
    stored = rows(
        computed,
        "SELECT layer, q_head, doc_group, metric, value FROM head_jackknife ORDER BY ALL",
    )
    assert len(sql_rows) == len(stored) > 0
    assert repr(sql_rows) == repr(sorted(stored))
    sql_buckets = sorted(
        (layer, q_head, r["q_bucket"], r["doc_group"], r["ap_bucket"], r["n_queries"])
        for layer, q_head, s in got
        for r in s["buckets"]
    )
    stored = rows(
        computed,
        "SELECT layer, q_head, q_bucket, doc_group, ap_bucket, n_queries "
        "FROM plasticity_buckets_jackknife ORDER BY ALL",
    )
    assert repr(sql_buckets) == repr(sorted(stored))


def test_a_second_run_resumes_with_nothing_to_do(computed: Path, tmp_path: Path):
    from qkwh.compute.runner import compute
    from qkwh.config import load_run_config

    db = tmp_path / "again.duckdb"
    shutil.copy(computed, db)
    config = load_run_config(
        params=[f"uncertainty.document_groups={G}", "plasticity.pairs=exhaustive"]
    )
    report = compute(db, workers=1, analyses=("uncertainty",), config=config)
    assert report.n_written == 0 and report.n_skipped > 0
