"""`qkwh compute`: every table filled, skip of unchanged heads, resumability, determinism across
worker counts, interrupted runs, and the SQL functions equal to the bulk path."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from qkwh import store
from qkwh.cli import app
from qkwh.compute.runner import compute
from qkwh.compute.units import GroupTask, HeadUnit, balance_tail
from qkwh.config import load_run_config
from qkwh.ingest import ingest
from qkwh.params import RunConfig
from tests.conftest import SAMPLE

runner = CliRunner()
RESULT_TABLES = (
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
N_HEADS = 12  # the embedded sample


def results(db: Path) -> dict[str, list[tuple]]:
    """Every result row (timestamps excluded), sorted: equal means identical results."""
    con = store.connect(db, read_only=True)
    try:
        out = {
            t: sorted(map(repr, con.execute(f"SELECT * FROM {t}").fetchall()))
            for t in RESULT_TABLES
        }
        out["head_runs"] = sorted(
            con.execute(
                "SELECT model_id, layer, q_head, analysis, config_id, input_fingerprint FROM head_runs"
            ).fetchall()
        )
        return out
    finally:
        con.close()


@pytest.fixture(scope="module")
def computed(tmp_path_factory) -> Path:
    """The sample ingested and computed once (in-process)."""
    db = tmp_path_factory.mktemp("computed") / "wh.duckdb"
    ingest(str(SAMPLE), warehouse=db)
    report = compute(db, workers=1)
    assert report.failures == [] and report.n_written == N_HEADS
    return db


def _fresh(tmp_path: Path, name: str = "wh.duckdb") -> Path:
    db = tmp_path / name
    ingest(str(SAMPLE), warehouse=db)
    return db


def test_every_table_is_filled_for_every_head(computed: Path):
    con = store.connect(computed, read_only=True)
    per_head = {
        t: con.execute(f"SELECT count(DISTINCT (layer, q_head)) FROM {t}").fetchone()[0]
        for t in RESULT_TABLES
    }
    assert per_head == dict.fromkeys(RESULT_TABLES, N_HEADS)
    assert con.execute("SELECT count(*) FROM pca_components").fetchone()[0] == N_HEADS * 10
    assert con.execute("SELECT count(*) FROM plasticity_buckets").fetchone()[0] == N_HEADS * 16
    assert con.execute("SELECT count(*) FROM plasticity_components").fetchone()[0] == N_HEADS * 64
    assert (
        con.execute(
            "SELECT count(*) FROM rotation_axes WHERE axis IN ('a', 'b', 'b_centroid', 'mean')"
        ).fetchone()[0]
        == N_HEADS * 4
    )
    assert con.execute("SELECT count(*) FROM pca_axes").fetchone()[0] == N_HEADS * 11
    # k_head beside every result row follows the GQA rule; config ids point at run_config
    assert (
        con.execute("SELECT count(*) FROM rotation_heads WHERE k_head <> q_head // 3").fetchone()[0]
        == 0
    )
    orphans = con.execute(
        "SELECT count(*) FROM head_runs r LEFT JOIN run_config c USING (config_id) "
        "WHERE c.config_id IS NULL"
    ).fetchone()[0]
    assert orphans == 0
    params = dict(con.execute("SELECT analysis, params_json FROM run_config").fetchall())
    assert (
        '"cov_mode": "full"' in params["plasticity"]
        and '"num_pairs_per_bucket": 1024' in params["plasticity"]
    )
    # spec §2.2.3: residual_pos_r is numerically zero on real data
    assert con.execute("SELECT max(residual_pos_r) FROM rotation_heads").fetchone()[0] < 1e-12


def test_unchanged_heads_are_skipped(computed: Path, tmp_path: Path):
    db = tmp_path / "copy.duckdb"
    shutil.copy(computed, db)
    before = results(db)
    report = compute(db, workers=1)
    assert (report.n_planned, report.n_written, report.n_skipped) == (0, 0, N_HEADS)
    assert results(db) == before


def test_changed_parameter_recomputes_only_that_analysis(computed: Path, tmp_path: Path):
    db = tmp_path / "copy.duckdb"
    shutil.copy(computed, db)
    before = results(db)
    cfg = load_run_config(params=["plasticity.cov_mode=diag"])
    report = compute(db, workers=1, config=cfg)
    assert report.n_written == N_HEADS
    after = results(db)
    for t in (
        "pca_components",
        "pca_heads",
        "pca_axes",
        "rotation_heads",
        "rotation_pairs",
        "rotation_axes",
    ):
        assert after[t] == before[t]
    assert after["plasticity_buckets"] != before["plasticity_buckets"]
    con = store.connect(db, read_only=True)
    # the new set is the current one; the first set's rows are kept beside it (config_id in the key)
    current = (
        "SELECT DISTINCT {col} FROM {t} AS t JOIN current_config AS c ON c.model_id = t.model_id "
        "AND c.analysis = 'plasticity' AND c.config_id = t.config_id"
    )
    assert con.execute(current.format(col="cov_mode", t="plasticity_heads")).fetchall() == [
        ("diag",)
    ]
    assert con.execute(current.format(col="mode", t="plasticity_buckets")).fetchall() == [
        ("sampled/diag/position",)
    ]
    assert sorted(
        con.execute("SELECT cov_mode, count(*) FROM plasticity_heads GROUP BY 1").fetchall()
    ) == [("diag", N_HEADS), ("full", N_HEADS)]
    assert (
        con.execute("SELECT count(*) FROM run_config WHERE analysis = 'plasticity'").fetchone()[0]
        == 2
    )


def test_results_identical_across_worker_counts(computed: Path, tmp_path: Path):
    db2 = _fresh(tmp_path, "two.duckdb")
    report = compute(db2, workers=2)
    assert report.failures == [] and report.n_written == N_HEADS
    assert results(db2) == results(computed)


def test_keyboard_interrupt_mid_head_keeps_whole_heads_and_resumes(
    computed: Path, tmp_path: Path, monkeypatch
):
    db = _fresh(tmp_path)
    real = store.insert_columns
    calls = {"n": 0}

    def interrupting(con, table, columns):
        calls["n"] += 1
        if calls["n"] == 20:  # inside the transaction of the third or so head
            raise KeyboardInterrupt
        return real(con, table, columns)

    monkeypatch.setattr(store, "insert_columns", interrupting)
    with pytest.raises(KeyboardInterrupt):
        compute(db, workers=1)
    monkeypatch.setattr(store, "insert_columns", real)
    _assert_whole_heads(db)
    report = compute(db, workers=1)
    assert report.n_written < N_HEADS  # resumed, not restarted
    assert results(db) == results(computed)


def _assert_whole_heads(db: Path) -> None:
    """Every head is either complete in every result table or absent from all of them."""
    con = store.connect(db, read_only=True)
    done = set(con.execute("SELECT layer, q_head FROM head_runs").fetchall())
    assert 0 < len(done) < 3 * N_HEADS or len(done) == 0
    for t in RESULT_TABLES:
        present = set(con.execute(f"SELECT DISTINCT layer, q_head FROM {t}").fetchall())
        assert present == {(layer, h) for layer, h in done}, t
    con.close()


@pytest.mark.slow
def test_killed_run_leaves_no_partial_head_and_resumes(computed: Path, tmp_path: Path):
    db = _fresh(tmp_path)
    script = textwrap.dedent(f"""
        import os, signal
        from qkwh import store
        from qkwh.compute.runner import compute
        real = store.insert_columns
        calls = {{"n": 0}}
        def dying(con, table, columns):
            calls["n"] += 1
            if calls["n"] == 25:   # mid-transaction of a head
                os.kill(os.getpid(), signal.SIGKILL)
            return real(con, table, columns)
        store.insert_columns = dying
        compute({str(db)!r}, workers=1)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    _assert_whole_heads(db)
    report = compute(db, workers=1)
    assert 0 < report.n_written < N_HEADS
    assert results(db) == results(computed)


