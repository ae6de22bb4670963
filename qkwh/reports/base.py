"""What every figure module shares: the figure catalogue entry, the mart reader, the look.

A figure module declares its section and figures in :mod:`qkwh.reports.catalogue` (the
``figure`` decorator, or ``register`` for a list of :class:`FigureDef`).  Each ``build`` reads marts through :class:`Marts`
and returns an Altair chart, or raises :class:`NoData` with a one-line reason; ``render`` turns
that into a note in the report instead of a broken chart.  Per-model figures (collages,
heatmaps, head profiles) have ``per_model=True`` and are built once per selected model.

Figure modules read marts only, through :meth:`Marts.rows` (which refuses any other relation);
the collages' raw vectors and stored axes go through the one reader, :mod:`qkwh.reports.vectors`.

Cross-model figures tell models apart: :func:`model_look` gives every model its own colour (a
shade of its family's colour, so families stay recognisable) with the model's display label in
the legend, and a family shape for point marks.

Data reach the charts as inline records (lists of dicts, NaN -> null): the report needs no
pandas and the HTML stays self-contained.
"""

from __future__ import annotations

import colorsys
import hashlib
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import altair as alt
import duckdb
import pyarrow as pa

from qkwh.reports.sources import MARTS

_T = TypeVar("_T")


class NoData(Exception):
    """A figure has nothing to draw; the message says why (shown in the report)."""


class Absent(NoData):
    """A figure of an opt-in analysis that was not computed (e.g. ``rope``): left out without a
    note, so a report without that analysis looks as it would without the figure."""


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
    order: float = 0  # place within its section (then declaration order)


@dataclass(frozen=True)
class Drawn:
    """What a ``build`` may return instead of a bare chart: the chart plus a caption sentence
    that depends on the data (e.g. which interval the error bars show, read from the mart).
    The renderer appends ``caption`` to the figure's static caption."""

    chart: Any
    caption: str = ""


def slug(text: str) -> str:
    """A file-name-safe id fragment: lower case, [a-z0-9.-] only."""
    s = re.sub(r"[^a-z0-9.]+", "-", str(text).lower()).strip("-")
    return s or "x"


_SAFE_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,99}")


def file_names(model_ids: Iterable[str]) -> dict[str, str]:
    """A file name per model (its page ``models/<name>.html`` and its figure ids), one-to-one.

    A model id that is already a safe file name (lower case ``[a-z0-9_.-]``, at most 100
    characters, not ending in a dot) is its own name; any other id gets its :func:`slug` plus a
    hash of the id (``M_X`` -> ``m-x-<hash>``), so two ids never share a file, whatever their
    case or punctuation, also on a case-insensitive file system."""
    ids = list(dict.fromkeys(model_ids))
    for size in (4, 8, 16, 32):
        names = {
            m: m
            if _SAFE_NAME.fullmatch(m) and not m.endswith(".")
            else f"{slug(m)[:80]}-{hashlib.blake2b(m.encode(), digest_size=size).hexdigest()}"
            for m in ids
        }
        if len(set(names.values())) == len(ids):
            return names
    raise ValueError("model ids whose file names collide")  # pragma: no cover (2^-256)


# ------------------------------------------------------------------------------------------
# reading marts
# ------------------------------------------------------------------------------------------

#: Marks a cross-model point cloud draws at most (a scatter of every head of 23 models x 300
#: heads is a blot; its data would be most of the page).  Split evenly over the models.
POINT_BUDGET = 3000


# The report's model order: families together, checkpoints in training order, then size and id.
_MODEL_ORDER_SQL = """
SELECT model_id FROM model_summary
ORDER BY family NULLS LAST, trajectory_rank NULLS FIRST, params_b NULLS LAST, model_id
"""

_RELATIONS_SQL = "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"


def relations(con: duckdb.DuckDBPyConnection) -> set[str]:
    """Names of the tables and views in the warehouse's main schema."""
    return {r[0] for r in con.execute(_RELATIONS_SQL).fetchall()}


