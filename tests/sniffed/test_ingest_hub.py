"""`qkwh ingest hf://...` end to end against the local Hub stand-in (127.0.0.1, HF_ENDPOINT)."""

from __future__ import annotations

import pytest
from hub_server import HubStandIn
from typer.testing import CliRunner

from qkwh import store
from qkwh.cli import app
from tests.conftest import SAMPLE, snapshot

REPO = "viktoroo/sniffed-qk"
BRANCH = "smollm2-135m-longbench-pro-128k-plus"
SOURCE = f"hf://datasets/{REPO}@{BRANCH}"
runner = CliRunner()


@pytest.fixture
def served() -> dict[str, bytes]:
    files = {
        p.relative_to(SAMPLE).as_posix(): p.read_bytes() for p in SAMPLE.rglob("*") if p.is_file()
    }
    files.pop("README.md")  # the sample's card describes the folder, not needed here
    return files


def test_ingest_a_hub_branch_then_again_offline_from_the_cache(served, hf_env, monkeypatch):
    db = hf_env / "wh.duckdb"
    with HubStandIn(REPO, {BRANCH: served}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        r = runner.invoke(app, ["ingest", SOURCE, "-w", str(db)])
        assert r.exit_code == 0, r.output + r.stderr
        assert "smollm2-135m: ingested; 22 files" in r.output
    con = store.connect(db, read_only=True)
    row = con.execute(
        "SELECT model_id, source_kind, repo_id, revision, n_files FROM models"
    ).fetchone()
    assert row == ("smollm2-135m", "hub", REPO, BRANCH, 22)
    # the vectors view reads the files in the Hugging Face cache
    assert (
        con.execute("SELECT count(*) FROM vectors").fetchone()[0]
        == con.execute("SELECT sum(rows) FROM files").fetchone()[0]
    )
    assert all(
        str(hf_env / "hf-cache") in p for (p,) in con.execute("SELECT path FROM files").fetchall()
    )
    con.close()
    # the server is gone: the cached branch still ingests (nothing changed)
    before = snapshot(db)
    r = runner.invoke(app, ["ingest", SOURCE, "-w", str(db)])
    assert r.exit_code == 0, r.output + r.stderr
    assert "unchanged" in r.output
    assert snapshot(db) == before


def test_unknown_branch_leaves_the_warehouse_unchanged(served, hf_env, monkeypatch):
    db = hf_env / "wh.duckdb"
    assert runner.invoke(app, ["ingest", str(SAMPLE), "-w", str(db)]).exit_code == 0
    before = snapshot(db)
    with HubStandIn(REPO, {BRANCH: served}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        r = runner.invoke(app, ["ingest", f"hf://datasets/{REPO}@no-such-branch", "-w", str(db)])
    assert r.exit_code == 4, r.output + r.stderr
    assert "no branch no-such-branch" in r.stderr
    assert snapshot(db) == before
