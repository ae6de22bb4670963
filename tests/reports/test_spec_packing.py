"""Datasets stored by column in the pages (qkwh.reports.specs.pack_datasets) come back as the
very rows Vega-Lite was given; rows that cannot be stored by column are kept as rows."""

from __future__ import annotations

import json

from qkwh.reports.specs import PACKED, pack_datasets, unpack_datasets


def _spec(rows: list) -> dict:
    return {"mark": "point", "data": {"name": "d"}, "datasets": {"d": rows}, "width": 100}


def test_rows_round_trip_bit_for_bit_with_levels_for_repeated_strings():
    rows = [
        {
            "model": "m-a" if i % 3 else "m-b",
            "layer": i // 4,
            "x": i / 7,
            "note": None,
            "ok": i % 2 == 0,
        }
        for i in range(40)
    ]
    rows[5]["note"] = "only here"
    spec = _spec(rows)
    text = json.dumps(spec, separators=(",", ":"))
    packed = pack_datasets(json.loads(text))
    stored = packed["datasets"]["d"]
    assert stored[PACKED] == ["model", "layer", "x", "note", "ok"]
    model, layer, x, note, ok = stored["values"]
    assert model["levels"] == ["m-b", "m-a"] and len(model["codes"]) == 40  # strings by level
    assert note["levels"] == [None, "only here"]  # nulls are a level like any string
    assert isinstance(layer, list) and isinstance(x, list) and isinstance(ok, list)
    # through JSON, as the page stores it, and back: the same spec, key order included
    back = unpack_datasets(json.loads(json.dumps(packed, separators=(",", ":"))))
    assert json.dumps(back, separators=(",", ":")) == text
    assert len(json.dumps(packed, separators=(",", ":"))) < len(text) * 0.6
    assert spec == json.loads(text)  # packing left its argument alone


def test_rows_that_are_not_one_table_stay_rows():
    uneven = [{"a": 1, "b": 2}, {"b": 2, "a": 1}]  # same fields, another order
    missing = [{"a": 1, "b": 2}, {"a": 1}]
    proto = [{"__proto__": 1}, {"__proto__": 2}]
    not_rows = [1, 2, 3]
    for rows in (uneven, missing, proto, not_rows, []):
        spec = _spec(rows)
        assert pack_datasets(spec)["datasets"]["d"] == rows
        assert unpack_datasets(pack_datasets(spec)) == spec
    assert pack_datasets({"mark": "point"}) == {"mark": "point"}  # no datasets: as it is


def test_few_repeats_are_not_stored_by_level():
    rows = [{"label": f"head {i}"} for i in range(10)]
    stored = pack_datasets(_spec(rows))["datasets"]["d"]
    assert stored["values"] == [[f"head {i}" for i in range(10)]]
