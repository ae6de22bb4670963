"""Fixtures of the capture tests (session-scoped tiny models and a JSONL source)."""

from __future__ import annotations

from pathlib import Path

import pytest
from capture_helpers import build_model, need_capture_extra, write_docs


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    need_capture_extra()
    root = tmp_path_factory.mktemp("models")
    return {
        kind: build_model(kind, root / f"tiny-{kind}") for kind in ("llama", "qwen3", "sliding")
    }


@pytest.fixture(scope="session")
def docs(tmp_path_factory) -> Path:
    return write_docs(tmp_path_factory.mktemp("docs") / "docs.jsonl", 6)
