"""`qkwh demo` never loses data: its own warehouse and report folder by default; in a warehouse
holding other models it adds only the sample models (one model on two datasets) and leaves the
others, and their results, exactly as they were; it refuses (exit 2, nothing written) what it
would otherwise overwrite."""

from __future__ import annotations

import math
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from qkwh import store
from qkwh.demo import SAMPLE_MODEL_ID, SAMPLE_MODEL_IDS, demo_analyses, next_steps, prepare
from tests.conftest import qkwh_cli as cli
from tests.conftest import snapshot, synth_args


@pytest.fixture(autouse=True)
def _qkwh_on_path(monkeypatch):
    """This installation's ``qkwh`` first on $PATH, as in an active virtualenv: the demo then
    suggests plain ``qkwh`` commands, whatever PATH the test run inherited (``make test`` does not
    put the venv on it)."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


def _rows_of(db: Path, model_ids: list[str], *, raw: bool = False) -> dict[str, list]:
    """Every row of every base table with a model_id column that belongs to ``model_ids``,
    sorted (``raw``: as tuples, sorted by their values rounded to 10 significant digits, so that
    rows differing in the last bits of a float still pair up; else as reprs)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        out = {}
        for table in store.tables_with_column(con, "model_id"):
            rows = con.execute(
                f"SELECT * FROM {store.quote_ident(table)} WHERE model_id IN "
                f"(SELECT unnest(?::VARCHAR[]))",
                [model_ids],
            ).fetchall()
            out[table] = (
                sorted(rows, key=lambda r: repr(_rounded(r))) if raw else sorted(map(repr, rows))
            )
        return out
    finally:
        con.close()


