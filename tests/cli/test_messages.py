"""Messages that help: install hints keep their extra, `qkwh sql` keeps DuckDB's hints, unknown
names get a "did you mean", floats are shown with sensible digits."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from qkwh.cli import app
from tests.conftest import qkwh_cli as cli
from tests.conftest import small_synth_args, synth_args

MODEL = "synth-m"


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
    for args in (
        small_synth_args(data),
        ["ingest", str(data), "--model-id", MODEL, "-w", str(db)],
        ["compute", "-w", str(db), "-a", "pca", "-j", "1"],
    ):
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
    r = cli(
        "capture",
        str(tmp_path / "model"),
        "-t",
        str(doc),
        "-o",
        str(tmp_path / "out"),
        "--max-length",
        "64",
        "--bucket-size",
        "4",
    )
    assert r.exit_code == 2, r.output + r.stderr
    assert "pip install 'qkwh[capture]'" in r.stderr
    assert not (tmp_path / "out").exists()


def test_messages_print_brackets_as_written(warehouse):
    r = cli("sql", "SELECT '[bold]x[/] qkwh[ray]' AS s", "-w", str(warehouse))
    assert r.exit_code == 0 and "[bold]x[/] qkwh[ray]" in r.stdout


# --- qkwh sql keeps DuckDB's hints and shows readable floats ----------------------------------


def test_sql_errors_keep_duckdbs_hints(warehouse):
    r = cli("sql", "SELECT * FROM head_run", "-w", str(warehouse))
    assert r.exit_code == 1
    assert 'Did you mean "head_runs"' in r.stderr
    r = cli("sql", "SELECT model_idd FROM models", "-w", str(warehouse))
    assert r.exit_code == 1
    assert (
        "Candidate bindings" in r.stderr
        and "model_id" in r.stderr.split("Candidate bindings", 1)[1]
    )
    r = cli("sql", "SELEC 1", "-w", str(warehouse))
    assert r.exit_code == 1 and "LINE 1: SELEC 1" in r.stderr and "^" in r.stderr


def test_sql_table_shows_six_significant_digits_csv_and_json_keep_all(warehouse):
    q = "SELECT 1/3 AS third, [2/3, 1e-20/3] AS xs, 12345678.9 AS big"
    r = cli("sql", q, "-w", str(warehouse))
    assert r.exit_code == 0
    assert "0.333333 " in r.stdout and "0.3333333333" not in r.stdout
    assert "[0.666667, 3.33333e-21]" in r.stdout
    r = cli("sql", "SELECT 1/3 AS third", "-f", "csv", "-w", str(warehouse))
    assert r.stdout.splitlines()[1] == repr(1 / 3)
    r = cli("sql", "SELECT 1/3 AS third", "-f", "json", "-w", str(warehouse))
    assert repr(1 / 3) in r.stdout


# --- unknown names get a "did you mean" ------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["compute", "-a", "pcaa"], 2, "unknown analysis 'pcaa' (did you mean 'pca'?)"),
        (
            ["compute", "-m", MODEL + "x"],
            4,
            f"no model '{MODEL}x' (did you mean '{MODEL}'?) in the warehouse (have: {MODEL})",
        ),
        (["findings", MODEL[:-1]], 4, f"(did you mean '{MODEL}'?)"),
        (["remove", MODEL + "x", "--yes"], 4, f"(did you mean '{MODEL}'?)"),
        (
            ["compute", "-p", "plastcity.empirical=true"],
            2,
            "unknown parameter 'plastcity.empirical' (did you mean 'plasticity.empirical'?)",
        ),
        (["runs", "use", "bse"], 4, "no parameter set 'bse'"),
    ],
)
def test_unknown_names_get_a_did_you_mean(warehouse, args, code, says):
    r = cli(*args, "-w", str(warehouse))
    assert r.exit_code == code, r.output + r.stderr
    assert says in r.stderr


# --- build: progress and a summary, dbt's log in its file -------------------------------------


@pytest.mark.slow
def test_build_prints_a_summary_and_keeps_dbts_log_in_its_file(warehouse, tmp_path):
    import shutil

    db = tmp_path / "wh.duckdb"
    shutil.copy(warehouse, db)
    r = cli("build", "-w", str(db))
    assert r.exit_code == 0, r.output + r.stderr
    log = tmp_path / "wh.dbt" / "logs" / "dbt.log"
    assert r.stdout.splitlines()[-1] == f"full log: {log}"
    assert "dbt build ok" in r.stdout
    assert r.stderr.startswith("dbt: building ") and "full log" not in r.stderr, r.stderr
    assert len(r.stdout.splitlines()) <= 3
    assert len(log.read_text().splitlines()) > 200  # everything dbt said is kept there


def test_models_shows_the_label(tmp_path):
    data, db = tmp_path / "d", tmp_path / "wh.duckdb"
    assert (
        cli(
            *synth_args(str(data), layers=1, q_heads=1, head_dim=8, rows=50),
        ).exit_code
        == 0
    )
    assert (
        cli("ingest", str(data), "--model-id", "m1", "--label", "My Model", "-w", str(db)).exit_code
        == 0
    )
    r = cli("models", "-w", str(db))
    header = next(line for line in r.stdout.splitlines() if "model_id" in line)
    assert "label" in header and "My Model" in r.stdout
