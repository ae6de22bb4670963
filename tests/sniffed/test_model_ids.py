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

from qkwh import store
from qkwh.cli import app
from qkwh.errors import InputError
from qkwh.ids import MAX_LENGTH, case_collision, check_model_id, model_id_key, model_id_problem
from qkwh.ingest import ingest
from qkwh.models_csv import load_registry
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
GOOD_IDS = [
    "qwen3-4b",
    "Qwen3_4B.v1",
    "smollm3-3b-lc-32k-to-64k-step-20000",
    "7b",
    "m" * MAX_LENGTH,
]


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
    assert (
        exc.value.exit_code == 2 and "\n" not in msg and msg.startswith(f"--model-id {model_id!r}")
    )


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
        n = con.execute(
            "SELECT count(*) FROM vectors WHERE model_id = 'SmolLM2_135M.copy-1'"
        ).fetchone()[0]
    finally:
        con.close()
    assert ids == ["SmolLM2_135M.copy-1", "smollm2-135m"]
    assert n == 21_086


# ------------------------------------------------------------------------------------------
# ids that differ only in case: one id (DuckDB identifiers, such as the vectors views, ignore case)
# ------------------------------------------------------------------------------------------


def test_registry_ids_differ_in_more_than_case():
    keys = [model_id_key(m) for m in load_registry()]
    assert len(keys) == len(set(keys))


def test_case_collision():
    assert case_collision("M1", ["m2", "m1"]) == "m1"
    assert case_collision("m1", ["m1", "m2"]) is None  # the same id is a re-ingest, not a collision
    assert case_collision("m1", []) is None


def test_id_differing_only_in_case_is_refused_and_writes_nothing(db: Path):
    before = snapshot(db)
    r = runner.invoke(app, ["ingest", str(SAMPLE), "--model-id", "SmolLM2-135M", "-w", str(db)])
    assert r.exit_code == 2, r.output
    msg = r.stderr.strip()
    assert len(msg.splitlines()) == 1
    assert "'SmolLM2-135M' differs only in case from 'smollm2-135m'" in msg
    assert snapshot(db) == before


def test_view_names_never_collide_ignoring_case():
    names = store.vectors_view_names(["m1", "M1", "m2", "a-B"])
    assert names == {
        "M1": "vectors_M1#1",
        "m1": "vectors_m1#2",
        "m2": "vectors_m2",
        "a-B": "vectors_a-B",
    }
    assert len({n.lower() for n in names.values()}) == len(names)


def _count_by_model(con, sql: str) -> dict[str, tuple]:
    return {r[0]: tuple(r[1:]) for r in con.execute(sql).fetchall()}


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writable"])
def test_older_warehouse_with_ids_differing_in_case_keeps_their_rows_apart(
    db: Path, read_only: bool
):
    """A warehouse written before the refusal may hold `M1` beside `m1`: their vectors views and
    head_inputs must not mix rows (they used to share one view: doubled rows as `m1`, none as `M1`)."""
    import duckdb

    ingest(str(SAMPLE), warehouse=db, model_id="other")
    con = duckdb.connect(str(db))  # what an older qkwh let through
    for table in store.CATALOG_TABLES:
        con.execute(f"UPDATE {table} SET model_id = 'SmolLM2-135M' WHERE model_id = 'other'")
    con.close()
    n = 21_086
    con = store.connect(db, read_only=read_only)
    try:
        rows = _count_by_model(con, "SELECT model_id, count(*) FROM vectors GROUP BY ALL")
        assert rows == {"smollm2-135m": (n,), "SmolLM2-135M": (n,)}
        per_head = {}
        for mid in ("smollm2-135m", "SmolLM2-135M"):
            per_head[mid] = _count_by_model(
                con,
                f"SELECT model_id, count(*), sum(len(q)), sum(len(k)) FROM head_inputs('{mid}') GROUP BY ALL",
            )
            assert set(per_head[mid]) == {mid}
        assert per_head["smollm2-135m"]["smollm2-135m"] == per_head["SmolLM2-135M"]["SmolLM2-135M"]
        heads = con.execute(
            "SELECT count(*), sum(n_q), sum(n_k) FROM heads "
            "WHERE model_id = 'smollm2-135m' AND has_k_file"
        ).fetchone()
        assert per_head["smollm2-135m"]["smollm2-135m"] == heads
        for view in store.vectors_view_names(["smollm2-135m", "SmolLM2-135M"]).values():
            assert con.execute(
                f"SELECT count(DISTINCT model_id), count(*) FROM {store.quote_ident(view)}"
            ).fetchone() == (1, n)
    finally:
        con.close()
