"""One model's missing files never break another model.

Two synthetic models are ingested, computed and built; then one model's folder is moved.
Queries, compute and the report on the other model keep working; anything that needs the moved
model's vectors fails with one line naming the model, a missing file and the fix (exit 4).
Moving the folder back makes everything work again.  ``hf://`` files are never checked.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from qkwh import store
from tests.conftest import qkwh_cli as cli
from tests.conftest import qkwh_ok as ok
from tests.conftest import synth_args

A, B = "synth-a", "synth-b"


def _stored_comments(db: Path) -> dict[str, str]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return dict(
            con.execute(
                "SELECT view_name, comment FROM duckdb_views() WHERE NOT temporary "
                "AND starts_with(view_name, 'vectors_')"
            ).fetchall()
        )
    finally:
        con.close()


@pytest.fixture(scope="module")
def two_models(tmp_path_factory) -> tuple[Path, dict[str, Path], dict[str, int]]:
    """A built warehouse holding two computed models; returns (db, data folders, rows per model)."""
    tmp = tmp_path_factory.mktemp("isolation")
    db = tmp / "wh.duckdb"
    folders, rows = {}, {}
    for name, seed in ((A, 1), (B, 2)):
        folders[name] = tmp / name
        ok(
            *synth_args(str(folders[name]), rows=400, seed=seed),
        )
        ok("ingest", str(folders[name]), "--model-id", name, "-w", str(db))
    ok("compute", "-w", str(db), "-j", "1")
    ok("build", "-w", str(db))
    con = duckdb.connect(str(db), read_only=True)
    rows = dict(con.execute("SELECT model_id, sum(rows) FROM files GROUP BY 1").fetchall())
    con.close()
    return db, folders, rows


def _count(db: Path, sql: str) -> int:
    r = ok("sql", sql, "-w", str(db), "--format", "csv")
    return int(r.stdout.splitlines()[1])


def _missing_line(r, folder: Path) -> str:
    lines = [line for line in r.stderr.splitlines() if "the vectors of model" in line]
    assert lines, r.output + r.stderr
    line = lines[-1]
    assert f"model {B!r}" in line and str(folder) in line and ".parquet" in line
    assert "6 of 6 cataloged files are missing" in line
    assert f"`qkwh ingest NEW_FOLDER --model-id {B}`" in line and f"`qkwh remove {B}`" in line
    return line


@pytest.mark.slow
def test_a_moved_model_breaks_only_itself_with_a_clear_error(two_models, tmp_path: Path):
    db, folders, rows = two_models
    assert _count(db, "SELECT count(*) FROM vectors") == rows[A] + rows[B]
    assert set(_stored_comments(db).values()) == {"qkwh vectors: files present"}
    moved = folders[B].with_name("synth-b-moved")
    folders[B].rename(moved)
    try:
        # read-only first: nothing writes the stored views, TEMP views shadow them
        assert _count(db, f"SELECT count(*) FROM vectors WHERE model_id = '{A}'") == rows[A]
        assert _count(db, f'SELECT count(*) FROM "vectors_{A}"') == rows[A]
        assert _count(db, f"SELECT count(*) FROM head_inputs('{A}')") == 4
        assert set(_stored_comments(db).values()) == {"qkwh vectors: files present"}
        for query in (
            "SELECT count(*) FROM vectors",
            f"SELECT count(*) FROM vectors WHERE model_id = '{B}'",
            f'SELECT * FROM "vectors_{B}"',
            f"SELECT * FROM head_inputs('{B}')",
        ):
            r = cli("sql", query, "-w", str(db))
            assert r.exit_code == 4, (query, r.output + r.stderr)
            _missing_line(r, folders[B])
            assert "Traceback" not in r.output + r.stderr

        # compute: the other model recomputes; all models: the moved one fails, named with the fix
        r = ok("compute", "-w", str(db), "-m", A, "-j", "1", "--force", "-a", "pca")
        assert "computed 4 head(s)" in r.stdout
        r = cli("compute", "-w", str(db), "-j", "1", "--force", "-a", "pca")
        assert r.exit_code == 4, r.output + r.stderr
        assert "computed 4 head(s)" in r.stdout  # the other model
        _missing_line(r, folders[B])
        r = cli("compute", "-w", str(db), "-j", "1", "-m", B)
        assert r.exit_code == 4 and "computed" not in r.stdout
        _missing_line(r, folders[B])
        # that writable connection stored the state: plain DuckDB clients get the clear error too
        comments = _stored_comments(db)
        assert comments[f"vectors_{A}"] == "qkwh vectors: files present"
        assert comments[f"vectors_{B}"].startswith(
            "qkwh vectors: 6 of 6 files missing, e.g. " + str(folders[B])
        )
        con = duckdb.connect(str(db), read_only=True)
        try:
            assert (
                con.execute(f"SELECT count(*) FROM vectors WHERE model_id = '{A}'").fetchone()[0]
                == rows[A]
            )
            with pytest.raises(duckdb.Error, match=f"the vectors of model '{B}' are unavailable"):
                con.execute("SELECT count(*) FROM vectors").fetchone()
        finally:
            con.close()

        # the report: the other model whole; all models: everything but the moved model's collages
        r = ok("report", "-w", str(db), "-m", A, "-o", str(tmp_path / "rep-a"))
        assert "failed" not in r.stdout
        r = cli("report", "-w", str(db), "-o", str(tmp_path / "rep-all"))
        assert r.exit_code == 1, r.output + r.stderr
        failed = [
            line
            for line in r.stdout.splitlines()
            if line.strip().startswith("left out") and "failed" in line
        ]
        assert failed and all(
            f"-{B}" in line and "the vectors of model" in line for line in failed
        ), r.stdout
        from qkwh.reports.page import read_specs  # the figures drawn, by id (specs are inline)

        assert any(f"collage-{A}" in fid for fid in read_specs(tmp_path / "rep-all"))
    finally:
        moved.rename(folders[B])
    # back in place: the next connection restores the views
    assert _count(db, "SELECT count(*) FROM vectors") == rows[A] + rows[B]
    ok("compute", "-w", str(db), "-j", "1", "-a", "pca")
    assert set(_stored_comments(db).values()) == {"qkwh vectors: files present"}


def test_remote_files_are_never_checked(tmp_path: Path, monkeypatch):
    db = tmp_path / "wh.duckdb"
    con = store.connect(db)
    rest = "'l00h00q', 0, 0, 'q', 1, 4, 100, 'f', 1, false, 'list'"
    con.execute(
        "INSERT INTO files (model_id, path, config_name, layer, head, kind, rows, d, bytes, fingerprint, "
        f"n_examples, has_pos0, vector_type) VALUES ('remote-m', 'hf://datasets/o/n@abc/l00h00q/data.parquet', "
        f"{rest}), ('local-m', ?, {rest})",
        [str(tmp_path / "gone" / "data.parquet")],
    )
    checked: list[str] = []
    real = store.os.path.exists
    monkeypatch.setattr(store.os.path, "exists", lambda p: checked.append(p) or real(p))
    missing = store.missing_vector_files(con)
    con.close()
    assert missing == {"local-m": (1, 1, str(tmp_path / "gone" / "data.parquet"))}
    assert checked == [str(tmp_path / "gone" / "data.parquet")]


def test_a_warehouse_from_before_per_model_views_is_upgraded_and_user_views_are_kept(
    tmp_path: Path,
):
    data, db = tmp_path / "m", tmp_path / "wh.duckdb"
    ok(
        *synth_args(str(data), layers=1, head_dim=8, rows=50),
    )
    ok("ingest", str(data), "--model-id", "m", "-w", str(db))
    con = duckdb.connect(str(db))
    n = con.execute("SELECT count(*) FROM vectors").fetchone()[0]
    # the old layout: one `vectors` view reading the files itself, no per-model views
    body = con.execute("SELECT sql FROM duckdb_views() WHERE view_name = 'vectors_m'").fetchone()[0]
    con.execute("CREATE OR REPLACE VIEW vectors AS " + body.split(" AS ", 1)[1].rstrip(";"))
    con.execute('DROP VIEW "vectors_m"')
    con.execute("CREATE VIEW vectors_mine AS SELECT 1 AS x")  # a user's own view with the prefix
    con.close()
    assert _count(db, "SELECT count(*) FROM vectors") == n  # read-only: the old view still serves
    assert _stored_comments(db) == {"vectors_mine": None}
    store.connect(db).close()  # a writable connection writes the per-model views
    assert _stored_comments(db) == {
        "vectors_m": "qkwh vectors: files present",
        "vectors_mine": None,
    }
    assert _count(db, 'SELECT count(*) FROM "vectors_m"') == n
    ok("remove", "m", "--yes", "-w", str(db))
    assert _stored_comments(db) == {"vectors_mine": None}  # the model's view went, the user's stays
