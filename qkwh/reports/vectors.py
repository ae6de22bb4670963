"""The one reader of raw vectors and stored axes: row-level points for the collages.

Every other figure reads marts only (``Marts.rows``).  No mart holds per-row projections, so the
collages read the head's parquet rows (located through the ``files`` catalog, the same files the
``vectors`` view reads) and the axes that ``qkwh compute`` stored (``rotation_axes``,
``pca_axes``); this module is the only place in the report layer that touches those tables.
Projection is a presentation transform; no axis or metric is recomputed here.  Like the marts,
only the axes of the parameter set the model's marts report are read (``model_summary``'s
``config_id_pca`` / ``config_id_rotation``), so a warehouse holding several sets draws one.

* {a, b} plane (docs/metrics/rotation.md): raw, uncentred projections ``aᵀx``, ``bᵀx``.
* PCA plane (docs/metrics/pca.md): ``z_i = (x − mean)·pc_i`` with the stored pooled mean.
* complement pairs (the complement SVD of the rotation model): ``(x − mean)·w_j``; pair i = (w_{2i}, w_{2i+1}).

Heads are chosen with ``random.Random(42).sample(heads, 4)`` over the model's heads
(sorted by layer, query head) that have the needed axes.  Rows are capped per kind with a
seeded sample so the HTML stays small and the report is reproducible.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from qkwh.errors import MissingFilesError
from qkwh.reports.base import Marts, NoData, head_label
from qkwh.sniffed.globs import escape_glob
from qkwh.store import missing_files_message

_SET_COLUMN = {"pca_axes": "config_id_pca", "rotation_axes": "config_id_rotation"}


def _set_filter(marts: Marts, table: str, model_id: str) -> tuple[str, list[Any]]:
    """SQL condition and parameters keeping the rows of the parameter set the marts report (none
    when the marts predate the config_id columns)."""
    col = _SET_COLUMN[table]
    rows = (
        marts.rows("model_summary", "model_id = ?", [model_id])
        if marts.has("model_summary")
        else []
    )
    if not rows or col not in rows[0]:
        return "", []
    return " AND config_id IS NOT DISTINCT FROM ?", [rows[0][col]]


@dataclass(frozen=True)
class Head:
    layer: int
    q_head: int
    k_head: int

    @property
    def label(self) -> str:
        return head_label(self.layer, self.q_head)


def heads_with_axes(marts: Marts, table: str, model_id: str, axes: Sequence[str]) -> list[Head]:
    """Heads of ``model_id`` that have every axis of ``axes`` in ``table``, sorted."""
    if not marts.has(table):
        raise NoData(f"the warehouse has no `{table}` table (recompute with a qkwh that stores it)")
    cond, args = _set_filter(marts, table, model_id)
    rows = marts.con.execute(
        f'SELECT layer, q_head, any_value(k_head) FROM "{table}" '
        f"WHERE model_id = ? AND list_contains(?::VARCHAR[], axis){cond} "
        "GROUP BY layer, q_head HAVING count(DISTINCT axis) = ? ORDER BY layer, q_head",
        [model_id, list(axes), *args, len(set(axes))],
    ).fetchall()
    return [Head(int(layer), int(q), int(k)) for layer, q, k in rows]


def complement_axes(marts: Marts, model_id: str, head: Head) -> list[int]:
    """Indices j of the complement directions ``w<j>`` stored for ``head``, sorted."""
    cond, args = _set_filter(marts, "rotation_axes", model_id)
    names = marts.con.execute(
        "SELECT axis FROM rotation_axes WHERE model_id = ? AND layer = ? AND q_head = ? "
        f"AND regexp_full_match(axis, 'w[0-9]+'){cond}",
        [model_id, head.layer, head.q_head, *args],
    ).fetchall()
    return sorted(int(n[0][1:]) for n in names)


def seeded_sample(heads: list[Head], n: int = 4, seed: int = 42) -> list[Head]:
    """``random.Random(seed).sample(heads, n)`` (all heads when fewer), shown in head order."""
    if len(heads) <= n:
        return list(heads)
    picked = random.Random(seed).sample(heads, n)
    return sorted(picked, key=lambda h: (h.layer, h.q_head))


def axes_of(
    marts: Marts, table: str, model_id: str, head: Head, axes: Sequence[str]
) -> dict[str, np.ndarray]:
    cond, args = _set_filter(marts, table, model_id)
    rows = marts.con.execute(
        f'SELECT axis, vec FROM "{table}" WHERE model_id = ? AND layer = ? AND q_head = ? '
        f"AND list_contains(?::VARCHAR[], axis){cond}",
        [model_id, head.layer, head.q_head, list(axes), *args],
    ).fetchall()
    out = {a: np.asarray(v, dtype=np.float64) for a, v in rows if v is not None}
    missing = [a for a in axes if a not in out]
    if missing:
        raise NoData(f"{model_id} {head.label}: axes {', '.join(missing)} missing in {table}")
    return out


def head_rows(
    marts: Marts, model_id: str, layer: int, head: int, kind: str, max_points: int
) -> tuple[np.ndarray, np.ndarray]:
    """(positions, vectors n×d) of one q or k file, at most ``max_points`` rows (seeded sample)."""
    found = marts.con.execute(
        "SELECT path FROM files WHERE model_id = ? AND layer = ? AND head = ? AND kind = ?",
        [model_id, layer, head, kind],
    ).fetchall()
    if not found:
        raise NoData(f"{model_id}: no {kind} file for layer {layer} head {head}")
    if not found[0][0].startswith("hf://") and not os.path.exists(found[0][0]):
        _missing_files(marts, model_id)
    tbl = marts.con.sql(
        "SELECT position, vector FROM read_parquet(?) ORDER BY example_id, position",
        params=[escape_glob(found[0][0])],  # the cataloged file, never a pattern
    ).to_arrow_table()
    pos = tbl.column("position").to_numpy().astype(np.int64)
    vec = tbl.column("vector").combine_chunks()
    if isinstance(vec, pa.ChunkedArray):  # pragma: no cover - combine_chunks returns an Array
        vec = vec.chunk(0)
    n = len(vec)
    flat = vec.flatten().to_numpy(zero_copy_only=False).astype(np.float64)
    X = flat.reshape(n, -1) if n else np.zeros((0, 0))
    if n > max_points:
        seed = 1_000_003 * layer + 1009 * head + (0 if kind == "q" else 1)
        idx = np.sort(np.random.default_rng(seed).choice(n, max_points, replace=False))
        pos, X = pos[idx], X[idx]
    return pos, X


def _missing_files(marts: Marts, model_id: str) -> None:
    """Raise the one-line error naming the model, a missing file and the fix (the model's folder
    was moved or deleted after ingest)."""
    paths = [
        p
        for (p,) in marts.con.execute(
            "SELECT path FROM files WHERE model_id = ? ORDER BY path", [model_id]
        ).fetchall()
    ]
    gone = [p for p in paths if not p.startswith("hf://") and not os.path.exists(p)]
    raise MissingFilesError(missing_files_message(model_id, len(gone), len(paths), gone[0]))


def _round(x: np.ndarray, digits: int = 4) -> list[float]:
    """Values rounded to ``digits`` significant digits of the column's magnitude (smaller HTML)."""
    m = float(np.nanmax(np.abs(x))) if x.size else 0.0
    dec = max(0, digits - 1 - int(np.floor(np.log10(m)))) if m > 0 else 0
    return np.round(x, dec).tolist()


