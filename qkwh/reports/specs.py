"""A figure's Vega-Lite spec: the chart's dict with the report's look, pruned of the data columns it
never names, validated against the Vega-Lite schema; and its inline form in a page (its datasets
stored by column, :func:`pack_datasets`, unpacked again by the page's script before drawing)."""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import altair as alt
from jsonschema.exceptions import best_match

from qkwh.reports.base import with_config

VL_VERSION = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])  # e.g. "6.4"


@functools.lru_cache(maxsize=1)
def _validator() -> Any:
    """A validator of the Vega-Lite schema, built once (Altair prepares the whole schema again
    for every validation: about half a second a figure)."""
    import jsonschema
    from altair.vegalite.v6.schema.core import load_schema

    schema = load_schema()
    return jsonschema.validators.validator_for(schema)(schema)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _shows_all_fields(node: Any) -> bool:
    """Whether a tooltip anywhere in the spec shows every field of the data."""
    if isinstance(node, dict):
        tip = node.get("tooltip")
        if tip is True or (isinstance(tip, dict) and tip.get("content") == "data"):
            return True
        return any(_shows_all_fields(v) for v in node.values())
    if isinstance(node, list):
        return any(_shows_all_fields(v) for v in node)
    return False


def prune(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` without the data columns it never names.

    Figures hand whole mart rows to Altair; a column the spec does not name anywhere (encodings,
    tooltips, transforms, expressions) is never drawn or shown, but would be written into the
    page once per row.  A column is kept when its name occurs anywhere in the spec outside the
    data, so nothing used is dropped; names that are not plain identifiers are always kept.
    """
    datasets = spec.get("datasets")
    if not datasets or _shows_all_fields(spec):
        return spec
    text = json.dumps({k: v for k, v in spec.items() if k != "datasets"})
    for name, rows in datasets.items():
        keys = {k for r in rows for k in r}
        drop = {k for k in keys if _NAME.fullmatch(k) and k not in text}
        if drop:
            datasets[name] = [{k: v for k, v in r.items() if k not in drop} for r in rows]
    return spec


def spec_of(chart: Any) -> dict[str, Any]:
    """The chart's Vega-Lite spec with the report's look, validated against the Vega-Lite schema.

    Validated once, as a whole and without its data rows (Altair's own ``validate=True`` checks
    every nested object again and every data record: most of a large report's time).
    """
    with alt.data_transformers.enable("default", max_rows=None):
        spec = prune(with_config(chart.to_dict(validate=False)))
    bare = dict(spec)
    if "datasets" in bare:
        bare["datasets"] = {k: v[:1] for k, v in bare["datasets"].items()}
    error = best_match(_validator().iter_errors(bare))
    if error is not None:
        where = "/".join(map(str, error.absolute_path)) or "top level"
        raise ValueError(
            f"not a valid Vega-Lite {VL_VERSION} spec at {where}: {error.message[:300]}"
        )
    return spec


_INLINE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def inline_json(text: str) -> str:
    """JSON text safe inside any HTML element or attribute: ``<``, ``>`` and ``&`` written as
    ``\\u003c``, ``\\u003e`` and ``\\u0026`` (the same JSON value), so no label or dataset
    name can close the ``<script>`` holding it, open a comment (``<!--``) or start an entity."""
    return text.translate(_INLINE)


#: the key that marks a dataset stored by column in a page (never a Vega-Lite dataset: those are
#: lists of rows)
PACKED = "qkwh.columns"


def _pack_rows(rows: Any) -> Any:
    """A dataset's rows stored by column, or the rows as they are when they do not all have the
    same fields in the same order.  A column of strings (and nulls) with at most half as many
    distinct values as rows is stored as its distinct values (``levels``) and one index per row
    (``codes``)."""
    if not isinstance(rows, list) or not rows or not all(type(r) is dict for r in rows):
        return rows
    fields = list(rows[0])
    if "__proto__" in fields or any(list(r) != fields for r in rows):
        return rows
    columns: list[Any] = []
    for name in fields:
        col = [r[name] for r in rows]
        if all(v is None or type(v) is str for v in col):
            levels = list(dict.fromkeys(col))
            if 2 * len(levels) <= len(col):
                at = {v: i for i, v in enumerate(levels)}
                columns.append({"levels": levels, "codes": [at[v] for v in col]})
                continue
        columns.append(col)
    return {PACKED: fields, "rows": len(rows), "values": columns}


def _unpack_rows(data: Any) -> Any:
    if not (isinstance(data, dict) and isinstance(data.get(PACKED), list)):
        return data
    cols = [
        [c["levels"][i] for i in c["codes"]] if isinstance(c, dict) else c for c in data["values"]
    ]
    fields = data[PACKED]
    return [{f: col[i] for f, col in zip(fields, cols)} for i in range(data["rows"])]


def pack_datasets(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec as a page stores it: each dataset of ``datasets`` by column rather than as rows
    (a row repeats every field name; at 23 models that was two thirds of the report folder).
    The page's script (templates/report.js) turns them back into rows before Vega-Lite sees the
    spec, so every figure is drawn from exactly the spec :func:`spec_of` made;
    :func:`unpack_datasets` is the inverse.  ``spec`` is not changed."""
    datasets = spec.get("datasets")
    if not datasets:
        return spec
    return {**spec, "datasets": {name: _pack_rows(rows) for name, rows in datasets.items()}}


def unpack_datasets(spec: dict[str, Any]) -> dict[str, Any]:
    """The Vega-Lite spec of a spec stored with :func:`pack_datasets` (a spec without packed
    datasets is returned as it is)."""
    datasets = spec.get("datasets")
    if not isinstance(datasets, dict):
        return spec
    return {**spec, "datasets": {name: _unpack_rows(d) for name, d in datasets.items()}}
