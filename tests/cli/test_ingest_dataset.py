"""The ``dataset`` attribute of a model: the text its capture ran on (`ingest --dataset`, else the
capture metadata), kept on re-ingest, shown by `qkwh models` and `qkwh status`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

import qkwh.cli.output as cli_module
from qkwh import store
from qkwh.cli import app
from qkwh.sniffed.metadata import read_metadata
from tests.conftest import SAMPLE, snapshot

runner = CliRunner()


def _recorded(root: Path) -> str | None:
    """What a capture's metadata records as its text: an explicit ``dataset`` (saver state or
    card), else ``source_dataset``."""
    meta = read_metadata(root)
    return meta.get_str("dataset") or meta.get_str("source_dataset")


#: what the embedded sample's capture metadata records as its text
SAMPLE_DATASET = _recorded(SAMPLE)


def _dataset(db: Path, model_id: str | None = None) -> str | None:
    con = store.connect(db, read_only=True)
    try:
        rows = con.execute(
            "SELECT dataset FROM models WHERE ? IS NULL OR model_id = ?", [model_id, model_id]
        ).fetchall()
    finally:
        con.close()
    assert len(rows) == 1
    return rows[0][0]


def _ingest(*args: str):
    r = runner.invoke(app, ["ingest", *args])
    assert r.exit_code == 0, r.output
    return r


def test_dataset_comes_from_the_capture_metadata_and_the_flag_wins(tmp_path: Path):
    assert SAMPLE_DATASET  # the sample records its text
    db = tmp_path / "wh.duckdb"
    _ingest(str(SAMPLE), "-w", str(db))
    assert _dataset(db) == SAMPLE_DATASET

    r = _ingest(str(SAMPLE), "-w", str(db), "--dataset", "code")
    assert "replaced" in r.output  # the catalog row changes, nothing else
    assert _dataset(db) == "code"

    before = snapshot(db)
    r = _ingest(str(SAMPLE), "-w", str(db))  # without the flag: kept
    assert "unchanged" in r.output
    assert snapshot(db) == before
    assert _dataset(db) == "code"

    _ingest(str(SAMPLE), "-w", str(db), "--dataset", " ")  # blank: back to the metadata's
    assert _dataset(db) == SAMPLE_DATASET


def test_without_metadata_the_dataset_is_null(tmp_path: Path):
    src = tmp_path / "src"
    shutil.copytree(SAMPLE, src)
    state = json.loads((src / "_saver_state.json").read_text())
    for key in ("source_dataset", "dataset_name", "dataset"):
        state["model_metadata"].pop(key, None)
    (src / "_saver_state.json").write_text(json.dumps(state))
    (src / "README.md").unlink(missing_ok=True)  # the card names the text too
    db = tmp_path / "wh.duckdb"
    _ingest(str(src), "-w", str(db), "--model-id", "nometa")
    assert _dataset(db) is None


def test_a_hub_subset_is_part_of_the_name(tmp_path: Path):
    src = tmp_path / "src"
    shutil.copytree(SAMPLE, src)
    state = json.loads((src / "_saver_state.json").read_text())
    state["model_metadata"].update(source_dataset="wikitext", dataset_name="wikitext-2-raw-v1")
    state["model_metadata"].pop("dataset", None)
    (src / "_saver_state.json").write_text(json.dumps(state))
    (src / "README.md").unlink(missing_ok=True)  # a card may name the dataset explicitly
    assert _recorded(src) == "wikitext"
    db = tmp_path / "wh.duckdb"
    _ingest(str(src), "-w", str(db), "--model-id", "wiki")
    assert _dataset(db) == "wikitext/wikitext-2-raw-v1"


def test_models_and_status_show_the_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    db = tmp_path / "wh.duckdb"
    _ingest(str(SAMPLE), "-w", str(db), "--model-id", "prose", "--dataset", "txt")
    _ingest(str(SAMPLE), "-w", str(db), "--model-id", "code", "--dataset", "py")
    monkeypatch.setattr(cli_module.out, "width", 400)  # wide enough for the table layout
    for command in ("models", "status"):
        r = runner.invoke(app, [command, "-w", str(db)])
        assert r.exit_code == 0, r.output
        lines = r.output.splitlines()
        header = next(line for line in lines if line.startswith("model_id"))
        at = header.index("dataset")  # the table's columns are left-aligned under the header
        for model_id, dataset in (("code", "py"), ("prose", "txt")):
            row = next(line for line in lines if line.startswith(f"{model_id} "))
            assert row[at:].split()[0] == dataset, (command, r.output)


def test_an_explicit_dataset_key_wins_over_the_source(tmp_path: Path):
    """A capture that names its dataset (``dataset`` in the saver state) is recorded by that name."""
    src = tmp_path / "src"
    shutil.copytree(SAMPLE, src)
    state = json.loads((src / "_saver_state.json").read_text())
    state["model_metadata"].update(dataset="python-source", source_dataset="8 text files")
    (src / "_saver_state.json").write_text(json.dumps(state))
    db = tmp_path / "wh.duckdb"
    _ingest(str(src), "-w", str(db), "--model-id", "code")
    assert _dataset(db) == "python-source"


def test_dataset_is_for_one_source(tmp_path: Path):
    r = runner.invoke(
        app,
        ["ingest", str(SAMPLE), str(SAMPLE), "-w", str(tmp_path / "wh.duckdb"), "--dataset", "x"],
    )
    assert r.exit_code == 2, r.output
    assert "--dataset" in r.output


def test_an_older_warehouse_gains_the_column(tmp_path: Path):
    """A warehouse created before the column existed gets it (NULL) on the next writable open."""
    db = tmp_path / "wh.duckdb"
    _ingest(str(SAMPLE), "-w", str(db))
    con = duckdb.connect(str(db))
    try:
        con.execute("ALTER TABLE models DROP COLUMN dataset")
        # a warehouse from before the column has no schema stamp either (store.apply_schema)
        con.execute("COMMENT ON TABLE head_runs IS NULL")
    finally:
        con.close()
    store.connect(db).close()
    assert _dataset(db) is None
    _ingest(str(SAMPLE), "-w", str(db), "--dataset", "prose")
    assert _dataset(db) == "prose"


def test_models_and_status_read_an_older_warehouse(tmp_path: Path):
    """Read-only commands do not migrate: a warehouse without the column shows no dataset."""
    db = tmp_path / "wh.duckdb"
    _ingest(str(SAMPLE), "-w", str(db), "--dataset", "txt")
    con = duckdb.connect(str(db))
    try:
        con.execute("ALTER TABLE models DROP COLUMN dataset")
    finally:
        con.close()
    for command in ("models", "status"):
        r = runner.invoke(app, [command, "-w", str(db)])
        assert r.exit_code == 0, (command, r.output)
        assert "smollm2" in r.output and "txt" not in r.output