def project(
    marts: Marts,
    model_id: str,
    head: Head,
    axes: dict[str, np.ndarray],
    dims: Sequence[tuple[str, str]],
    *,
    center: bool,
    max_points: int,
) -> list[dict[str, Any]]:
    """Records (kind, position, <name>...) of the head's Q and K rows projected on ``dims``.

    ``dims`` is [(output column, axis name)]; ``center`` subtracts the stored axis 'mean'.
    """
    out: list[dict[str, Any]] = []
    for kind, h in (("q", head.q_head), ("k", head.k_head)):
        pos, X = head_rows(marts, model_id, head.layer, h, kind, max_points)
        if X.shape[0] == 0:
            continue
        d = X.shape[1]
        for _name, ax in dims:
            if axes[ax].shape[0] != d:
                raise NoData(
                    f"{model_id} {head.label}: axis {ax} has {axes[ax].shape[0]} dims, vectors {d}"
                )
        Y = X - axes["mean"] if center else X
        cols = {name: _round(Y @ axes[ax]) for name, ax in dims}
        K = kind.upper()
        for i in range(X.shape[0]):
            rec = {"kind": K, "position": int(pos[i])}
            for name in cols:
                rec[name] = cols[name][i]
            out.append(rec)
    return out


def collage_records(
    marts: Marts,
    table: str,
    model_id: str,
    axes: Sequence[str],
    coords: list[tuple[str, str]],
    *,
    center: bool,
) -> tuple[list[Head], list[dict[str, Any]]]:
    """Rows of four ``random.Random(42).sample`` heads projected on stored axes, one panel per head.

    ``coords`` maps output field -> axis name; ``center`` subtracts the stored 'mean' axis first.
    Raises :class:`NoData` when no head of ``model_id`` has ``axes`` in ``table``.
    """
    heads = heads_with_axes(marts, table, model_id, axes)
    if not heads:
        raise NoData(f"{model_id}: no head has stored axes {'/'.join(axes)} in {table}")
    picked = seeded_sample(heads, 4, 42)
    records: list[dict[str, Any]] = []
    for h in picked:
        ax = axes_of(marts, table, model_id, h, axes)
        for rec in project(
            marts, model_id, h, ax, coords, center=center, max_points=marts.max_points
        ):
            rec["panel"] = h.label
            records.append(rec)
    return picked, records
