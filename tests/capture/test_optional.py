"""The capture extra is optional: the core stays torch-free and a capture without the extra says
what to install."""

from __future__ import annotations

import subprocess
import sys

import pytest

from qkwh.capture.run import CaptureSettings, capture
from qkwh.errors import QkwhError


def test_missing_extra_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    with pytest.raises(QkwhError, match=r"pip install 'qkwh\[capture\]'"):
        capture(CaptureSettings(model="acme/x", texts=(str(tmp_path),)), tmp_path / "out")


def test_core_import_stays_torch_free():
    code = (
        "import sys, qkwh, qkwh.cli, qkwh.capture.run, qkwh.ingest; print('torch' in sys.modules)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr
