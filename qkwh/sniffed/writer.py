"""Write the sniffer's on-disk layout (docs/input-format.md): one zstd parquet per (layer, head, kind)
and the ``_saver_state.json`` beside them.  Shared by :mod:`qkwh.synth` and :mod:`qkwh.capture`
so both produce exactly what :mod:`qkwh.sniffed.reader` and ingest expect.

Every file is written to a temporary name in the same folder and renamed into place, so a reader
(or an interrupted writer) never sees a half-written file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from qkwh.sniffed.layout import DATA_FILE

SAVER_STATE = "_saver_state.json"


def config_name(layer: int, head: int, kind: str) -> str:
    """``l{LL}h{HH}{q|k}``: the folder of one file (``head`` is the KV head for kind 'k')."""
    if kind not in ("q", "k"):
        raise ValueError(f"kind must be 'q' or 'k', not {kind!r}")
    return f"l{int(layer):02d}h{int(head):02d}{kind}"


def data_path(root: Path, layer: int, head: int, kind: str) -> Path:
    """``<root>/l{LL}h{HH}{q|k}/data.parquet``."""
    return Path(root) / config_name(layer, head, kind) / DATA_FILE


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_vectors_file(
    path: Path,
    *,
    position: np.ndarray,
    example_id: np.ndarray,
    bucket: np.ndarray,
    vectors: np.ndarray,
    sliding_window: int | None = None,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """Write one sniffer file atomically.  ``extra``: optional columns (Arrow arrays of n rows)
    appended after the standard ones (the exact attention of ``qkwh capture``).

    Columns (docs/input-format.md): bucket int32, example_id int32, position int32,
    vector fixed_size_list<float32>[d], sliding_window int32 (null for full attention);
    zstd.  ``vectors`` is (n, d); the other arrays are (n,).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    n, d = vectors.shape
    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1), type=pa.float32())
    window = (
        pa.nulls(n, type=pa.int32())
        if sliding_window is None
        else pa.array(np.full(n, int(sliding_window), dtype=np.int32), type=pa.int32())
    )
    table = pa.table(
        {
            "bucket": pa.array(np.asarray(bucket, dtype=np.int32), type=pa.int32()),
            "example_id": pa.array(np.asarray(example_id, dtype=np.int32), type=pa.int32()),
            "position": pa.array(np.asarray(position, dtype=np.int32), type=pa.int32()),
            "vector": pa.FixedSizeListArray.from_arrays(flat, d),
            "sliding_window": window,
            **dict(extra or {}),
        }
    )
    sink = pa.BufferOutputStream()
    # dictionary encoding of 1M random floats is wasted work (2.5x slower writes): ints only
    pq.write_table(
        table, sink, compression="zstd", use_dictionary=["bucket", "example_id", "position"]
    )
    atomic_write_bytes(Path(path), sink.getvalue().to_pybytes())


def write_saver_state(
    root: Path, *, model_name: str, metadata: Mapping[str, Any], bucket_counts: Mapping[int, int]
) -> Path:
    """``<root>/_saver_state.json`` like the sniffer's saver: model name, flat metadata and the
    row count per bucket id summed over every file."""
    state = {
        "bucket_counts": {str(k): int(v) for k, v in sorted(bucket_counts.items())},
        "model_metadata": dict(metadata),
        "model_name": model_name,
    }
    path = Path(root) / SAVER_STATE
    atomic_write_bytes(path, (json.dumps(state, indent=2, sort_keys=True) + "\n").encode())
    return path
