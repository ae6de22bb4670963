"""Parameter sets kept side by side: config_id in every per-head key, one current set per (model,
analysis) for the marts, `qkwh runs` (list, use, drop, diff), `compute --name`, partial sets
flagged, stale marts told, old warehouses migrated with their rows."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from qkwh import store
from qkwh.build import build
from qkwh.cli import app
from qkwh.compute.runner import compute, compute_lock
from qkwh.config import load_run_config
from qkwh.errors import InputError, NotFoundError, WarehouseLockedError
from qkwh.ingest import ingest
from qkwh.runs import drop, list_sets, resolve, use
from qkwh.status import staleness
from tests.conftest import SAMPLE
from tests.conftest import qkwh_cli as cli

runner = CliRunner()
MODEL = "smollm2-135m"
N_HEADS = 12
PER_HEAD = (
    "pca_components",
    "pca_heads",
    "pca_axes",
    "rotation_heads",
    "rotation_pairs",
    "rotation_axes",
    "plasticity_heads",
    "plasticity_buckets",
    "plasticity_heatmap",
    "plasticity_components",
)
SEED1 = ["seed=1", "rotation.t_active=0.4"]


def rows_of(db: Path, sql: str, params=()) -> list[tuple]:
    con = store.connect(db, read_only=True)
    try:
        return con.execute(sql, list(params)).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def two_sets(tmp_path_factory) -> Path:
    """The sample computed with the defaults (set `base`), then with seed=1 and another t_active
    (set `s1`, made current)."""
    db = tmp_path_factory.mktemp("sets") / "wh.duckdb"
    ingest(str(SAMPLE), warehouse=db)
    assert compute(db, workers=1, name="base").n_written == N_HEADS
    assert (
        compute(db, workers=1, name="s1", config=load_run_config(params=SEED1)).n_written == N_HEADS
    )
    return db


def _copy(db: Path, tmp_path: Path, name: str = "copy.duckdb") -> Path:
    dst = tmp_path / name
    shutil.copy(db, dst)
    return dst


def test_second_set_keeps_the_first_sets_rows(two_sets: Path):
    for table in PER_HEAD:
        per_set = dict(
            rows_of(
                two_sets,
                f"SELECT config_id, count(DISTINCT (layer, q_head)) FROM {table} GROUP BY 1",
            )
        )
        assert sorted(per_set.values()) == [N_HEADS, N_HEADS], table
    runs = rows_of(two_sets, "SELECT analysis, count(*) FROM head_runs GROUP BY 1 ORDER BY 1")
    assert runs == [(a, 2 * N_HEADS) for a in ("pca", "plasticity", "reach", "rotation")]
    con = store.connect(two_sets, read_only=True)
    ids = resolve(con, "s1")
    current = dict(con.execute("SELECT analysis, config_id FROM current_config").fetchall())
    assert current == ids  # the set computed last is current
    sets = list_sets(con)
    con.close()
    assert {(s.analysis, s.name, s.is_current, s.n_heads, s.partial) for s in sets} == {
        (a, n, n == "s1", N_HEADS, False)
        for a in ("pca", "rotation", "plasticity", "reach")
        for n in ("base", "s1")
    }
    # every key of every per-head table holds config_id
    keys = rows_of(
        two_sets,
        "SELECT table_name, constraint_column_names FROM duckdb_constraints() "
        "WHERE constraint_type = 'PRIMARY KEY'",
    )
    for table, cols in keys:
        if table in PER_HEAD or table == "head_runs":
            assert "config_id" in cols, table


def test_rerun_of_a_set_recomputes_nothing_and_a_named_set_keeps_its_parameters(
    two_sets: Path, tmp_path: Path
):
    db = _copy(two_sets, tmp_path)
    before = rows_of(db, "SELECT * FROM rotation_heads ORDER BY ALL")
    assert compute(db, workers=1).n_written == 0  # the defaults = set base, already complete
    r = cli("compute", "-w", str(db), "-j", "1", "--name", "s1")  # no -p: s1's own parameters
    assert r.exit_code == 0, r.output
    assert "computed 0 head(s)" in r.stdout and "set s1" in r.stdout
    assert rows_of(db, "SELECT * FROM rotation_heads ORDER BY ALL") == before
    # a name labels one set per analysis: other parameters under it are refused, nothing written
    r = cli("compute", "-w", str(db), "-j", "1", "--name", "s1", "-p", "seed=7")
    assert r.exit_code == 2 and "already labels another" in r.stderr
    assert rows_of(
        db, "SELECT count(*) FROM run_config WHERE params_json LIKE '%\"seed\": 7%'"
    ) == [(0,)]
    r = cli("compute", "-w", str(db), "-j", "1", "--name", "bad name!")
    assert r.exit_code == 2 and "parameter-set name" in r.stderr


def test_keep_current_computes_beside_the_current_set(two_sets: Path, tmp_path: Path):
    db = _copy(two_sets, tmp_path)
    before = rows_of(db, "SELECT analysis, config_id FROM current_config ORDER BY 1")
    report = compute(
        db,
        workers=1,
        analyses=("pca",),
        name="s2",
        make_current=False,
        config=load_run_config(params=["seed=2"]),
    )
    assert report.n_written == N_HEADS
    assert rows_of(db, "SELECT analysis, config_id FROM current_config ORDER BY 1") == before
    assert rows_of(db, "SELECT count(DISTINCT config_id) FROM pca_heads") == [(3,)]


def test_use_and_drop(two_sets: Path, tmp_path: Path):
    db = _copy(two_sets, tmp_path)
    con = store.connect(db, read_only=True)
    base = resolve(con, "base")
    assert resolve(con, base["pca"][:6]) == {"pca": base["pca"]}  # a unique prefix
    con.close()
    with pytest.raises(NotFoundError, match="no parameter set 'nope'"):
        use(db, "nope")
    # the current set cannot be dropped: the marts read it
    with pytest.raises(InputError, match="current set"):
        drop(db, "s1")
    r = cli("runs", "drop", "base", "-w", str(db))  # not interactive, no --yes
    assert r.exit_code == 2 and "--yes" in r.stderr
    assert rows_of(db, "SELECT count(*) FROM pca_heads WHERE config_id = ?", [base["pca"]]) == [
        (N_HEADS,)
    ]
    made = use(db, "base")
    assert sorted(made) == sorted((MODEL, a, c) for a, c in base.items())
    assert dict(rows_of(db, "SELECT analysis, config_id FROM current_config")) == base
    r = cli("runs", "drop", "s1", "--yes", "-w", str(db))
    assert r.exit_code == 0, r.output
    for table in PER_HEAD + ("head_runs",):
        ids = {c for (c,) in rows_of(db, f"SELECT DISTINCT config_id FROM {table}")}
        assert ids and ids <= set(base.values()), table
    assert rows_of(db, "SELECT count(*) FROM run_config WHERE name = 's1'") == [(0,)]
    r = cli("runs", "-w", str(db))
    assert r.exit_code == 0 and "base" in r.stdout and "s1" not in r.stdout


def test_runs_diff_lists_the_parameters_that_differ(two_sets: Path):
    r = CliRunner().invoke(
        app, ["runs", "diff", "base", "s1", "-w", str(two_sets)], terminal_width=200
    )
    assert r.exit_code == 0, r.output
    assert "rotation.t_active" in r.stdout and "0.3" in r.stdout and "0.4" in r.stdout
    assert "seed" in r.stdout and "plasticity.cov_mode" not in r.stdout


@pytest.mark.slow  # five dbt builds
def test_each_set_gets_its_own_correct_marts_and_stale_marts_are_told(
    two_sets: Path, tmp_path: Path
):
    """Marts of set s1 (current) equal those of a warehouse that only ever held s1; `runs use base`
    makes them stale (status, sql, report say so); rebuilt, they equal a warehouse holding only
    base.  One model never mixes the two sets."""
    db = _copy(two_sets, tmp_path)
    only = {}
    for name, params in (("base", []), ("s1", SEED1)):
        single = tmp_path / f"only-{name}.duckdb"
        ingest(str(SAMPLE), warehouse=single)
        compute(single, workers=1, config=load_run_config(params=params))
        build(single, target_dir=tmp_path / f"target-{name}")
        only[name] = single
    summary = (
        "SELECT n_heads_rotation, bias_strength, separation_strength, n_active_pairs, abs_r_k_0, "
        "ap_overall, partial_analyses FROM model_summary"
    )
    heads = "SELECT layer, q_head, bias_strength, n_active_pairs, ap_overall FROM head_metrics ORDER BY ALL"

    build(db, target_dir=tmp_path / "target")
    assert rows_of(db, summary) == rows_of(only["s1"], summary)
    assert rows_of(db, heads) == rows_of(only["s1"], heads)
    assert rows_of(db, summary) != rows_of(only["base"], summary)
    r = cli("status", "-w", str(db))
    assert r.exit_code == 0 and "up to date" in r.stdout and "stale" not in r.stderr

    use(db, "base")
    con = store.connect(db, read_only=True)
    st = staleness(con)
    con.close()
    assert st.stale and st.changed == (MODEL,)
    r = cli("status", "-w", str(db))
    assert "stale" in r.stdout and "qkwh build" in r.stderr
    r = cli("sql", "SELECT count(*) FROM model_summary", "-w", str(db))
    assert r.exit_code == 0 and "marts are stale" in r.stderr
    r = cli("sql", "SELECT count(*) FROM rotation_heads", "-w", str(db))  # not a mart: no warning
    assert r.exit_code == 0 and "stale" not in r.stderr

    build(db, target_dir=tmp_path / "target")
    assert rows_of(db, summary) == rows_of(only["base"], summary)
    assert rows_of(db, heads) == rows_of(only["base"], heads)
    con = store.connect(db, read_only=True)
    assert not staleness(con).stale
    con.close()


@pytest.mark.slow  # two dbt builds and a report
def test_partial_set_is_flagged(two_sets: Path, tmp_path: Path, monkeypatch):
    """A compute with new parameters interrupted after its first batch: the new set is current
    but covers only some heads; status, report and model_summary say so."""
    db = _copy(two_sets, tmp_path)
    build(db, target_dir=tmp_path / "target")
    real = store.insert_head_runs
    calls = {"n": 0}

    def interrupting(con, runs, computed_at):
        # head_runs is a batch's last insert: stop at the second batch's (the first batch holds
        # one head), whatever the number of result tables per head
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(con, runs, computed_at)

    monkeypatch.setattr(store, "insert_head_runs", interrupting)
    with pytest.raises(KeyboardInterrupt):
        compute(db, workers=1, config=load_run_config(params=["seed=3"]), name="s3")
    monkeypatch.setattr(store, "insert_head_runs", real)
    con = store.connect(db, read_only=True)
    s3 = {s.analysis: s for s in list_sets(con) if s.name == "s3"}
    con.close()
    assert set(s3) == {"pca", "rotation", "plasticity", "reach"}
    n = s3["pca"].n_heads
    assert 0 < n < N_HEADS and all(
        s.partial and s.is_current and s.n_analysable == N_HEADS for s in s3.values()
    )

    r = cli("status", "-w", str(db))
    assert f"{n}/{N_HEADS} PARTIAL" in r.stdout
    assert f"covers {n} of {N_HEADS} heads (partial" in r.stderr

    # the report warns (stale marts and the partial set) before drawing
    import qkwh.reports.render as render_mod

    drawn = {}

    def fake_render(wh, out=None, models=None, **kw):
        drawn["called"] = True
        raise NotFoundError("stop here")

    monkeypatch.setattr(render_mod, "render", fake_render)
    r = cli("report", "-w", str(db), "-o", str(tmp_path / "rep"))
    assert drawn and "marts are stale" in r.stderr and "partial" in r.stderr
    # --build rebuilds the stale marts first; the partial set is still told
    r = cli("report", "--build", "-w", str(db), "-o", str(tmp_path / "rep"))
    assert "rebuilding" in r.stderr and "dbt build ok" in r.stdout
    assert "warning: the marts are stale" not in r.stderr and "partial" in r.stderr
    row = rows_of(
        db,
        "SELECT n_heads_analysable, n_heads_pca, n_heads_rotation, n_heads_plasticity, "
        "partial_analyses FROM model_summary",
    )
    assert row == [(N_HEADS, n, n, n, "pca,rotation,plasticity")]
    # the marts hold the partial set only, never the other sets' rows for the remaining heads
    assert rows_of(
        db,
        "SELECT count(*), count(DISTINCT config_id_rotation) FROM head_metrics "
        "WHERE bias_strength IS NOT NULL",
    ) == [(n, 1)]


def test_old_warehouse_is_migrated_with_its_rows(tmp_path: Path):
    """A warehouse whose per-head keys lack config_id (made by an earlier qkwh) is migrated on the
    first writable open, in one transaction, every row kept; a second set then coexists."""
    db = tmp_path / "old.duckdb"
    ingest(str(SAMPLE), warehouse=db)
    compute(db, workers=1)
    con = duckdb.connect(str(db))
    old_key = {
        "head_runs": "model_id, layer, q_head, analysis",
        "pca_heads": "model_id, layer, q_head",
        "plasticity_heatmap": "model_id, layer, q_head, q_bucket, dx_bin, dm_bin",
    }
    before = {}
    for table, key in old_key.items():  # rebuild three tables with the old key, rows kept
        before[table] = sorted(con.execute(f"SELECT * FROM {table}").fetchall(), key=repr)
        con.execute(f"CREATE TABLE {table}_old AS SELECT * FROM {table}")
        con.execute(f"DROP TABLE {table}")
        # the old DDL: a PRIMARY KEY index without config_id (today only head_runs keeps an index)
        ddl = re.sub(
            r"(,)?\n    (PRIMARY KEY|-- key:) \([^)]*\)\n\);",
            f",\n    PRIMARY KEY ({key})\n);",
            store._schema_ddl(table),
        )
        con.execute(ddl)
        con.execute(f"INSERT INTO {table} SELECT * FROM {table}_old")
        con.execute(f"DROP TABLE {table}_old")
    con.close()
    con = duckdb.connect(str(db))
    assert sorted(store.tables_to_migrate(con)) == sorted(old_key)
    con.close()

    # a failure part-way leaves the warehouse as it was
    real = store._schema_ddl
    calls = {"n": 0}

    def failing(table):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("disk full")
        return real(table)

    store._schema_ddl = failing
    try:
        with pytest.raises(RuntimeError):
            store.connect(db).close()
    finally:
        store._schema_ddl = real
    con = duckdb.connect(str(db))
    assert sorted(store.tables_to_migrate(con)) == sorted(old_key)
    con.close()

    con = store.connect(db)  # migrates
    assert store.tables_to_migrate(con) == []
    for table in old_key:
        assert sorted(con.execute(f"SELECT * FROM {table}").fetchall(), key=repr) == before[table]
    con.close()
    report = compute(db, workers=1, config=load_run_config(params=["seed=4"]))
    assert report.n_written == N_HEADS
    assert rows_of(db, "SELECT count(DISTINCT config_id), count(*) FROM pca_heads") == [
        (2, 2 * N_HEADS)
    ]


def test_one_compute_per_warehouse_and_a_missing_warehouse(two_sets: Path, tmp_path: Path):
    db = _copy(two_sets, tmp_path)
    with compute_lock(db):
        with pytest.raises(WarehouseLockedError, match="another qkwh compute"):
            compute(db, workers=1, force=True)
        r = cli("compute", "-w", str(db), "-j", "1")
        assert r.exit_code == 3
    assert not Path(str(db) + ".compute.lock").exists()  # removed when the run ends
    with pytest.raises(NotFoundError):
        compute(tmp_path / "missing.duckdb", workers=1)
    assert not (tmp_path / "missing.duckdb").exists()
