"""The RoPE planes of the warehouse catalog (``rope_frequencies``), as the ``rope`` analysis reads
them: one :class:`~qkwh.analyses.types.RopePlanes` per (model, layer), loaded once per compute
(or per ``qkwh.udf.register``) and handed to each head of that layer."""

from __future__ import annotations

from collections.abc import Sequence

from qkwh import store
from qkwh.analyses.types import RopePlanes

#: the analysis that reads the planes (left out for a model whose frequencies are unknown)
ROPE_ANALYSIS = "rope"

LayerPlanes = dict[tuple[str, int], RopePlanes]


def load_rope_planes(con, models: Sequence[str] | None = None) -> LayerPlanes:
    """(model_id, layer) -> its planes, for ``models`` (None: every model).  A warehouse without
    the catalog table (never opened for writing by this qkwh) has none."""
    import numpy as np

    try:
        rows = con.execute(store.load_sql("rope_planes"), [list(models) if models else None])
    except Exception as exc:  # noqa: BLE001 - a read-only warehouse older than the table
        if "rope_frequencies" in str(exc):
            return {}
        raise
    by_layer: dict[tuple[str, int], list[tuple]] = {}
    for r in rows.fetchall():
        by_layer.setdefault((r[0], int(r[1])), []).append(r)
    out: LayerPlanes = {}
    for key, rs in by_layer.items():
        cols = list(zip(*rs))
        out[key] = RopePlanes(
            plane=np.asarray(cols[2], dtype=np.int64),
            dim_a=np.asarray(cols[3], dtype=np.int64),
            dim_b=np.asarray(cols[4], dtype=np.int64),
            inv_freq=np.asarray(cols[5], dtype=np.float64),
            wavelength=np.asarray(cols[6], dtype=np.float64),
            band=np.asarray(cols[7], dtype=object),
            layout=str(rs[0][8]),
            source=str(rs[0][9]),
        )
    return out


def unknown_frequency_warning(model_id: str) -> str:
    """The one line compute prints for a model left out of the rope analysis."""
    return (
        f"model {model_id!r}: RoPE frequencies unknown, so the {ROPE_ANALYSIS} analysis is left "
        f"out for it (the other analyses run); `qkwh findings {model_id}` says what is missing"
    )
