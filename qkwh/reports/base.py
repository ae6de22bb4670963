"""What every figure module shares: the figure catalogue entry, the mart reader, the look.

A figure module (``pca``, ``rotation``, ``plasticity``, ``training``, ``published``) exposes
``FIGURES``: a tuple of :class:`FigureDef`.  Each ``build`` reads marts through :class:`Marts`
and returns an Altair chart, or raises :class:`NoData` with a one-line reason; ``render`` turns
that into a note in the report instead of a broken chart.  Per-model figures (collages,
heatmaps, head profiles) have ``per_model=True`` and are built once per selected model.

Data reach the charts as inline records (lists of dicts, NaN -> null): the report needs no
pandas and the HTML stays self-contained.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import altair as alt
import duckdb
import pyarrow as pa


class NoData(Exception):
    """A figure has nothing to draw; the message says why (shown in the report)."""


# ------------------------------------------------------------------------------------------
# catalogue
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FigureDef:
    """One figure of the catalogue.

    ``key`` is the figure id (file stem); per-model figures get ``<key>-<model_id>``.
    ``sources`` names the marts (and, for collages, the stored tables) the figure reads.
    ``build(marts)`` -- or ``build(marts, model_id)`` when ``per_model`` -- returns a chart.
    """

    key: str
    section: str
    title: str
    caption: str
    sources: tuple[str, ...]
    build: Callable[..., Any]
    per_model: bool = False


def slug(text: str) -> str:
    """A file-name-safe id fragment: lower case, [a-z0-9.-] only."""
    s = re.sub(r"[^a-z0-9.]+", "-", str(text).lower()).strip("-")
    return s or "x"


# ------------------------------------------------------------------------------------------
# reading marts
# ------------------------------------------------------------------------------------------


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class Marts:
    """Read-only access to the marts (and the few stored tables collages need) of one warehouse,
    restricted to the selected models.

    ``models`` is the ordered model list (family, checkpoint order / size, id); every query that
    has a ``model_id`` column is filtered to it.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, models: Sequence[str], *,
                 max_points: int = 1000) -> None:
        self.con = con
        self.models: list[str] = list(models)
        self.max_points = int(max_points)
        rows = con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
        ).fetchall()
        self._relations = {r[0] for r in rows}
        self._families: dict[str, str | None] | None = None

    # -- relations ---------------------------------------------------------------------------
    def has(self, name: str) -> bool:
        return name in self._relations

    def first_of(self, *names: str) -> str:
        """The first relation of ``names`` that exists (marts preferred over fallbacks)."""
        for n in names:
            if self.has(n):
                return n
        raise NoData(f"the warehouse has no {' / '.join(names)} (run `qkwh build`)")

    def columns(self, name: str) -> list[str]:
        rows = self.con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' "
            "AND table_name = ? ORDER BY ordinal_position", [name]).fetchall()
        return [r[0] for r in rows]

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Rows of ``sql`` as dicts (non-finite floats -> None)."""
        rel = self.con.execute(sql, list(params))
        names = [d[0] for d in rel.description]
        return [{k: _clean(v) for k, v in zip(names, row)} for row in rel.fetchall()]

    def rows(self, name: str, where: str = "", params: Sequence[Any] = (),
             order: str = "") -> list[dict[str, Any]]:
        """Every row of relation ``name`` for the selected models.

        ``where`` is an extra SQL condition written by the figure module (never user text);
        values are bound through ``params``.
        """
        if not self.has(name):
            raise NoData(f"the warehouse has no `{name}` (run `qkwh build`)")
        cols = self.columns(name)
        conds, args = [], []
        if "model_id" in cols:
            conds.append("model_id IN (SELECT unnest(?::VARCHAR[]))")
            args.append(self.models)
        if where:
            conds.append(f"({where})")
            args.extend(params)
        sql = f'SELECT * FROM "{name}"'
        if conds:
            sql += " WHERE " + " AND ".join(conds)
        if order:
            sql += f" ORDER BY {order}"
        return self.query(sql, args)

    # -- model facts -------------------------------------------------------------------------
    def family_of(self, model_id: str) -> str | None:
        if self._families is None:
            self._families = {r["model_id"]: r["family"] for r in self.rows("model_summary")}
        return self._families.get(model_id)

    def families(self) -> list[str]:
        if self._families is None:
            self.family_of("")
        assert self._families is not None
        return sorted({f or "unknown" for m, f in self._families.items() if m in self.models})


def table_of(records: Sequence[dict[str, Any]]) -> pa.Table:
    """Records as an Arrow table for Altair (columns = union of keys, missing -> null).

    Altair validates inline ``values`` record by record, which is slow for scatter data;
    an Arrow table goes straight into the spec's ``datasets``.
    """
    cols: dict[str, None] = {}
    for r in records:
        for k in r:
            cols.setdefault(k, None)
    return pa.table({k: [r.get(k) for r in records] for k in cols})


def require(rows: list[dict[str, Any]], what: str) -> list[dict[str, Any]]:
    """``rows`` if any, else NoData naming what is missing."""
    if not rows:
        raise NoData(what)
    return rows


def finite(rows: Iterable[dict[str, Any]], *cols: str) -> list[dict[str, Any]]:
    """Rows whose ``cols`` are all non-null."""
    return [r for r in rows if all(r.get(c) is not None for c in cols)]


# ------------------------------------------------------------------------------------------
# look: colours, selections, fonts
# ------------------------------------------------------------------------------------------

# Stable family colours (registry families first), so a family keeps its colour across reports.
FAMILY_COLORS = {
    "Qwen3": "#4c78a8",
    "Llama3.2": "#e45756",
    "Llama3.1": "#9d755d",
    "Ministral3": "#54a24b",
    "Mistral": "#b279a2",
    "SmolLM3": "#f58518",
    "SmolLM2": "#72b7b2",
    "unknown": "#9e9e9e",
}
_EXTRA_COLORS = ["#eeca3b", "#ff9da6", "#bab0ac", "#439894", "#d67195", "#83bcb6"]

# Q and K everywhere: blue queries, orange-red keys.
KIND_COLORS = {"Q": "#2f6db5", "K": "#d9480f"}
KIND_SCHEMES = {"Q": "blues", "K": "oranges"}

TAXONOMY_COLORS = {
    "position_dominated": "#d62728",
    "q_positional": "#ff9f40",
    "k_positional": "#9467bd",
    "mixed": "#9aa5b1",
    "content_focused": "#2ca02c",
}
TAXONOMY_LABELS = {
    "position_dominated": "position-dominated",
    "q_positional": "Q-positional",
    "k_positional": "K-positional",
    "mixed": "mixed",
    "content_focused": "content-focused",
}


def family_scale(families: Sequence[str]) -> alt.Scale:
    extra = iter(_EXTRA_COLORS * 4)
    rng = [FAMILY_COLORS.get(f) or next(extra) for f in families]
    return alt.Scale(domain=list(families), range=rng)


def family_color(marts: Marts, *, title: str = "family") -> tuple[alt.Color, Any]:
    """The family colour encoding and a legend-bound point selection that filters families.

    Returns ``(color, selection)``; pair with :func:`family_opacity`.
    """
    fams = marts.families()
    sel = alt.selection_point(fields=["family"], bind="legend", name="family_pick")
    color = alt.Color("family:N", scale=family_scale(fams), title=title,
                      legend=alt.Legend(symbolOpacity=1))
    return color, sel


def family_opacity(sel: Any, on: float = 0.85, off: float = 0.06) -> Any:
    return alt.condition(sel, alt.value(on), alt.value(off))


def model_sort(marts: Marts) -> list[str]:
    """The report's model order (for sorted axes)."""
    return list(marts.models)


