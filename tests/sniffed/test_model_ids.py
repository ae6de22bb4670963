"""Model ids are identifiers: a bad id is refused at ingest with exit 2 and nothing is written.

Bad ids come from `--model-id` or from the registry; either way the warehouse must be left
exactly as it was (compared table by table), and a warehouse that did not exist is not created
for an explicit bad id.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qkwh.cli import app
from qkwh.errors import InputError
from qkwh.ids import MAX_LENGTH, check_model_id, model_id_problem
from qkwh.ingest import ingest
from qkwh.registry import load_registry
from tests.conftest import SAMPLE, snapshot

runner = CliRunner()

BAD_IDS = {
    "slash": "org/model",
    "backslash": "org\\model",
    "parent": "..",
    "dotdot inside": "a..b",
    "leading dot": ".hidden",
    "leading dash": "-rf",
    "single quote": "it's",
    "double quote": 'say"hi',
    "space": "my model",
    "tab": "a\tb",
    "newline": "a\nb",
    "nul": "a\x00b",
    "escape": "a\x1bb",
    "semicolon": "x';DROP TABLE models;--",
    "non-ascii": "modèle",
    "empty": "",
    "too long": "m" * (MAX_LENGTH + 1),
}
GOOD_IDS = ["qwen3-4b", "Qwen3_4B.v1", "smollm3-3b-lc-32k-to-64k-step-20000", "7b", "m" * MAX_LENGTH]


@pytest.mark.parametrize("model_id", GOOD_IDS)
def test_good_ids_pass(model_id: str):
    assert model_id_problem(model_id) is None
    assert check_model_id(model_id) == model_id


@pytest.mark.parametrize("model_id", list(BAD_IDS.values()), ids=list(BAD_IDS))
def test_bad_ids_are_named_in_one_line(model_id: str):
    problem = model_id_problem(model_id)
    assert problem
    with pytest.raises(InputError) as exc:
        check_model_id(model_id, origin="--model-id")
    msg = str(exc.value)
    assert exc.value.exit_code == 2 and "\n" not in msg and msg.startswith(f"--model-id {model_id!r}")


def test_every_registry_id_is_valid():
    assert [m for m in load_registry() if model_id_problem(m)] == []


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "wh.duckdb"
    ingest(str(SAMPLE), warehouse=path)
    return path


@pytest.mark.parametrize("model_id", list(BAD_IDS.values()), ids=list(BAD_IDS))
def test_cli_refuses_bad_model_id_and_writes_nothing(db: Path, model_id: str):
    before = snapshot(db)
    r = runner.invoke(app, ["ingest", str(SAMPLE), "--model-id", model_id, "-w", str(db)])
    assert r.exit_code == 2, r.output
    assert "may hold only letters, digits" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert snapshot(db) == before


def test_refused_id_does_not_create_a_warehouse(tmp_path: Path):
    wh = tmp_path / "new.duckdb"
    with pytest.raises(InputError, match=re.escape("contains '..'")):
        ingest(str(SAMPLE), warehouse=wh, model_id="../../etc/x")
    assert not wh.exists()


def test_bad_id_from_the_registry_is_refused(db: Path):
    entry = load_registry()["smollm2-135m"]
    bad = dataclasses.replace(entry, model_id="smollm2 135m")  # found by hf_model, id has a space
    before = snapshot(db)
    with pytest.raises(InputError, match="registry model id 'smollm2 135m' contains ' '"):
        ingest(str(SAMPLE), warehouse=db, registry={bad.model_id: bad})
    assert snapshot(db) == before


def test_valid_explicit_id_is_stored(db: Path):
    ingest(str(SAMPLE), warehouse=db, model_id="SmolLM2_135M.copy-1")
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        ids = [r[0] for r in con.execute("SELECT model_id FROM models ORDER BY 1").fetchall()]
        n = con.execute("SELECT count(*) FROM vectors WHERE model_id = 'SmolLM2_135M.copy-1'").fetchone()[0]
    finally:
        con.close()
    assert ids == ["SmolLM2_135M.copy-1", "smollm2-135m"]
    assert n == 21_086