def ordered_models(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Every model of ``model_summary`` in the report's order."""
    return [r[0] for r in con.execute(_MODEL_ORDER_SQL).fetchall()]


@dataclass(frozen=True)
class ModelInfo:
    """How a model is named in the figures: ``display`` is its label (``qkwh ingest --label``,
    else the model id), made unique with the id when two models share a label."""

    model_id: str
    label: str
    family: str
    display: str


class Marts:
    """Read-only access to the marts of one warehouse, restricted to the selected models.

    ``models`` is the ordered model list (family, checkpoint order / size, id); every query of a
    relation with a ``model_id`` column is filtered to it.  ``con`` is for
    :mod:`qkwh.reports.vectors` only (the collages' vectors and axes).
    """

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        models: Sequence[str],
        *,
        max_points: int = 1000,
        point_budget: int = POINT_BUDGET,
    ) -> None:
        self.con = con
        self.models: list[str] = list(models)
        self.max_points = int(max_points)
        self.point_budget = int(point_budget)
        #: caption sentences of the figure being built (what :meth:`sample` left out); the
        #: renderer clears them before each figure and appends them to its caption
        self.notes: list[str] = []
        self._relations = relations(con)
        self._info: dict[str, ModelInfo] | None = None
        self._columns: dict[str, list[str]] = {}
        self._cache: dict[tuple[str, str], tuple[list[str], list[tuple[Any, ...]]]] = {}

    # -- relations ---------------------------------------------------------------------------
    def has(self, name: str) -> bool:
        return name in self._relations

    def columns(self, name: str) -> list[str]:
        if name not in self._columns:
            rows = self.con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' "
                "AND table_name = ? ORDER BY ordinal_position",
                [name],
            ).fetchall()
            self._columns[name] = [r[0] for r in rows]
        return self._columns[name]

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Fresh row dicts (figures add keys to them) of a query, run once per report: several
        figures read the same mart, and the warehouse does not change while the report is drawn."""
        key = (sql, repr(list(params)))
        if key not in self._cache:
            rel = self.con.execute(sql, list(params))
            names = [d[0] for d in rel.description]
            isfinite = math.isfinite
            rows = [
                tuple(v if v.__class__ is not float or isfinite(v) else None for v in row)
                for row in rel.fetchall()
            ]
            self._cache[key] = (names, rows)
        names, rows = self._cache[key]
        return [dict(zip(names, row)) for row in rows]

    def rows(
        self, name: str, where: str = "", params: Sequence[Any] = (), order: str = ""
    ) -> list[dict[str, Any]]:
        """Every row of mart ``name`` for the selected models (non-finite floats -> None).

        ``name`` must be one of :data:`MARTS`.  ``where`` is an extra SQL condition written by
        the figure module (never user text); values are bound through ``params``.
        """
        if name not in MARTS:
            raise ValueError(f"report figures read marts only; {name!r} is not a mart")
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
        return self._query(sql, args)

    # -- model facts -------------------------------------------------------------------------
    def info(self, model_id: str) -> ModelInfo:
        """Label, family and display name of a model (from ``model_summary``)."""
        if self._info is None:
            rows = {r["model_id"]: r for r in self.rows("model_summary")}
            labels = {m: (rows.get(m, {}).get("label") or m) for m in self.models}
            seen: dict[str, int] = {}
            for lab in labels.values():
                seen[lab] = seen.get(lab, 0) + 1
            self._info = {
                m: ModelInfo(
                    m,
                    lab,
                    rows.get(m, {}).get("family") or "unknown",
                    lab if seen[lab] == 1 or lab == m else f"{lab} ({m})",
                )
                for m, lab in labels.items()
            }
        return self._info.get(model_id) or ModelInfo(model_id, model_id, "unknown", model_id)

    def display(self, model_id: str) -> str:
        return self.info(model_id).display

    def family_of(self, model_id: str) -> str:
        return self.info(model_id).family

    def families(self) -> list[str]:
        return sorted({self.family_of(m) for m in self.models})

    def tag(self, rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """``rows`` (each with a model_id) with ``model`` (display label) and ``family`` set."""
        out = []
        for r in rows:
            i = self.info(r["model_id"])
            r["model"] = i.display
            r["family"] = i.family
            out.append(r)
        return out

    def sample(
        self,
        rows: list[dict[str, Any]],
        what: str,
        keys: Sequence[str] = ("layer", "q_head"),
        budget: int | None = None,
    ) -> list[dict[str, Any]]:
        """``rows`` (each with a model_id) cut to a cross-model point cloud a figure can show: see
        :func:`sample_points`.  The caption sentence saying what was left out goes to :attr:`notes`."""
        kept, note = sample_points(
            rows, self.point_budget if budget is None else budget, keys, what
        )
        if note:
            self.notes.append(note)
        return kept

    def context_length(self, model_id: str) -> int | None:
        rows = self.rows("model_summary", "model_id = ?", [model_id])
        return rows[0].get("context_length") if rows else None


_KEY_WORDS = {"q_head": "query head", "q_bucket": "query bucket"}


def _point_hash(row: dict[str, Any], keys: Sequence[str]) -> bytes:
    text = "|".join(str(row.get(k)) for k in ("model_id", *keys))
    return hashlib.blake2b(text.encode(), digest_size=8).digest()


def sample_points(
    rows: Sequence[dict[str, Any]],
    budget: int,
    keys: Sequence[str] = ("layer", "q_head"),
    what: str = "heads",
) -> tuple[list[dict[str, Any]], str]:
    """At most ``ceil(budget / models)`` rows per model, and a caption sentence saying so ("" when
    nothing is left out).

    Deterministic and stable: a model keeps its rows with the smallest hash of (model_id, ``keys``),
    so the same heads are drawn whatever else the report holds, run after run.  Rows keep their
    order.
    """
    by_model: dict[Any, list[int]] = {}
    for i, r in enumerate(rows):
        by_model.setdefault(r.get("model_id"), []).append(i)
    if not by_model:
        return list(rows), ""
    cap = max(1, math.ceil(budget / len(by_model)))
    if all(len(ix) <= cap for ix in by_model.values()):
        return list(rows), ""
    keep: set[int] = set()
    for ix in by_model.values():
        keep.update(sorted(ix, key=lambda i: _point_hash(rows[i], keys))[:cap])
    kept = [r for i, r in enumerate(rows) if i in keep]
    return kept, (
        f"Points: {len(kept):,} of {len(rows):,} {what} drawn, at most {cap:,} per model, "
        f"the same ones in every report (those with the smallest hash of model, "
        f"{', '.join(_KEY_WORDS.get(k, k.replace('_', ' ')) for k in keys)})."
    )


def table_of(records: Sequence[dict[str, Any]]) -> pa.Table:
    """Records as an Arrow table for Altair (columns = union of keys, missing -> null).

    Altair validates inline ``values`` record by record, which is slow for scatter data;
    an Arrow table goes straight into the Vega-Lite chart's ``datasets``.
    """
    cols: dict[str, None] = {}
    for r in records:
        for k in r:
            cols.setdefault(k, None)
    return pa.table({k: [r.get(k) for r in records] for k in cols})


def pick(rows: Iterable[dict[str, Any]], *cols: str) -> list[dict[str, Any]]:
    """``rows`` with only ``cols`` (keeps the inline data of a figure small)."""
    return [{c: r.get(c) for c in cols} for r in rows]


def require(rows: list[_T], what: str) -> list[_T]:
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
KIND_SCHEMES = {"Q": "blues", "K": "oranges"}


def _hex(rgb: tuple[float, float, float]) -> str:
    return "#" + "".join(f"{round(255 * min(max(c, 0.0), 1.0)):02x}" for c in rgb)


def shades(color: str, n: int) -> list[str]:
    """``n`` shades of ``color`` from dark to light (the colour itself when n == 1)."""
    if n <= 1:
        return [color] * n
    rgb = tuple(int(color[i : i + 2], 16) / 255 for i in (1, 3, 5))
    h, light, s = colorsys.rgb_to_hls(*rgb)
    lo, hi = max(0.18, light - 0.22), min(0.74, light + 0.2)
    return [_hex(colorsys.hls_to_rgb(h, lo + (hi - lo) * i / (n - 1), s)) for i in range(n)]


FAMILY_SHAPES = [
    "circle",
    "square",
    "triangle-up",
    "diamond",
    "cross",
    "triangle-down",
    "triangle-right",
    "triangle-left",
    "wedge",
    "stroke",
]


@dataclass(frozen=True)
class ModelLook:
    """Colour per model (shades of the family colour), shape per family, and a legend-bound
    selection on the model: click a model in the legend to pick it (shift-click for several).

    Records need ``model`` (the display label) and ``family`` (see :meth:`Marts.tag`).
    """

    models: tuple[str, ...]  # display labels, in report order
    colors: tuple[str, ...]
    families: tuple[str, ...]
    selection: Any

    def color(self, *, legend: bool = True, title: str = "model") -> alt.Color:
        return alt.Color(
            "model:N",
            title=title,
            sort=list(self.models),
            scale=alt.Scale(domain=list(self.models), range=list(self.colors)),
            legend=alt.Legend(symbolOpacity=1, symbolType="circle") if legend else None,
        )

    def shape(self, *, legend: bool = True) -> alt.Shape:
        return alt.Shape(
            "family:N",
            title="family",
            scale=alt.Scale(
                domain=list(self.families), range=(FAMILY_SHAPES * 3)[: len(self.families)]
            ),
            legend=alt.Legend() if legend else None,
        )

    def opacity(self, on: float = 0.9, off: float = 0.08) -> Any:
        return alt.condition(self.selection, alt.value(on), alt.value(off))


def model_look(marts: Marts, model_ids: Iterable[str] | None = None) -> ModelLook:
    """The look of a cross-model figure over ``model_ids`` (default: every selected model)."""
    wanted = set(model_ids) if model_ids is not None else set(marts.models)
    present = [m for m in marts.models if m in wanted]
    by_family: dict[str, list[str]] = {}
    for m in present:
        fam = marts.family_of(m)
        # models without a family are not one group: each gets a colour of its own
        key = fam if fam != "unknown" else f"unknown:{m}"
        by_family.setdefault(key, []).append(m)
    extra = iter(_EXTRA_COLORS * 8)
    colors: dict[str, str] = {}
    for key, ids in by_family.items():
        base = FAMILY_COLORS.get(key) or next(extra)
        for m, c in zip(ids, shades(base, len(ids))):
            colors[m] = c
    fams = tuple(dict.fromkeys(marts.family_of(m) for m in present))
    sel = alt.selection_point(fields=["model"], bind="legend", name="model_pick")
    return ModelLook(
        tuple(marts.display(m) for m in present), tuple(colors[m] for m in present), fams, sel
    )


def model_sort(marts: Marts, model_ids: Iterable[str] | None = None) -> list[str]:
    """Display labels in the report's model order (for sorted axes), limited to ``model_ids``."""
    wanted = set(model_ids) if model_ids is not None else set(marts.models)
    return [marts.display(m) for m in marts.models if m in wanted]


