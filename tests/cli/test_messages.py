"""Messages that help: install hints keep their extra, `qkwh sql` keeps DuckDB's hints, unknown
names get a "did you mean", floats are shown with sensible digits."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qkwh.cli import app

runner = CliRunner()
MODEL = "synth-m"


def cli(*args: str):
    return runner.invoke(app, list(args), terminal_width=200)


def _commands(typer_app, prefix=()):
    for c in typer_app.registered_commands:
        yield (*prefix, c.name or c.callback.__name__)
    for g in typer_app.registered_groups:
        yield (*prefix, g.name)
        yield from _commands(g.typer_instance, (*prefix, g.name))


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("messages")
    data, db = tmp / MODEL, tmp / "wh.duckdb"
    for args in (["synth", str(data), "--layers", "2", "--q-heads", "2", "--kv-heads", "1", "--head-dim", "16",
                  "--rows", "300"],
                 ["ingest", str(data), "--model-id", MODEL, "-w", str(db)],
                 ["compute", "-w", str(db), "-a", "pca", "-j", "1"]):
        r = cli(*args)
        assert r.exit_code == 0, r.output + r.stderr
    return db


# --- install hints keep the extra ------------------------------------------------------------

def test_every_help_text_names_the_extra_in_its_install_hint():
    seen = set()
    for cmd in [(), *_commands(app)]:
        r = cli(*cmd, "--help")
        assert r.exit_code == 0, (cmd, r.output)
        text = re.sub(r"[\s│]+", " ", r.output)  # rich wraps help texts in boxes
        for hint in re.findall(r"pip install '([^']*)'", text):
            assert re.fullmatch(r"qkwh\[[a-z]+\]", hint), (cmd, hint)
            seen.add(hint)
    assert {"qkwh[ray]", "qkwh[capture]"} <= seen


def test_missing_ray_says_which_extra_and_is_bad_input(warehouse, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    r = cli("compute", "-w", str(warehouse), "--executor", "ray", "--force")
    assert r.exit_code == 2, r.output + r.stderr
    assert "pip install 'qkwh[ray]'" in r.stderr


def test_missing_capture_extra_says_which_extra_and_is_bad_input(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    doc = tmp_path / "doc.txt"
    doc.write_text("hello")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    r = cli("capture", str(tmp_path / "model"), "-t", str(doc), "-o", str(tmp_path / "out"), "--max-length", "64",
            "--bucket-size", "4")
    assert r.exit_code == 2, r.output + r.stderr
    assert "pip install 'qkwh[capture]'" in r.stderr
    assert not (tmp_path / "out").exists()


def test_messages_print_brackets_as_written(warehouse):
    r = cli("sql", "SELECT '[bold]x[/] qkwh[ray]' AS s", "-w", str(warehouse))
    assert r.exit_code == 0 and "[bold]x[/] qkwh[ray]" in r.stdout
