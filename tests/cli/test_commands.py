"""The CLI's promises on deleting data and on bad input.

* `remove` and a re-ingest that drops computed results say what they delete, ask on a terminal,
  need --yes otherwise, and delete nothing when refused; `compute --force` says what it replaces.
* `findings <typo>` is not found; commands that need data never create a warehouse.
* `sql --format table|csv|json --max-rows N`: csv and json hold every row and column, the table
  says what it leaves out; `--version`; every run parameter is range-checked.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import duckdb
import pytest

import qkwh
import qkwh.cli.common as cli_common
from tests.conftest import qkwh_cli as cli
from tests.conftest import qkwh_ok as ok
from tests.conftest import snapshot, synth_args

MODEL = "synth-c"


def _computed(root: Path) -> tuple[Path, Path]:
    """(warehouse, data folder): one synthetic model, 4 heads, PCA computed."""
    data, db = root / MODEL, root / "wh.duckdb"
    ok(
        *synth_args(str(data), seed=4),
    )
    ok("ingest", str(data), "--model-id", MODEL, "-w", str(db))
    ok("compute", "-w", str(db), "-a", "pca", "-j", "1")
    return db, data


@pytest.fixture
def computed(tmp_path: Path) -> tuple[Path, Path]:
    """:func:`_computed`, for a test that may change it."""
    return _computed(tmp_path)


@pytest.fixture(scope="module")
def computed_shared(tmp_path_factory) -> tuple[Path, Path]:
    """:func:`_computed` once for the module, for tests that only read it (or check that they
    left it unchanged)."""
    return _computed(tmp_path_factory.mktemp("computed"))


def _count(db: Path, sql: str) -> int:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchone()[0]
    finally:
        con.close()


# ------------------------------------------------------------------------------------------
# destructive commands ask or refuse
# ------------------------------------------------------------------------------------------


def test_remove_says_what_it_deletes_and_needs_yes_without_a_terminal(computed):
    db, _ = computed
    before = snapshot(db)
    r = cli("remove", MODEL, "-w", str(db))
    assert r.exit_code == 2
    assert f"removing {MODEL} deletes" in r.stderr and "4 computed head(s)" in r.stderr
    assert "  pca_heads: 4" in r.stderr and "  files: 6" in r.stderr and "  heads: 4" in r.stderr
    assert "pass --yes" in r.stderr and "nothing was deleted" in r.stderr
    assert snapshot(db) == before

    r = ok("remove", MODEL, "--yes", "-w", str(db))
    assert f"removed {MODEL}" in r.stdout
    assert (
        _count(db, "SELECT count(*) FROM models") == 0
        and _count(db, "SELECT count(*) FROM pca_heads") == 0
    )


def test_remove_on_a_terminal_asks(computed, monkeypatch):
    db, _ = computed
    monkeypatch.setattr(cli_common, "interactive", lambda: True)
    before = snapshot(db)
    r = cli("remove", MODEL, "-w", str(db), input="n\n")
    assert r.exit_code == 1 and "cancelled; nothing was deleted" in r.stderr
    assert "delete it?" in r.stderr
    assert snapshot(db) == before
    r = cli("remove", MODEL, "-w", str(db), input="y\n")
    assert r.exit_code == 0, r.output + r.stderr
    assert _count(db, "SELECT count(*) FROM models") == 0


def test_reingest_that_drops_results_needs_yes(computed):
    db, data = computed
    shutil.rmtree(data / "l01h01q")  # one head gone: its computed results would be dropped
    before = snapshot(db)
    r = cli("ingest", str(data), "--model-id", MODEL, "-w", str(db))
    assert r.exit_code == 2, r.output + r.stderr
    assert (
        f"re-ingesting {MODEL} drops computed results (the files of 1 head(s) changed or are gone): "
        "1 computed head(s); rows: "
    ) in r.stderr
    assert "pca_heads 1" in r.stderr and "head_runs 1" in r.stderr
    assert "pass --yes" in r.stderr
    assert snapshot(db) == before

    r = ok("ingest", str(data), "--model-id", MODEL, "--yes", "-w", str(db))
    assert "replaced" in r.stdout
    assert _count(db, "SELECT count(*) FROM pca_heads") == 3  # the other heads' results are kept
    assert _count(db, "SELECT count(*) FROM pca_heads WHERE layer = 1 AND q_head = 1") == 0


def test_reingest_that_keeps_results_does_not_ask(computed):
    db, data = computed
    r = ok("ingest", str(data), "--model-id", MODEL, "--label", "C", "-w", str(db))
    assert "replaced" in r.stdout and "drops" not in r.stderr
    assert _count(db, "SELECT count(*) FROM pca_heads") == 4


def test_compute_force_says_what_it_replaces(computed):
    db, _ = computed
    r = ok("compute", "-w", str(db), "-a", "pca", "-j", "1", "--force")
    assert (
        "--force: the stored results of 4 computed head(s) (pca) are recomputed and replaced"
        in r.stderr
    )
    assert "computed 4 head(s)" in r.stdout


# ------------------------------------------------------------------------------------------
# small items
# ------------------------------------------------------------------------------------------


def test_findings_of_an_unknown_model_is_not_found(computed_shared):
    db, _ = computed_shared
    r = cli("findings", "synth-x", "-w", str(db))
    assert r.exit_code == 4
    assert (
        f"no model 'synth-x' (did you mean '{MODEL}'?) in the warehouse (have: {MODEL})" in r.stderr
    )
    ok("findings", MODEL, "-w", str(db))


@pytest.mark.parametrize(
    "args",
    [
        ["compute", "-j", "1"],
        ["sql", "SELECT 1"],
        ["models"],
        ["findings"],
        ["remove", "m", "--yes"],
        ["build"],
        ["report"],
        ["export", "models"],
        ["compare", "a", "b"],
        ["docs"],
    ],
)
def test_commands_that_need_data_never_create_a_warehouse(tmp_path: Path, args: list[str]):
    db = tmp_path / "nothing-here.duckdb"
    r = cli(*args, "-w", str(db))
    assert r.exit_code == 4, r.output + r.stderr
    assert f"no warehouse at {db}" in r.stderr
    assert not db.exists() and list(tmp_path.iterdir()) == []


def test_version_prints_the_package_version():
    r = ok("--version")
    assert r.stdout.strip() == f"qkwh {qkwh.__version__}"


def test_sql_formats_give_every_row_and_the_table_says_what_it_cuts(computed_shared):
    db, _ = computed_shared
    query = "SELECT * FROM files ORDER BY layer, head, kind"
    n_cols = len(duckdb.connect(str(db), read_only=True).execute(query).description)

    r = ok("sql", query, "-w", str(db), "--format", "csv", "--max-rows", "2")
    rows = list(csv.reader(io.StringIO(r.stdout)))
    assert (
        len(rows) == 1 + 6 and len(rows[0]) == n_cols
    )  # header + every row; --max-rows is for tables

    r = ok(
        "sql",
        "SELECT layer, head, kind, 'nan'::DOUBLE AS x FROM files ORDER BY 1, 2, 3",
        "-w",
        str(db),
        "-f",
        "json",
    )
    records = json.loads(r.stdout)
    assert len(records) == 6 and records[0] == {"layer": 0, "head": 0, "kind": "k", "x": None}

    r = ok(
        "sql",
        "SELECT layer, head, kind FROM files ORDER BY 1, 2, 3",
        "-w",
        str(db),
        "--max-rows",
        "2",
    )
    assert (
        "showing 2 of 6 rows (--max-rows 0 shows all)" in r.stdout
        and "--format csv or json" in r.stdout
    )
    r = ok(
        "sql",
        "SELECT layer, head, kind FROM files ORDER BY 1, 2, 3",
        "-w",
        str(db),
        "--max-rows",
        "0",
    )
    assert "6 row(s)" in r.stdout and "showing" not in r.stdout
    wide = "SELECT " + ", ".join(f"{i} AS c{i}" for i in range(40))
    r = ok("sql", wide, "-w", str(db))
    assert "showing 13 of 40 columns (left out: c13, c14" in r.stdout  # a 160-column console
    r = cli("sql", "SELECT 1", "-w", str(db), "--format", "xml")
    said = " ".join(r.stderr.replace("│", " ").split())  # rich boxes usage errors
    assert r.exit_code == 2 and "'xml' is not one of 'table', 'csv', 'json'" in said


@pytest.mark.parametrize(
    ("param", "message"),
    [
        ("rotation.t_active=-1", "rotation.t_active must be in [0, 1]; got -1.0"),
        ("rotation.t_active=1.5", "rotation.t_active must be in [0, 1]; got 1.5"),
        ("rotation.max_pairs=0", "rotation.max_pairs must be a positive integer; got 0"),
        ("rotation.omega_grid=0", "rotation.omega_grid must be a positive integer; got 0"),
        ("plasticity.p_alpha=0", "plasticity.p_alpha must be in (0, 1); got 0.0"),
        ("plasticity.p_alpha=1", "plasticity.p_alpha must be in (0, 1); got 1.0"),
        ("plasticity.eps=-1e-9", "plasticity.eps must be >= 0; got -1e-09"),
        ("plasticity.var_floor=nan", "plasticity.var_floor must be a finite number; got nan"),
        (
            "plasticity.normality_max_dims=0",
            "plasticity.normality_max_dims must be a positive integer; got 0",
        ),
        (
            "plasticity.num_pairs_per_bucket=-5",
            "plasticity.num_pairs_per_bucket must be a positive integer; got -5",
        ),
        ("seed=-1", "seed must be >= 0; got -1"),
        ("max_tokens_per_head=0", "max_tokens_per_head must be a positive integer; got 0"),
        ("pca.n_components=0", "pca.n_components must be a positive integer; got 0"),
        ("pca.sign_threshold=2", "pca.sign_threshold must be in [0, 1]; got 2.0"),
    ],
)
def test_out_of_range_parameters_are_refused(computed_shared, param: str, message: str):
    db, _ = computed_shared
    before = snapshot(db)
    r = cli("compute", "-w", str(db), "-j", "1", "-p", param)
    assert r.exit_code == 2
    assert message in r.stderr
    assert snapshot(db) == before


def test_boundary_values_are_accepted():
    from qkwh.params import RunConfig

    cfg = RunConfig().with_overrides(
        {
            "rotation.t_active": "0",
            "pca.sign_threshold": "1",
            "seed": "0",
            "plasticity.eps": "0",
            "plasticity.var_floor": "0",
            "plasticity.p_alpha": "0.999",
            "rotation.max_pairs": "1",
        }
    )
    assert (
        cfg.rotation.t_active == 0.0 and cfg.pca.sign_threshold == 1.0 and cfg.plasticity.eps == 0.0
    )
    with pytest.raises(ValueError, match=r"plasticity\.orientation must be true or false"):
        RunConfig.from_dict({"plasticity": {"orientation": "yes"}})
    with pytest.raises(
        ValueError, match=r"rotation\.max_pairs must be a positive integer; got 2\.5"
    ):
        RunConfig.from_dict({"rotation": {"max_pairs": 2.5}})


def test_report_never_writes_into_a_folder_that_is_not_a_report(computed_shared, tmp_path: Path):
    db, _ = computed_shared
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "index.html").write_text("my own page")
    r = cli("report", "-w", str(db), "-o", str(folder))
    assert r.exit_code == 2 and f"{folder} is not empty and holds no qkwh report" in r.stderr
    assert [p.name for p in folder.iterdir()] == ["index.html"] and (
        folder / "index.html"
    ).read_text() == "my own page"