def _rounded(value):
    if isinstance(value, float) and math.isfinite(value):
        return float(f"{value:.10g}")
    if isinstance(value, (list, tuple)):
        return type(value)(_rounded(v) for v in value)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def _close(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (
            a == b
            or (math.isnan(a) and math.isnan(b))
            or math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
        )
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    return a == b


def _assert_same_rows(now: dict[str, list], before: dict[str, list]) -> None:
    """The catalog and per-head result tables (written by ingest and compute) must be identical
    row for row.  Tables built by dbt are compared with a relative tolerance of 1e-12: DuckDB's
    parallel floating-point sums (e.g. the means in int_model_pca) can differ in the last bit
    between two builds of the same data."""
    assert now.keys() == before.keys()
    exact = set(store.CATALOG_TABLES) | set(store.COMPUTE_TABLES) | {"current_config"}
    for table, rows in before.items():
        if table in exact:  # reprs: NaN equals NaN, every bit of a float counts
            assert list(map(repr, now[table])) == list(map(repr, rows)), table
        else:
            assert len(now[table]) == len(rows), table
            for x, y in zip(now[table], rows):
                assert _close(x, y), (table, x, y)


@pytest.fixture
def research_warehouse(tmp_path: Path) -> Path:
    """A warehouse with two models of someone's own: one computed, one only ingested."""
    db = tmp_path / "research.duckdb"
    for name, seed in (("synth-a", 1), ("synth-b", 2)):
        data = tmp_path / name
        r = cli(
            *synth_args(str(data), rows=600, seed=seed),
        )
        assert r.exit_code == 0, r.output
        r = cli("ingest", str(data), "--model-id", name, "-w", str(db))
        assert r.exit_code == 0, r.output + r.stderr
    r = cli("compute", "-w", str(db), "-m", "synth-a", "-j", "1")
    assert r.exit_code == 0, r.output + r.stderr
    return db


@pytest.mark.slow
def test_demo_in_a_warehouse_with_other_models_leaves_them_intact(
    research_warehouse: Path, tmp_path: Path
):
    db = research_warehouse
    others = ["synth-a", "synth-b"]
    before = _rows_of(db, others)
    assert before["pca_heads"] and before["head_runs"] and before["files"]  # something to lose
    report = tmp_path / "demo-report"

    r = cli("demo", "-w", str(db), "-o", str(report))
    assert r.exit_code == 0, r.output + r.stderr
    assert "2 other model(s) (synth-a, synth-b)" in r.output

    assert db.is_file()
    after = _rows_of(db, others)
    after_raw = _rows_of(db, others, raw=True)
    # catalog and per-head results of the other models: unchanged, row for row
    for table, rows in before.items():
        assert after[table] == rows, table
    con = duckdb.connect(str(db), read_only=True)
    try:
        models = [m for (m,) in con.execute("SELECT model_id FROM models ORDER BY 1").fetchall()]
        summary = [
            m for (m,) in con.execute("SELECT model_id FROM model_summary ORDER BY 1").fetchall()
        ]
        runs = dict(con.execute("SELECT model_id, count(*) FROM head_runs GROUP BY 1").fetchall())
    finally:
        con.close()
    assert models == ["smollm2-135m", "smollm2-135m-code", "synth-a", "synth-b"]
    assert set(SAMPLE_MODEL_IDS) | {"synth-a"} <= set(summary)
    assert "synth-b" not in runs  # the demo computes the samples' heads only
    # every analysis, the opt-in RoPE bands and document jackknife too, on each sample's 12 heads
    assert demo_analyses() == ("pca", "rotation", "plasticity", "rope", "uncertainty", "reach")
    assert {m: runs[m] for m in SAMPLE_MODEL_IDS} == dict.fromkeys(SAMPLE_MODEL_IDS, 12 * 6)
    # the summary table shows both samples, one row each
    assert [ln.split()[1] for ln in r.output.splitlines() if "│ smollm2-135m" in ln] == list(
        SAMPLE_MODEL_IDS
    )
    assert (report / "index.html").is_file() and (report / "figures.json").is_file()
    assert (tmp_path / "research.dbt" / "target").is_dir()  # dbt wrote next to the warehouse

    # twice: the sample is refreshed in place, the earlier demo report replaced with a note
    r = cli("demo", "-w", str(db), "-o", str(report))
    assert r.exit_code == 0, r.output + r.stderr
    assert "unchanged" in r.output and f"replacing the earlier report in {report}" in r.output
    _assert_same_rows(_rows_of(db, others, raw=True), after_raw)


@pytest.mark.parametrize("sample_id", SAMPLE_MODEL_IDS)
def test_demo_refuses_a_different_model_under_a_sample_id(tmp_path: Path, sample_id: str):
    db = tmp_path / "wh.duckdb"
    data = tmp_path / "mine"
    assert (
        cli(
            *synth_args(str(data), layers=1),
        ).exit_code
        == 0
    )
    assert cli("ingest", str(data), "--model-id", sample_id, "-w", str(db)).exit_code == 0
    before = snapshot(db)
    r = cli("demo", "-w", str(db), "-o", str(tmp_path / "rep"))
    assert r.exit_code == 2
    assert f"model {sample_id!r} that is not the embedded sample" in r.stderr
    assert f"qkwh remove {sample_id}" in r.stderr
    assert snapshot(db) == before
    assert not (tmp_path / "rep").exists()


def test_demo_refuses_a_folder_that_is_not_a_report(tmp_path: Path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "index.html").write_text("my own page")
    db = tmp_path / "wh.duckdb"
    r = cli("demo", "-w", str(db), "-o", str(folder))
    assert r.exit_code == 2 and "holds no qkwh report" in r.stderr
    assert (folder / "index.html").read_text() == "my own page"
    assert not db.exists()


def test_demo_refuses_a_foreign_duckdb_file(tmp_path: Path):
    db = tmp_path / "other.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE accounts AS SELECT 1 AS id")
    con.close()
    before = snapshot(db)
    r = cli("demo", "-w", str(db), "-o", str(tmp_path / "rep"))
    assert r.exit_code == 2 and "without qkwh's tables" in r.stderr
    assert snapshot(db) == before


