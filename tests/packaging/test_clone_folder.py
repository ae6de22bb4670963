"""`import qkwh` from the folder that holds a clone named ``qkwh`` finds the installed package,
not the clone folder as an empty namespace package.

Python's import system takes a folder without ``__init__.py`` on ``sys.path`` (here the working
directory, first on ``sys.path`` for ``python -c``) as a namespace package unless a regular
package of the same name is found on ``sys.path``.  An editable install through an import hook
(setuptools' finder, which runs after the path search) loses to it, so ``qkwh.open`` went
missing; an editable install that puts the source root on ``sys.path`` (a ``.pth`` line) wins.

The test builds the editable wheel of a copy of the source with setuptools' PEP 660 hook (no
network: the build runs in this environment), unpacks it into a bare virtualenv, and imports qkwh
in a subprocess whose working directory is the clone's parent folder, with PYTHONPATH unset.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.packaging  # builds an editable wheel and a virtualenv

REPO = Path(__file__).resolve().parents[2]
PROJECT_FILES = ("pyproject.toml", "setup.py", "README.md", "MANIFEST.in")


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PIP_NO_INDEX"] = "1"
    return env


def _editable_wheel(project: Path, out: Path) -> Path:
    code = "import setuptools.build_meta as b, sys; print(b.build_editable(sys.argv[1]))"
    r = subprocess.run(
        [sys.executable, "-c", code, str(out)],
        cwd=project,
        env=_clean_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return out / r.stdout.strip().splitlines()[-1]


def test_import_from_the_parent_of_a_clone_named_qkwh(tmp_path: Path):
    parent = tmp_path / "projects"
    clone = parent / "qkwh"  # the folder name a clone gets by default
    clone.mkdir(parents=True)
    for name in PROJECT_FILES:
        shutil.copy2(REPO / name, clone / name)
    shutil.copytree(REPO / "qkwh", clone / "qkwh", ignore=shutil.ignore_patterns("__pycache__"))
    wheel = _editable_wheel(clone, tmp_path / "dist")

    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, env=_clean_env()
    )
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        env=_clean_env(),
    ).stdout.strip()
    with zipfile.ZipFile(wheel) as zf:  # what pip does with an editable wheel, minus metadata
        zf.extractall(purelib)
    assert sysconfig.get_paths()["purelib"] != purelib  # the bare venv, not this environment

    r = subprocess.run(
        [str(python), "-c", "import qkwh; print(qkwh.__file__); print(callable(qkwh.open))"],
        cwd=parent,
        env=_clean_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    where, has_open = r.stdout.split()
    assert Path(where) == clone / "qkwh" / "__init__.py"
    assert has_open == "True"
