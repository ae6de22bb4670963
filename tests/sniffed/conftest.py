"""Fixtures of the Hub tests: the environment of a user whose HF endpoint is the local stand-in."""

from __future__ import annotations

import pytest


@pytest.fixture
def hf_env(tmp_path, monkeypatch):
    """A private HF cache and home under tmp_path, plain HTTP (no Xet), short timeouts, no token;
    the test points HF_ENDPOINT at its stand-in.  Returns tmp_path."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "5")
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "10")
    for name in ("HF_HUB_OFFLINE", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path