def model_tooltip(*extra: Any) -> list[Any]:
    """Tooltip fields naming the model (display label, id, family) before ``extra``."""
    return [
        alt.Tooltip("model:N", title="model"),
        alt.Tooltip("model_id:N", title="model id"),
        alt.Tooltip("family:N", title="family"),
        *extra,
    ]


#: Fonts and sizes that stay legible in a PNG at paper size (the spec's top-level ``config``).
CONFIG: dict[str, Any] = {
    "font": "Liberation Sans, DejaVu Sans, Helvetica, Arial, sans-serif",
    "axis": {
        "labelFontSize": 12,
        "titleFontSize": 13,
        "titleFontWeight": "normal",
        "labelLimit": 260,
        "titlePadding": 8,
    },
    "legend": {
        "labelFontSize": 12,
        "titleFontSize": 12,
        "titleFontWeight": "bold",
        "labelLimit": 260,
        "titleLimit": 320,
        "symbolLimit": 100,
    },  # Vega drops entries past 30: a corpus has more models
    "header": {"labelFontSize": 13, "titleFontSize": 13, "labelLimit": 400},
    "title": {
        "fontSize": 15,
        "subtitleFontSize": 12,
        "anchor": "start",
        "offset": 10,
        "subtitleColor": "#444",
    },
    "view": {"stroke": "#ccc"},
}


def with_config(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` (a chart's ``to_dict()``) with :data:`CONFIG` merged into its ``config``: the same
    as ``chart.configure(...)``, without copying the chart (and its data) once per call."""
    config = dict(spec.get("config") or {})
    for key, value in CONFIG.items():
        config[key] = (
            {**config[key], **value}
            if isinstance(value, dict) and isinstance(config.get(key), dict)
            else value
        )
    spec["config"] = config
    return spec


def head_tooltip(*extra: Any) -> list[Any]:
    """Tooltip fields naming model (label and id), layer and head (label like L5H3) before
    ``extra``."""
    return [
        alt.Tooltip("model:N", title="model"),
        alt.Tooltip("model_id:N", title="model id"),
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