def test_demo_defaults_to_the_default_warehouse_in_the_working_directory(
    tmp_path: Path, monkeypatch, research_warehouse: Path
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("QKWH_WAREHOUSE", str(research_warehouse))
    plan = prepare()
    assert plan.warehouse == tmp_path / "qkwh.duckdb"  # $QKWH_WAREHOUSE is not the demo's
    assert plan.report_dir == tmp_path / "reports" / "demo"
    assert (plan.other_models, plan.refreshes_sample, plan.replaces_report) == ((), False, False)
    # the commands it suggests then name its warehouse (every command would open $QKWH_WAREHOUSE)
    assert next_steps(plan.warehouse)[1] == "qkwh models -w qkwh.duckdb"
    monkeypatch.delenv("QKWH_WAREHOUSE")
    assert store.resolve_warehouse() == tmp_path / "qkwh.duckdb"
    assert next_steps(plan.warehouse)[0] == "qkwh models"
    # ./qkwh.duckdb holding someone's models: the demo keeps to ./qkwh-demo.duckdb, and says so
    shutil.copy(research_warehouse, tmp_path / "qkwh.duckdb")
    plan = prepare()
    assert plan.warehouse == tmp_path / "qkwh-demo.duckdb"
    assert next_steps(plan.warehouse)[0] == "qkwh models -w qkwh-demo.duckdb"


def test_demo_reuses_the_default_warehouse_when_it_holds_only_the_samples(
    tmp_path: Path, monkeypatch
):
    from qkwh.ingest import ingest
    from qkwh.paths import SAMPLE_DIRS

    monkeypatch.chdir(tmp_path)
    for sample in SAMPLE_DIRS:  # what an earlier demo left
        ingest(str(sample), warehouse=tmp_path / "qkwh.duckdb")
    plan = prepare()
    assert plan.warehouse == tmp_path / "qkwh.duckdb"
    assert (plan.other_models, plan.refreshes_sample) == ((), True)


def _run_as_printed(line: str, cwd: Path) -> None:
    """Run one suggested command line as a shell would (`&&` chains), qkwh through the CLI app."""
    for part in line.split(" && "):
        argv = shlex.split(part)
        if argv[0] == "qkwh":
            r = cli(*argv[1:])
            assert r.exit_code == 0, (part, r.output + r.stderr)
        else:
            r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, (part, r.stdout + r.stderr)
            assert SAMPLE_MODEL_ID in r.stdout


@pytest.mark.slow
def test_after_the_demo_its_suggestions_work_as_printed_in_that_folder(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("QKWH_WAREHOUSE", raising=False)
    r = cli("demo")
    assert r.exit_code == 0, r.output + r.stderr
    assert "duckdb -readonly" not in r.output  # no duckdb command is installed with qkwh
    lines = r.output.split("next, in this folder:\n", 1)[1].splitlines()
    steps = [ln.strip() for ln in lines if ln.startswith("  ")]
    assert steps[0] == "qkwh models" and any("qkwh.open()" in s for s in steps)
    assert "qkwh compare smollm2-135m smollm2-135m-code" in steps  # the two samples' datasets
    assert "qkwh compute -p plasticity.empirical=true && qkwh build && qkwh report" in steps
    for line in steps:
        _run_as_printed(line, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["qkwh.dbt", "qkwh.duckdb", "reports"]
    assert (tmp_path / "reports" / "latest" / "index.html").is_file()


def test_printed_interpreter_is_quoted_when_its_path_has_a_space(monkeypatch, tmp_path: Path):
    """A suggestion that names the interpreter by its path works as printed from a folder whose
    path has a space (a shell would split it otherwise)."""
    import shutil as shutil_mod
    import sys as sys_mod

    from qkwh import demo as demo_mod

    python = tmp_path / "a venv" / "bin" / "python"
    monkeypatch.setattr(sys_mod, "executable", str(python))
    monkeypatch.setattr(shutil_mod, "which", lambda name: None)
    printed = demo_mod._python()
    assert shlex.split(f"{printed} -c pass") == [str(python), "-c", "pass"]
