"""A parameter-set name can never hide a config_id (issue 23, item 10).

Names that read as a config_id or a prefix of one (4 or more hex digits) are refused before
anything is computed; a reference made of hex digits always means a config_id, even in a
warehouse where an older qkwh accepted such a name.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from qkwh import store
from qkwh.compute.runner import compute
from qkwh.config import load_run_config
from qkwh.errors import InputError
from qkwh.runs import check_name, resolve
from tests.conftest import qkwh_cli as cli
from tests.conftest import small_synth_args

runner = CliRunner()
MODEL = "synth-names"


@pytest.fixture(scope="module")
def two_sets(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A small synthetic model with two pca sets, `base` and `s1`: (warehouse, name -> config_id)."""
    tmp = tmp_path_factory.mktemp("set-names")
    data, db = tmp / MODEL, tmp / "wh.duckdb"
    for args in (
        small_synth_args(data),
        ["ingest", str(data), "--model-id", MODEL, "-w", str(db)],
    ):
        r = cli(*args)
        assert r.exit_code == 0, r.output
    ids = {}
    for name, params in (("base", []), ("s1", ["seed=1"])):
        report = compute(
            db, workers=1, analyses=("pca",), name=name, config=load_run_config(params=params)
        )
        ids[name] = report.config_ids["pca"]
    return db, ids


@pytest.mark.parametrize("name", ["d717", "D717", "2024", "deadbeef", "0123456789abcdef"])
def test_hex_names_are_refused(name: str):
    with pytest.raises(InputError, match="reads as a config_id prefix"):
        check_name(name)


@pytest.mark.parametrize("name", ["run-d717", "s1", "abc", "v2024", "deadbeef-2"])
def test_other_names_are_accepted(name: str):
    assert check_name(name) == name


def test_compute_refuses_a_name_shadowing_a_config_id_and_writes_nothing(two_sets):
    db, ids = two_sets
    prefix = ids["s1"][:4]
    before = store_rows(db)
    r = cli("compute", "-w", str(db), "-a", "pca", "-j", "1", "--name", prefix, "-p", "seed=2")
    assert r.exit_code == 2, r.output
    assert f"parameter-set name {prefix!r} reads as a config_id prefix" in r.stderr
    with pytest.raises(InputError, match="reads as a config_id prefix"):
        compute(
            db, workers=1, analyses=("pca",), name=prefix, config=load_run_config(params=["seed=2"])
        )
    assert store_rows(db) == before


def test_hex_digits_resolve_to_the_config_id_even_beside_an_old_hex_name(two_sets, tmp_path: Path):
    """A warehouse where an older qkwh named set `base` with a prefix of s1's config_id: `runs use
    PREFIX` makes s1 current, not base."""
    import shutil

    src, ids = two_sets
    db = tmp_path / "wh.duckdb"
    shutil.copy(src, db)
    prefix = ids["s1"][:6]
    con = duckdb.connect(str(db))
    con.execute("UPDATE run_config SET name = ? WHERE config_id = ?", [prefix, ids["base"]])
    con.close()
    con = store.connect(db, read_only=True)
    try:
        assert resolve(con, prefix) == {"pca": ids["s1"]}
        assert resolve(con, ids["base"][:6]) == {"pca": ids["base"]}
    finally:
        con.close()
    r = cli("runs", "use", prefix, "-w", str(db))
    assert r.exit_code == 0, r.output
    con = store.connect(db, read_only=True)
    try:
        assert (
            con.execute(
                "SELECT config_id FROM current_config WHERE model_id = ?", [MODEL]
            ).fetchone()[0]
            == ids["s1"]
        )
    finally:
        con.close()


def store_rows(db: Path) -> list[tuple]:
    con = store.connect(db, read_only=True)
    try:
        return (
            con.execute("SELECT config_id, name FROM run_config ORDER BY 1").fetchall()
            + con.execute("SELECT count(*) FROM head_runs").fetchall()
        )
    finally:
        con.close()