def base_config(chart: Any) -> Any:
    """Fonts and sizes that stay legible in a PNG at paper size."""
    return (
        chart.configure(font="Liberation Sans, DejaVu Sans, Helvetica, Arial, sans-serif")
        .configure_axis(labelFontSize=12, titleFontSize=13, titleFontWeight="normal",
                        labelLimit=260, titlePadding=8)
        .configure_legend(labelFontSize=12, titleFontSize=12, titleFontWeight="bold",
                          labelLimit=260, titleLimit=320)
        .configure_header(labelFontSize=13, titleFontSize=13, labelLimit=400)
        .configure_title(fontSize=15, subtitleFontSize=12, anchor="start", offset=10,
                         subtitleColor="#444")
        .configure_view(stroke="#ccc")
    )


def head_tooltip(*extra: Any) -> list[Any]:
    """Tooltip fields naming model, layer and head (label like L5H3) before ``extra``."""
    return [
        alt.Tooltip("model_id:N", title="model"),
        alt.Tooltip("head_label:N", title="head"),
        alt.Tooltip("layer:Q", title="layer"),
        alt.Tooltip("q_head:Q", title="query head"),
        alt.Tooltip("k_head:Q", title="key head"),
        *extra,
    ]


def token_axis(**kw: Any) -> alt.Axis:
    """An axis in tokens: 0, 2k, 4k, ... (d3 SI format, plain 0)."""
    return alt.Axis(labelExpr="datum.value == 0 ? '0' : format(datum.value, '~s')", **kw)


def head_label(layer: int, q_head: int) -> str:
    return f"L{layer}H{q_head}"


def fmt_tokens(n: float) -> str:
    """8192 -> '8K', 131072 -> '128K' (binary K as the context-length convention)."""
    if n >= 1024 and n % 1024 == 0:
        return f"{int(n) // 1024}K"
    return f"{int(n)}"
