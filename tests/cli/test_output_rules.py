"""What the CLI prints, and how: text from the data cannot drive the terminal, lines meant for
pipes never wrap, a closed pipe ends quietly, empty listings say so, refused option combinations
exit 2 in one line, help texts are whole paragraphs with -h, and the commands the demo suggests
work as printed."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from qkwh.cli import app
from tests.conftest import REPO, small_synth_args, snapshot, synth_args
from tests.conftest import qkwh_cli as cli
from tests.conftest import qkwh_ok as ok

MODEL = "synth-o"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    """A small synthetic model (2 layers x 2 query heads), ingested with a hostile label and
    dataset name (terminal escape sequences), its pca computed."""
    tmp = tmp_path_factory.mktemp("output")
    data, db = tmp / MODEL, tmp / "wh.duckdb"
    ok(*small_synth_args(data))
    ok("ingest", str(data), "--model-id", MODEL, "-w", str(db))
    ok(
        "ingest",
        str(data),
        "--model-id",
        "hostile",
        "--label",
        "red\x1b[31mlabel\x1b]0;title\x07",
        "--dataset",
        "clear\x1b[2Jscreen\x9b1m",
        "-w",
        str(db),
    )
    ok("compute", "-w", str(db), "-a", "pca", "-j", "1")
    return db


def _subprocess(*args: str, cwd: Path | None = None, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "QKWH_WAREHOUSE")}
    return subprocess.run(
        [sys.executable, "-m", "qkwh.cli", *args],
        cwd=cwd or REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        **kw,
    )


# --- control characters from the data are shown escaped --------------------------------------


@pytest.mark.parametrize("command", ["models", "status"])
def test_escape_sequences_from_metadata_never_reach_the_terminal(warehouse, command):
    r = ok(command, "-w", str(warehouse))
    text = r.stdout + r.stderr
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", text), repr(text)
    assert "clear\\x1b[2Jscreen\\x9b1m" in text  # shown, escaped
    if command == "models":
        assert "red\\x1b[31mlabel\\x1b]0;title\\x07" in text


# --- to a pipe nothing wraps -------------------------------------------------------------------


def test_a_message_with_a_long_path_stays_one_line_in_a_pipe(tmp_path):
    """COLUMNS unset, stdout a pipe: `wrote PATH` is one line however long PATH is."""
    deep = tmp_path.joinpath(*(["a-rather-long-folder-name"] * 12), "data")
    assert len(str(deep)) > 300
    r = _subprocess(*small_synth_args(deep))
    assert r.returncode == 0, r.stderr
    assert f"wrote {deep}" in r.stdout.splitlines(), r.stdout


# --- a closed pipe ends quietly ----------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("sql", "SELECT * FROM range(200000)", "--format", "csv"),
        # a table of every row: 50,000 rows (700 kB) are ten times the 64 KiB of a pipe's buffer
        # (rich lays out the whole table before it writes: 200,000 rows took 15 s)
        ("sql", "SELECT * FROM range(50000)", "--max-rows", "0"),
        ("models",),
    ],
    ids=["sql-csv", "sql-table", "models"],
)
def test_a_reader_that_stops_early_ends_the_command_quietly(warehouse, args):
    """`qkwh ... | head -1`: exit 0 and nothing on stderr once the reader has gone."""
    env = {k: v for k, v in os.environ.items() if k != "QKWH_WAREHOUSE"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "qkwh.cli", *args, "-w", str(warehouse)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # the reader goes away, as `head -1` does
    err = proc.stderr.read().decode()
    code = proc.wait(120)
    assert code == 0 and "Broken pipe" not in err and "error" not in err, (code, err)


# --- listings ----------------------------------------------------------------------------------


def test_models_shows_the_label_the_marts_show(warehouse):
    """A model ingested without --label is labelled by its id in the marts (int_models): `qkwh
    models` shows the same, not an empty cell."""
    from qkwh import status, store

    con = store.connect(warehouse, read_only=True)
    try:
        cols, rows = status.models_overview(con)
    finally:
        con.close()
    labels = {r[0]: r[cols.index("label")] for r in rows}
    assert labels[MODEL] == MODEL


def test_findings_without_any_say_none(warehouse):
    r = ok("findings", MODEL, "-w", str(warehouse))
    assert r.stdout.startswith("no findings") and "┃" not in r.stdout, r.stdout


def test_an_unknown_export_name_lists_every_table():
    from qkwh.export import _unknown_message

    available = [f"table_{i:03d}" for i in range(60)]
    message = _unknown_message("table or mart", ["no_such_thing"], available)
    assert all(name in message for name in available) and "..." not in message
    hinted = _unknown_message("table or mart", ["summary"], ["model_summary", "heads"], [])
    assert "did you mean model_summary" in hinted


# --- compute refuses what cannot work, in one line ---------------------------------------------


def test_compute_refuses_more_document_groups_than_can_fit(warehouse):
    before = snapshot(warehouse)
    r = cli("compute", "-w", str(warehouse), "-a", "pca", "--documents", "1000000000")
    assert r.exit_code == 2, r.output + r.stderr
    assert r.stderr.startswith("error: document groups 1,000,000,000 cannot fit")
    assert len(r.stderr.splitlines()) == 1
    r = cli(
        "compute",
        "-w",
        str(warehouse),
        "-a",
        "pca,uncertainty",
        "-p",
        "uncertainty.document_groups=1000000000",
    )
    assert r.exit_code == 2 and "cannot fit" in r.stderr, r.stderr
    assert snapshot(warehouse) == before


def test_documents_and_a_contradicting_param_are_refused(warehouse):
    before = snapshot(warehouse)
    r = cli(
        "compute",
        "-w",
        str(warehouse),
        "-a",
        "pca",
        "--documents",
        "20",
        "-p",
        "uncertainty.document_groups=5",
    )
    assert r.exit_code == 2, r.output + r.stderr
    assert "--documents 20 contradicts -p uncertainty.document_groups=5" in r.stderr
    assert snapshot(warehouse) == before


def test_a_compute_error_is_the_first_line(warehouse):
    r = cli("compute", "-w", str(warehouse), "-a", "nosuch")
    assert r.exit_code == 2 and r.stderr.startswith("error: unknown analysis 'nosuch'"), repr(
        r.stderr
    )


# --- help ----------------------------------------------------------------------------------------


def _commands(typer_app, prefix=()):
    for c in typer_app.registered_commands:
        yield (*prefix, c.name or c.callback.__name__.replace("_", "-"))
    for g in typer_app.registered_groups:
        yield (*prefix, g.name)
        yield from _commands(g.typer_instance, (*prefix, g.name))


def test_every_command_takes_h_shows_no_bool_and_takes_warehouse():
    for cmd in [(), *_commands(app)]:
        short = cli(*cmd, "-h")
        assert short.exit_code == 0, (cmd, short.output)
        assert short.output == cli(*cmd, "--help").output, cmd
        assert "<bool>" not in short.output, cmd
        if (cmd and cmd != ("runs",) and cmd[0] != "runs") or cmd == ("runs", "list"):
            assert "--warehouse" in short.output, cmd


def test_help_paragraphs_are_not_broken_where_the_source_breaks_them(monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # room for a whole paragraph on one line
    r = cli("report", "-h")
    line = next(ln for ln in r.output.splitlines() if "index.html holds" in ln)
    assert "parameter set is partial." in line, r.output


# --- synth --warehouse -------------------------------------------------------------------------


def test_synth_with_a_warehouse_ingests_what_it_wrote(tmp_path):
    data, db = tmp_path / "synth-w", tmp_path / "wh.duckdb"
    ok(*small_synth_args(data), "--warehouse", str(db))
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT model_id FROM models").fetchall() == [("synth-w",)]
    finally:
        con.close()


# --- the demo's next steps work without an active virtualenv --------------------------------


def test_the_demo_names_the_qkwh_of_this_installation_when_path_does_not(tmp_path, monkeypatch):
    from qkwh.demo import next_steps

    monkeypatch.setenv("PATH", str(tmp_path))  # a shell where the virtualenv is not active
    monkeypatch.chdir(tmp_path)
    steps = next_steps(tmp_path / "qkwh.duckdb")
    command = steps[0].rsplit(" models", 1)[0]
    assert command != "qkwh", steps
    r = subprocess.run(
        # a shell command: the path is quoted when it holds a space
        [*shlex.split(command), "--version"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and r.stdout.startswith("qkwh "), (command, r.stderr)


# --- build and compare (one dbt build) -----------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(warehouse, the build's Result): two small synthetic models (2 layers each: too few for
    the layer bootstrap), computed with the document-group jackknife, then built."""
    tmp = tmp_path_factory.mktemp("built")
    db = tmp / "wh.duckdb"
    for model, seed in (("synth-a", 1), ("synth-b", 2)):
        ok(*synth_args(tmp / model, seed=seed))
        ok("ingest", str(tmp / model), "--model-id", model, "-w", str(db))
    ok("compute", "-w", str(db), "-j", "1", "--documents", "4")
    return db, cli("build", "-w", str(db))


