"""`qkwh ingest --family F --label L`: the model's family and display name in the catalog."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from qkwh import store
from qkwh.cli import app
from tests.conftest import SAMPLE, snapshot

runner = CliRunner()


def _model(db: Path) -> tuple:
    con = store.connect(db, read_only=True)
    try:
        return con.execute("SELECT family, label, in_registry FROM models").fetchone()
    finally:
        con.close()


def test_family_and_label_flags_win_and_a_registry_conflict_is_noted(tmp_path: Path):
    db = tmp_path / "wh.duckdb"
    r = runner.invoke(app, ["ingest", str(SAMPLE), "-w", str(db)])
    assert r.exit_code == 0, r.output
    assert _model(db) == ("SmolLM2", None, True)  # registry family; no label -> reports use the id

    r = runner.invoke(
        app, ["ingest", str(SAMPLE), "-w", str(db), "--label", "SmolLM2 135M", "--family", "Tiny"]
    )
    assert r.exit_code == 0, r.output
    assert "replaced" in r.output  # only the catalog row changes
    assert "registry_mismatch" in r.output and "Tiny" in r.output
    assert _model(db) == ("Tiny", "SmolLM2 135M", True)

    r = runner.invoke(app, ["ingest", str(SAMPLE), "-w", str(db), "--label", "  "])
    assert r.exit_code == 0, r.output
    assert _model(db) == ("Tiny", None, True)  # a blank label is no label; the family is kept

    r = runner.invoke(app, ["ingest", str(SAMPLE), "-w", str(db), "--family", ""])
    assert r.exit_code == 0, r.output
    assert _model(db) == ("SmolLM2", None, True)  # a blank family is the registry's


def test_reingest_without_family_or_label_keeps_them(tmp_path: Path):
    """The same source twice changes nothing: re-ingesting without the flags keeps what they set."""
    db = tmp_path / "wh.duckdb"
    r = runner.invoke(
        app,
        [
            "ingest",
            str(SAMPLE),
            "-w",
            str(db),
            "--model-id",
            "mine",
            "--family",
            "Tiny",
            "--label",
            "My model",
        ],
    )
    assert r.exit_code == 0, r.output
    assert _model(db) == ("Tiny", "My model", False)
    before = snapshot(db)
    r = runner.invoke(app, ["ingest", str(SAMPLE), "-w", str(db), "--model-id", "mine"])
    assert r.exit_code == 0, r.output
    assert "unchanged" in r.output
    assert snapshot(db) == before

    r = runner.invoke(
        app, ["ingest", str(SAMPLE), "-w", str(db), "--model-id", "mine", "--label", "Renamed"]
    )
    assert r.exit_code == 0, r.output
    assert _model(db) == ("Tiny", "Renamed", False)  # the family not given is kept


def test_reingest_keeps_a_family_that_overrides_the_registry(tmp_path: Path):
    db = tmp_path / "wh.duckdb"
    r = runner.invoke(
        app, ["ingest", str(SAMPLE), "-w", str(db), "--family", "Tiny", "--label", "L"]
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["ingest", str(SAMPLE), "-w", str(db)])
    assert r.exit_code == 0, r.output
    assert "unchanged" in r.output
    assert _model(db) == ("Tiny", "L", True)