def test_cli_compute_and_bad_parameters(tmp_path: Path):
    db = _fresh(tmp_path)
    r = runner.invoke(app, ["compute", "-w", str(db), "-a", "pca", "-j", "1"])
    assert r.exit_code == 0, r.output
    assert "computed 12 head(s)" in r.output
    r = runner.invoke(app, ["compute", "-w", str(db), "-p", "plasticity.cov_mode=bogus"])
    assert r.exit_code == 2 and "cov_mode must be one of full, diag, global_diag" in r.stderr
    r = runner.invoke(app, ["compute", "-w", str(db), "-p", "nonsense.key=1"])
    assert r.exit_code == 2 and "unknown parameter 'nonsense.key'" in r.stderr
    r = runner.invoke(app, ["compute", "-w", str(db), "-m", "nope"])
    assert r.exit_code == 4 and "no model 'nope'" in r.stderr
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("plasticity: [unclosed")
    r = runner.invoke(app, ["compute", "-w", str(db), "-c", str(bad_yaml)])
    assert r.exit_code == 2 and "bad.yaml" in r.stderr


def test_run_config_fingerprint_tracks_every_parameter():
    base = RunConfig()
    fps = {base.fingerprint("plasticity", "v")}
    for override in (
        {"seed": "1"},
        {"plasticity.num_pairs_per_bucket": "512"},
        {"plasticity.pairs": "exhaustive"},
        {"max_tokens_per_head": "100"},
    ):
        fps.add(base.with_overrides(override).fingerprint("plasticity", "v"))
    assert len(fps) == 5
    # a parameter of another analysis does not change plasticity's id
    assert base.with_overrides({"rotation.t_active": "0.5"}).fingerprint(
        "plasticity", "v"
    ) == base.fingerprint("plasticity", "v")
    assert base.fingerprint("plasticity", "v") != base.fingerprint("plasticity", "w")


