"""qkwh: an analytical warehouse for sniffed post-RoPE Q/K vectors of LLM attention heads."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__: str = version("qkwh")  # pyproject.toml is the one place the version is set
except PackageNotFoundError:  # pragma: no cover - imported from a source tree that is not installed
    __version__ = "0+unknown"


def open(path=None):  # qkwh.open, like io.open
    """Open a warehouse read-only for Python: ``qkwh.open("qkwh.duckdb").table("model_summary")``.

    ``path`` defaults to ``$QKWH_WAREHOUSE``, else ./qkwh.duckdb; see :mod:`qkwh.warehouse`."""
    from qkwh.warehouse import Warehouse

    return Warehouse(path)
