"""`qkwh models` and `qkwh status` never cut a model id or a parameter set short.

They print a table when every cell fits the terminal whole, and otherwise one block per model;
in both layouts every line fits the width and every full value is on the screen.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import qkwh.cli.output as cli_module
from qkwh.cli import app
from tests.conftest import small_synth_args

runner = CliRunner()
LONG_ID = "a-model-id-long-enough-to-be-cut-short-in-a-table"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("listings")
    data, db = tmp / "data", tmp / "wh.duckdb"
    for args in (
        small_synth_args(data),
        ["ingest", str(data), "--model-id", LONG_ID, "--dataset", "planted-prose", "-w", str(db)],
        ["compute", "-w", str(db), "-a", "pca", "-j", "1"],
    ):
        r = runner.invoke(app, args)
        assert r.exit_code == 0, r.output
    return db


def _config_id(db: Path) -> str:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT DISTINCT config_id FROM pca_heads").fetchone()[0]
    finally:
        con.close()


@pytest.mark.parametrize("command", ["models", "status"])
@pytest.mark.parametrize("width", [60, 80, 400])
def test_every_line_fits_and_nothing_is_cut_short(
    warehouse: Path, command: str, width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_module.out, "width", width)
    monkeypatch.setattr(cli_module.out, "soft_wrap", False)  # a terminal (a pipe never wraps)
    r = runner.invoke(app, [command, "-w", str(warehouse)])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= width
    assert "…" not in r.stdout
    assert LONG_ID in r.stdout and "planted-prose" in r.stdout
    if command == "status":
        assert f"{_config_id(warehouse)[:16]}: 4/4" in r.stdout
    table = any(line.startswith("model_id") for line in lines)
    assert table == (width == 400), r.stdout  # the table where it fits, blocks where it does not


def test_blocks_name_every_column_once_per_model(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_module.out, "width", 80)
    r = runner.invoke(app, ["models", "-w", str(warehouse)])
    lines = r.stdout.splitlines()
    assert lines[1] == LONG_ID
    fields = dict(
        line.split(None, 1)
        for line in lines[2:]
        if line.startswith("  ") and line.split(None, 1)[1:]
    )
    assert (
        fields["dataset"] == "planted-prose" and fields["pca"] == "4" and fields["rotation"] == "0"
    )