def test_sql_functions_equal_the_bulk_path(computed: Path):
    import duckdb

    from qkwh import udf

    con = duckdb.connect(str(computed), read_only=True)
    udf.register(con, RunConfig())
    rows = con.execute(
        textwrap.dedent("""
        SELECT layer, q_head, qkwh_pca(h) AS p, qkwh_rotation(h) AS r, qkwh_plasticity(h) AS a
        FROM head_inputs('smollm2-135m') AS h ORDER BY layer, q_head
    """)
    ).fetchall()
    assert len(rows) == N_HEADS

    def table(name):
        cur = con.execute(f"SELECT * FROM {name} ORDER BY layer, q_head")
        cols = [d[0] for d in cur.description]
        return {(r[1], r[2]): dict(zip(cols, r)) for r in cur.fetchall()}

    bulk = {"p": table("pca_heads"), "r": table("rotation_heads"), "a": table("plasticity_heads")}
    for layer, q_head, *structs in rows:
        for key, struct in zip(("p", "r", "a"), structs):
            stored = bulk[key][(layer, q_head)]
            for col, value in struct.items():
                if isinstance(value, list):  # the rows of the other tables
                    continue
                want = stored[col]
                if isinstance(value, float) and isinstance(want, float):
                    np.testing.assert_array_equal(
                        value, want, err_msg=f"{key}.{col}"
                    )  # NaN == NaN here
                else:
                    assert value == want, (key, col, value, want)
    # the per-bucket list of the plasticity function equals plasticity_buckets
    first = rows[0]
    stored = con.execute(
        "SELECT q_bucket, ap_bucket FROM plasticity_buckets WHERE layer = ? AND q_head = ? "
        "ORDER BY q_bucket",
        [first[0], first[1]],
    ).fetchall()
    got = [(b["q_bucket"], b["ap_bucket"]) for b in first[4]["buckets"]]
    np.testing.assert_array_equal(np.array(got, dtype=float), np.array(stored, dtype=float))
    con.close()


@pytest.mark.slow
def test_full_shared_fixture(shared_fixture: Path, tmp_path: Path):
    db = tmp_path / "fixture.duckdb"
    ingest(str(shared_fixture), warehouse=db)
    report = compute(db, workers=2)
    assert report.failures == []
    con = store.connect(db, read_only=True)
    n = con.execute("SELECT count(*) FROM heads WHERE has_k_file").fetchone()[0]
    assert n == 60 and report.n_written == n
    for t in RESULT_TABLES:
        assert con.execute(f"SELECT count(DISTINCT (layer, q_head)) FROM {t}").fetchone()[0] == n, t
    # spec §5.3 / §8: residual_pos_r numerically zero on every head
    assert con.execute("SELECT max(residual_pos_r) FROM rotation_heads").fetchone()[0] < 1e-12


def test_max_tokens_per_head_caps_q_and_k(tmp_path: Path):
    db = _fresh(tmp_path)
    cfg = load_run_config(params=["max_tokens_per_head=500"])
    report = compute(db, workers=1, config=cfg, analyses=("pca", "plasticity"))
    assert report.failures == []
    con = store.connect(db, read_only=True)
    for table in ("pca_heads", "plasticity_heads"):
        assert con.execute(f"SELECT DISTINCT n_q, n_k FROM {table}").fetchall() == [(500, 500)]
    assert (
        con.execute(
            "SELECT sum(n_queries) FROM plasticity_buckets GROUP BY layer, q_head"
        ).fetchall()
        == [(500,)] * N_HEADS
    )


def _group(layer: int, k_head: int, n: int) -> GroupTask:
    units = tuple(
        HeadUnit("m", layer, k_head * n + i, k_head, f"q{i}", "k", "", "", 4096, 512, None)
        for i in range(n)
    )
    return GroupTask(units, tuple((f"a{layer}{k_head}{i}",) for i in range(n)))


def test_balance_tail_orders_largest_first_and_splits_the_last_tasks_into_heads():
    tasks = [_group(0, 0, 2), _group(0, 1, 4), _group(1, 0, 3), _group(1, 1, 4), _group(1, 2, 1)]
    out = balance_tail(tasks, 2)
    # largest first (ties in plan order); the last two (2 heads and 1) become one task per head
    assert [t.n_heads for t in out] == [4, 4, 3, 1, 1, 1]
    assert [(t.heads[0].layer, t.heads[0].k_head) for t in out] == [
        (0, 1),
        (1, 1),
        (1, 0),
        (0, 0),
        (0, 0),
        (1, 2),
    ]
    # every head exactly once, still with its own analyses
    pairs = [(u.key, a) for t in out for u, a in zip(t.heads, t.analyses)]
    assert sorted(pairs) == sorted((u.key, a) for t in tasks for u, a in zip(t.heads, t.analyses))
    # nothing to balance: one worker, or no more tasks than workers
    assert balance_tail(tasks, 1) == tasks
    assert balance_tail(tasks[:2], 2) == tasks[:2]
