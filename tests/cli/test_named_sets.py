"""Named parameter sets through the CLI: a set covering only some analyses can be computed further
by name, a named compute makes its set current even when every head is unchanged, and `qkwh runs`
speaks in names (use, diff, an unknown name)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from qkwh import store
from tests.conftest import SMALL_SYNTH
from tests.conftest import qkwh_cli as cli
from tests.conftest import qkwh_ok as ok

HEX16 = re.compile(r"\b[0-9a-f]{16}\b")


def current(db: Path) -> dict[tuple[str, str], str]:
    """(model, analysis) -> name (or config_id) of the current set."""
    con = store.connect(db, read_only=True)
    try:
        return {
            (m, a): n
            for m, a, n in con.execute(
                "SELECT c.model_id, c.analysis, coalesce(r.name, c.config_id) FROM current_config c "
                "JOIN run_config r USING (config_id)"
            ).fetchall()
        }
    finally:
        con.close()


@pytest.fixture(scope="module")
def sets(tmp_path_factory) -> tuple[Path, Path]:
    """m1 computed as set `base` (every analysis), then set `exh` with rotation only; m2 ingested
    but not computed."""
    tmp = tmp_path_factory.mktemp("named")
    db = tmp / "wh.duckdb"
    ok("synth", str(tmp / "d1"), *SMALL_SYNTH)
    ok("synth", str(tmp / "d2"), *SMALL_SYNTH, "--seed", "3")
    ok("ingest", str(tmp / "d1"), "--model-id", "m1", "-w", str(db))
    ok("compute", "-w", str(db), "-j", "1", "--name", "base")
    ok(
        "compute",
        "-w",
        str(db),
        "-j",
        "1",
        "--name",
        "exh",
        "-a",
        "rotation",
        "-p",
        "rotation.pairing=row_order",
    )
    ok("ingest", str(tmp / "d2"), "--model-id", "m2", "-w", str(db))
    return db, tmp


def _copy(db: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy.duckdb"
    shutil.copy(db, dst)
    return dst


def test_a_set_covering_some_analyses_is_computed_further_by_name(sets, tmp_path):
    db = _copy(sets[0], tmp_path)
    r = ok("compute", "-w", str(db), "-j", "1", "--name", "exh")
    assert "computed 4 head(s), skipped 4 unchanged (set exh: rotation=" in r.stdout
    cur = current(db)
    assert cur[("m2", "rotation")] == "exh" and ("m2", "pca") not in cur  # only what the set covers


def test_a_named_compute_that_skips_every_head_makes_its_set_current(sets, tmp_path):
    db = _copy(sets[0], tmp_path)
    ok("runs", "use", "base", "-w", str(db))
    assert current(db)[("m1", "rotation")] == "base"
    r = ok("compute", "-w", str(db), "-j", "1", "--name", "exh", "-m", "m1")
    assert "computed 0 head(s), skipped 4 unchanged" in r.stdout
    assert current(db)[("m1", "rotation")] == "exh"
    assert current(db)[("m1", "pca")] == "base"


def test_runs_use_prints_names(sets, tmp_path):
    db = _copy(sets[0], tmp_path)
    r = ok("runs", "use", "base", "-w", str(db))
    assert "m1 rotation: current set is now base" in r.stdout
    assert not HEX16.search(r.stdout)


def test_runs_diff_shows_parameter_values_not_hashes(sets):
    r = ok("runs", "diff", "base", "exh", "-w", str(sets[0]))
    assert not HEX16.search(r.stdout), r.stdout
    assert re.search(
        r"rotation\s*│\s*rotation\.pairing\s*│\s*independent\s*│\s*row_order", r.stdout
    )
    assert re.search(r"pca\s*│\s*\(only in A\)\s*│\s*defaults\s*│\s*not computed", r.stdout)


def test_an_unknown_set_lists_the_names_once_with_a_did_you_mean(sets):
    r = cli("runs", "use", "nosuch", "-w", str(sets[0]))
    assert r.exit_code == 4
    assert "no parameter set 'nosuch' (have: base, exh)" in r.stderr
    r = cli("runs", "use", "exx", "-w", str(sets[0]))
    assert r.exit_code == 4 and "(did you mean 'exh'?)" in r.stderr
