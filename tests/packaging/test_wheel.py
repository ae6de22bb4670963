"""qkwh installs anywhere: the wheel carries every run-time file, an installed `qkwh demo` runs
end to end from an empty folder, writing only there, and the Python entry point (`qkwh.open`)
reads its warehouse in the wheel's own environment.

The source tree is copied to a temporary folder first (so the build writes nothing into the
checkout), with leftovers of a working copy planted in it (dbt's target/ and logs/, .user.yml, a
warehouse) that the wheel must not carry.  The end-to-end test installs the wheel with its
dependencies (from pip's configured indexes and cache) into a fresh venv outside the repository
and runs the installed console script with PYTHONPATH unset.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.packaging  # builds a wheel and installs it into a new virtualenv

REPO = Path(__file__).resolve().parents[2]
DATA = "qkwh/_data/"
# what a working copy may hold that is not part of the package source
_IGNORED = shutil.ignore_patterns(
    ".git",
    ".venv",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    "*.duckdb",
    "*.duckdb.wal",
    "*.dbt",
    "target",
    "logs",
    ".user.yml",
    "results",
    "export",
)


def _not_source(folder: str, names: list[str]) -> set[str]:
    ignored = set(_IGNORED(folder, names))
    if Path(folder) == REPO / "reports":  # generated reports
        ignored |= {n for n in names if (Path(folder) / n).is_dir()}
    return ignored


LEFTOVERS = (
    "dbt_project/target/manifest.json",
    "dbt_project/logs/dbt.log",
    "dbt_project/.user.yml",
    "warehouse/qkwh.duckdb",
    "configs/__pycache__/x.pyc",
)


def _bundled_sources() -> set[str]:
    """Repository files the wheel must carry under qkwh/_data (relative paths)."""
    out = {"warehouse/schema.sql"}
    for folder in ("warehouse/sample", "configs", "dbt_project", "docs"):
        for p in (REPO / folder).rglob("*"):
            rel = p.relative_to(REPO)
            if (
                p.is_file()
                and not any(part in ("target", "logs", "__pycache__") for part in rel.parts)
                and p.name != ".user.yml"
            ):
                out.add(rel.as_posix())
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src") / "qkwh"
    shutil.copytree(REPO, src, ignore=_not_source)
    for rel in LEFTOVERS:  # a developer's working copy: none of this may reach the wheel
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text("leftover")
    dist = tmp_path_factory.mktemp("dist")
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-q", "-w", str(dist)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (whl,) = dist.glob("qkwh-*.whl")
    return whl


def test_wheel_carries_the_run_time_files_and_no_leftovers(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    bundled = {n[len(DATA) :] for n in names if n.startswith(DATA)}
    assert bundled == _bundled_sources()
    for must in (
        "dbt_project/dbt_project.yml",
        "dbt_project/profiles.yml",
        "configs/models.csv",
        "configs/run.yaml",
        "warehouse/sample/smollm2-135m/_saver_state.json",
        "docs/README.md",
        "docs/metrics/plasticity.md",
    ):
        assert must in bundled
    assert {f"qkwh/sql/{p.name}" for p in (REPO / "qkwh" / "sql").glob("*.sql")} <= names
    assert not [
        n
        for n in names
        if "/target/" in n or "/logs/" in n or n.endswith((".user.yml", ".duckdb", ".pyc"))
    ]


def test_one_version_string(wheel: Path):
    import tomllib

    import qkwh

    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert qkwh.__version__ == version
    assert wheel.name.startswith(f"qkwh-{version}-")


def _tree_state(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file() or p.is_dir()
    }


PYTHON_API = """
import importlib.util, json, sys
import numpy as np, pyarrow as pa
import qkwh
wh = qkwh.open("qkwh.duckdb")
names = wh.tables()
summary = wh.table("model_summary")
arrays = wh.table("head_taxonomy").to_numpy()
rows = wh.sql("SELECT model_id, n_heads FROM model_summary WHERE n_heads > ? ORDER BY 1", [0]).to_pylist()
has_pandas = importlib.util.find_spec("pandas") is not None
try:
    frame = summary.to_pandas()
    pandas = type(frame).__name__
except ImportError as exc:
    pandas = str(exc)
print(json.dumps({"has_model_summary": "model_summary" in names, "arrow": isinstance(summary.to_arrow(), pa.Table),
                  "numpy": all(isinstance(v, np.ndarray) for v in arrays.values()), "n_taxonomy": len(next(iter(arrays.values()))),
                  "rows": rows, "has_pandas": has_pandas, "pandas": pandas}))
"""


@pytest.mark.slow
def test_installed_wheel_runs_the_demo_from_an_empty_folder(wheel: Path, tmp_path: Path):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "QKWH_WAREHOUSE", "PYTHONSTARTUP")
    }
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env, timeout=300)
    py = venv / "bin" / "python"
    r = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]

    work = tmp_path / "work"
    work.mkdir()
    env["HOME"] = str(tmp_path / "home")  # nothing may depend on (or land in) the user's home
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
            env=env,
            cwd=work,
        ).stdout.strip()
    )
    r = subprocess.run(
        [str(py), "-c", "import qkwh, qkwh.paths as p; print(qkwh.__file__); print(p.DATA_ROOT)"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=work,
    )
    module_file, data_root = r.stdout.split()
    assert Path(module_file).is_relative_to(site) and not Path(module_file).is_relative_to(REPO)
    assert Path(data_root) == site / "qkwh" / "_data"
    before = _tree_state(site)

    r = subprocess.run(
        [str(venv / "bin" / "qkwh"), "demo"],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]

    assert _tree_state(site) == before, "the demo wrote into site-packages"
    wh = work / "qkwh.duckdb"  # the default warehouse: every command finds it in this folder
    assert wh.is_file()
    assert (work / "qkwh.dbt" / "target" / "manifest.json").is_file()
    assert (work / "qkwh.dbt" / "logs" / "dbt.log").is_file()
    report = work / "reports" / "demo"
    assert (report / "index.html").is_file() and (report / "figures.json").is_file()
    assert (report / "vega.js").is_file() and list((report / "models").glob("*.html"))
    assert 'class="vl-spec"' in (report / "index.html").read_text()  # specs inline, once
    assert not (report / "figures").exists()  # PNG / SVG only with --static
    assert sorted(p.name for p in work.iterdir()) == ["qkwh.dbt", "qkwh.duckdb", "reports"]
    r = subprocess.run(
        [str(venv / "bin" / "qkwh"), "models"],
        capture_output=True,
        text=True,
        env=env,  # a pipe: a table where it fits 160 columns, else one block per model
        cwd=work,
    )
    assert r.returncode == 0, r.stderr
    assert {"smollm2-135m", "smollm2-135m-code"} <= set(r.stdout.split()), r.stdout

    # the Python entry point, in the wheel's own environment (nothing else installed): Arrow and
    # numpy without knowing DuckDB, and to_pandas says what it needs when pandas is not there
    r = subprocess.run(
        [str(py), "-c", PYTHON_API], capture_output=True, text=True, env=env, cwd=work, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout)
    assert got["has_model_summary"] and got["arrow"] and got["numpy"] and got["n_taxonomy"] == 24
    # the two embedded samples: one model on two datasets, 12 heads each
    assert got["rows"] == [
        {"model_id": "smollm2-135m", "n_heads": 12},
        {"model_id": "smollm2-135m-code", "n_heads": 12},
    ]
    if got["has_pandas"]:
        assert got["pandas"] == "DataFrame"
    else:
        assert "needs pandas (pip install pandas)" in got["pandas"]
