"""qkwh: an analytical warehouse for sniffed post-RoPE Q/K vectors of LLM attention heads."""

from __future__ import annotations

from typing import Any

__all__ = ["__version__", "open"]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("qkwh")  # pyproject.toml is the one place the version is set
    except PackageNotFoundError:  # pragma: no cover - a source tree that is not installed
        return "0+unknown"


def __getattr__(name: str) -> Any:
    # ``qkwh.__version__`` is looked up on first use: importlib.metadata costs tens of
    # milliseconds at start-up, which every command (and ``qkwh --help``) would pay otherwise.
    if name == "__version__":
        value = _version()
        globals()["__version__"] = value
        return value
    raise AttributeError(f"module 'qkwh' has no attribute {name!r}")


def open(path=None):  # qkwh.open, like io.open
    """Open a warehouse read-only for Python: ``qkwh.open("qkwh.duckdb").table("model_summary")``.

    ``path`` defaults to ``$QKWH_WAREHOUSE``, else ./qkwh.duckdb; see :mod:`qkwh.warehouse`."""
    from qkwh.warehouse import Warehouse

    return Warehouse(path)
