"""Columns of numbers as Arrow arrays: the one conversion used by the workers (results leave as
Arrow tables) and by the warehouse writes (:func:`qkwh.store.insert_columns`).  No DuckDB here."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def as_arrow(values: object) -> pa.Array | pa.ChunkedArray:
    """``values`` as an Arrow array: Arrow arrays pass through, a 2-D array becomes a list<float32>
    column (one vector per row), an object array becomes what its Python values make."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values
    if isinstance(values, np.ndarray) and values.ndim == 2:  # rows of vectors -> list<float32>
        flat = pa.array(np.ascontiguousarray(values, dtype=np.float32).ravel())
        return pa.FixedSizeListArray.from_arrays(flat, values.shape[1]).cast(pa.list_(pa.float32()))
    if isinstance(values, np.ndarray) and values.dtype == object:
        return pa.array(values.tolist())
    return pa.array(values)
