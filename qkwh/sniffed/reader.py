"""Read one sniffed parquet file into numpy arrays (columns: docs/input-format.md).

Vectors leave Arrow as one contiguous buffer (``values.to_numpy().reshape(-1, d)``), never via
Python lists.  Schema problems raise :class:`InputError` naming the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from qkwh.errors import InputError

INT_COLUMNS = ("bucket", "example_id", "position")
REQUIRED = (*INT_COLUMNS, "vector")


@dataclass(frozen=True)
class FileData:
    """Rows of one file.  ``vectors`` is (n, d) float32; the others are (n,) int64."""

    path: Path | str  # an hf:// URI stays a string
    vectors: np.ndarray
    position: np.ndarray
    example_id: np.ndarray
    bucket: np.ndarray
    sliding_window_values: tuple[int | None, ...]  # distinct values of the column
    vector_type: str  # 'fixed_size_list' | 'list'

    @property
    def rows(self) -> int:
        return int(self.position.shape[0])

    @property
    def d(self) -> int:
        return int(self.vectors.shape[1])


def check_schema(path: Path | str, schema: pa.Schema) -> str:
    """Validate column names and types; return the vector column's kind."""
    names = set(schema.names)
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise InputError(
            f"{path}: missing column(s) {', '.join(missing)} (have {', '.join(schema.names)})"
        )
    for col in INT_COLUMNS:
        t = schema.field(col).type
        if not pa.types.is_integer(t):
            raise InputError(f"{path}: column {col} has type {t}, expected an integer type")
    vt = schema.field("vector").type
    if pa.types.is_fixed_size_list(vt):
        kind = "fixed_size_list"
    elif pa.types.is_list(vt) or pa.types.is_large_list(vt):
        kind = "list"
    else:
        raise InputError(f"{path}: column vector has type {vt}, expected a list of float32")
    if not pa.types.is_floating(vt.value_type):
        raise InputError(f"{path}: column vector holds {vt.value_type}, expected float32 values")
    if "sliding_window" in names:
        st = schema.field("sliding_window").type
        if not (pa.types.is_integer(st) or pa.types.is_null(st)):
            raise InputError(f"{path}: column sliding_window has type {st}, expected int32 or null")
    return kind


def location(path: Path | str) -> Path | str:
    """``path`` as qkwh names it: an ``hf://`` URI stays a string, anything else is a local Path."""
    return path if isinstance(path, str) and "://" in path else Path(path)


def open_input(path: Path | str, content: bytes | BinaryIO | None = None) -> Path | str | BinaryIO:
    """What pyarrow reads: ``content`` (bytes or a file object) when given, a local path as is,
    an ``hf://`` URI as a file object of huggingface_hub's file system (ranged reads)."""
    if content is not None:
        return (
            pa.BufferReader(content)
            if isinstance(content, (bytes, bytearray, memoryview))
            else content
        )
    if isinstance(path, str):
        from qkwh.sniffed.hubfs import open_file

        return open_file(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    return path


def _open(path: Path | str, content: bytes | BinaryIO | None = None) -> pq.ParquetFile:
    source = open_input(path, content)
    try:  # a remote file: column chunks are fetched in coalesced ranged reads
        return pq.ParquetFile(source, pre_buffer=not isinstance(source, (Path, pa.BufferReader)))
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"{path}: not a readable parquet file ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def read_schema(path: Path | str) -> pa.Schema:
    return _open(location(path)).schema_arrow


def read_file(
    path: Path | str, *, with_vectors: bool = True, content: bytes | BinaryIO | None = None
) -> FileData:
    """Read and type-check one file: a local path or an ``hf://`` URI (from ``content``, bytes or
    an open file, when the caller already holds it).

    Raises :class:`InputError` on any defect that makes the file unusable (missing, unreadable,
    truncated, wrong types, ragged vectors); messages name ``path``.
    """
    path = location(path)
    pf = _open(path, content)
    kind = check_schema(path, pf.schema_arrow)
    cols = list(INT_COLUMNS) + (["vector"] if with_vectors else [])
    if "sliding_window" in pf.schema_arrow.names:
        cols.append("sliding_window")
    try:
        table = pf.read(columns=cols)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(
            f"{path}: cannot decode parquet data ({_first_line(exc)}); the file may be truncated"
        ) from None
    for c in INT_COLUMNS:  # before any conversion: a null would become NaN, then a warning
        if table.column(c).null_count:
            raise InputError(f"{path}: column {c} has {table.column(c).null_count} null value(s)")
    ints = {
        c: table.column(c).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        for c in INT_COLUMNS
    }
    vectors = np.empty((table.num_rows, 0), dtype=np.float32)
    if with_vectors:
        vectors = vectors_to_numpy(path, table.column("vector"))
    sw: tuple[int | None, ...] = (None,)
    if "sliding_window" in table.column_names:
        col = table.column("sliding_window")
        if pa.types.is_null(col.type):
            sw = (None,)
        else:
            uniq = pc.unique(col).to_pylist()
            sw = tuple(sorted(uniq, key=lambda v: (v is not None, v or 0)))
    return FileData(path, vectors, ints["position"], ints["example_id"], ints["bucket"], sw, kind)


def vectors_to_numpy(path: Path | str, column: pa.ChunkedArray) -> np.ndarray:
    """(n, d) float32 array from a (fixed-size) list column; ragged rows raise InputError."""
    arr = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    n = len(arr)
    if arr.null_count:
        raise InputError(f"{path}: column vector has {arr.null_count} null row(s)")
    if pa.types.is_fixed_size_list(arr.type):
        d = arr.type.list_size
        values = arr.values.slice(arr.offset * d, n * d)
    else:
        offsets = arr.offsets.to_numpy()
        lengths = np.diff(offsets)
        if n and (lengths != lengths[0]).any():
            bad = int(np.flatnonzero(lengths != lengths[0])[0])
            raise InputError(
                f"{path}: vector length differs across rows (row 0 has {lengths[0]}, row {bad} has {lengths[bad]})"
            )
        d = int(lengths[0]) if n else 0
        values = arr.values.slice(int(offsets[0]), n * d)
    if values.null_count:
        raise InputError(f"{path}: column vector has {values.null_count} null element(s)")
    out = values.to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
    return out.reshape(n, d) if n else np.empty((0, d), dtype=np.float32)