@pytest.mark.slow
def test_build_names_its_log_once_and_counts_what_it_builds(built):
    _, r = built
    assert r.exit_code == 0, r.output + r.stderr
    said = r.stdout + r.stderr
    assert said.count("full log") == 1, said
    summary = next(line for line in r.stdout.splitlines() if line.startswith("dbt build"))
    # nodes dbt selected (its hooks, `operation`, are no nodes)
    done = sum(int(n) for kind, n in re.findall(r"(\w+) \w+=(\d+)", summary) if kind != "operation")
    planned = re.search(r"dbt: building (\d+) nodes", r.stderr)
    assert planned is None or int(planned.group(1)) == done, (r.stderr, summary)
    # dbt's unit tests run only with --unit-tests: neither planned nor run here
    assert "unit test" not in r.stderr and "unit_test" not in summary, (r.stderr, summary)


@pytest.mark.slow
def test_compare_names_direction_model_and_threshold(built):
    """After `compute --documents` and a build, `compare` does not ask for `--documents` again,
    says which way the difference goes, and names the models without an interval and the layers
    the bootstrap needs."""
    db, _ = built
    r = ok("compare", "synth-a", "synth-b", "-w", str(db))
    assert "difference = A − B = synth-a − synth-b" in r.stdout
    assert "--documents" not in r.stdout and "interval shown" not in r.stdout, r.stdout
    notes = [line for line in r.stdout.splitlines() if line.startswith("note:")]
    assert notes and all(
        "synth-a has 2 layer(s) with a value and synth-b has 2 layer(s)" in n
        and "needs at least 5" in n
        for n in notes
    ), notes
