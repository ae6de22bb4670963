"""huggingface_hub's file system for ``hf://`` paths: opening one file, letting DuckDB read them.

The low layer of reading sniffed files in place on the Hub: :func:`qkwh.sniffed.reader.read_file`
opens an ``hf://`` URI through :func:`open_file`; :mod:`qkwh.sniffed.remote` lists and catalogs
whole branches on top of it; :func:`register` lets a DuckDB connection read such paths (the
``vectors`` view).  Imports no other module of :mod:`qkwh.sniffed` but the Hub endpoint's.

The Hub endpoint comes from ``HF_ENDPOINT`` when the call is made; a token from the usual
huggingface_hub settings (``HF_TOKEN``, the cached login).
"""

from __future__ import annotations

import functools
from typing import BinaryIO

from qkwh.errors import InputError
from qkwh.sniffed.hub import HubError, endpoint

SCHEME = "hf://"
#: minimum bytes per ranged read: a compute worker reads whole column chunks anyway; ingest
#: reads a footer and the integer columns; DuckDB (which names no size) mostly footers
BLOCK_SIZE = 1 << 20
INGEST_BLOCK = 1 << 13
DUCKDB_BLOCK = 1 << 16


def _new_filesystem():
    from huggingface_hub import HfFileSystem

    # an instance of our own: fsspec's shared instances are per thread and keep listings forever.
    # Small default blocks for readers that name none (DuckDB): a footer then costs a small
    # ranged read, not the first 5 MiB of the file.
    return HfFileSystem(endpoint=endpoint(), block_size=DUCKDB_BLOCK, skip_instance_cache=True)


@functools.lru_cache(maxsize=4)
def _filesystem_for(url: str):
    return _new_filesystem()


def filesystem():
    """This process's ``HfFileSystem`` for the current ``HF_ENDPOINT``."""
    return _filesystem_for(endpoint())


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def open_file(
    uri: str,
    *,
    size: int | None = None,
    fs=None,
    cache_type: str = "readahead",
    block_size: int = BLOCK_SIZE,
) -> BinaryIO:
    """An open remote file (ranged reads).  A missing file is an :class:`InputError` worded as for
    a local one; a Hub that cannot be reached is a :class:`HubError`; both name ``uri``."""
    fs = fs or filesystem()
    try:
        if size is None:  # ask the Hub now: a listing cached in this process may be stale
            fs.invalidate_cache(uri)
            size = fs.info(uri)["size"]
        return fs.open(uri, "rb", block_size=block_size, size=size, cache_type=cache_type)
    except FileNotFoundError:
        raise InputError(f"{uri}: no such file") from None
    except OSError as exc:
        raise HubError(f"{uri}: cannot read it from {endpoint()} ({_reason(exc)})") from None


def register(con) -> None:
    """Let DuckDB read ``hf://`` paths on ``con`` through huggingface_hub's file system.

    DuckDB's own ``hf://`` support is an extension that may not be installable; a registered
    fsspec file system takes precedence for its protocol.
    """
    fs = filesystem()
    fs.invalidate_cache()  # file sizes listed for an earlier connection may be stale
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol not in con.list_filesystems():
        con.register_filesystem(fs)
