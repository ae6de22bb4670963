"""The console entry point (``qkwh``, ``python -m qkwh``, ``python -m qkwh.cli``): it returns the
command's exit code and, before the interpreter shuts down, freezes the heap (``gc.freeze``), so
the shutdown does not walk every object a command left alive (dbt's parsed project after a build:
about a second).  Checked in a fresh interpreter, as facts (exit code, freeze count), not times."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: runs main() on the arguments in argv[1:], and reports at exit whether the heap was frozen
_PROBE = """
import atexit, gc, sys
atexit.register(lambda: print("frozen objects:", gc.get_freeze_count()))
from qkwh.cli import main
main(sys.argv[1:])
"""


def _run(*args: str, cwd: Path, module: str | None = None) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("QKWH_WAREHOUSE", None)
    cmd = [sys.executable, "-m", module] if module else [sys.executable, "-c", _PROBE]
    return subprocess.run(
        [*cmd, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )


def test_the_console_script_is_main():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"qkwh": "qkwh.cli:main"}


@pytest.mark.parametrize(
    ("args", "code"),
    [(["--version"], 0), (["status", "-w", "missing.duckdb"], 4), (["no-such-command"], 2)],
    ids=["ok", "not-found", "usage"],
)
def test_main_exits_with_the_commands_code_and_a_frozen_heap(tmp_path: Path, args, code):
    r = _run(*args, cwd=tmp_path)
    assert r.returncode == code, r.stdout + r.stderr
    frozen = [line for line in r.stdout.splitlines() if line.startswith("frozen objects:")]
    assert len(frozen) == 1 and int(frozen[0].split(":")[1]) > 1000, r.stdout


@pytest.mark.parametrize("module", ["qkwh", "qkwh.cli"])
def test_python_dash_m_runs_the_same_entry_point(tmp_path: Path, module: str):
    ok = _run("--version", cwd=tmp_path, module=module)
    assert ok.returncode == 0 and ok.stdout.startswith("qkwh "), ok.stdout + ok.stderr
    missing = _run("status", "-w", "missing.duckdb", cwd=tmp_path, module=module)
    assert missing.returncode == 4, missing.stdout + missing.stderr
