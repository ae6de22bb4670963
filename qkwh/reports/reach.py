"""Softmax reach figures (docs/metrics/reach.md): where each model's softmax mass goes by
distance, reach against plasticity per head and per model, the estimate against the exact
attention recorded at capture, the architectural limits of each model and the benchmark
lengths beyond them.

Without reach results (a model whose capture did not record its sampler facts, or a warehouse
computed before the analysis was in the default set) the reach figures are left out silently
(:class:`Absent`), so such a report looks as it did before the analysis existed.
"""

from __future__ import annotations

import altair as alt

from qkwh.reports.base import Absent, Drawn, Marts, finite, model_look, model_tooltip, table_of
from qkwh.reports.catalogue import figure, section

SECTION = section("Softmax reach", order=37)
NOT_COMPUTED = "no softmax reach results (run `qkwh compute` and `qkwh build`)"


def _rows(marts: Marts, name: str, where: str = "", params: tuple = ()) -> list[dict]:
    if not marts.has(name):
        raise Absent(NOT_COMPUTED)
    rows = marts.rows(name, where, params)
    if not rows:
        raise Absent(NOT_COMPUTED)
    return rows


@figure(
    "reach-mass-heatmap",
    section=SECTION,
    title="Softmax mass by distance per query bucket",
    caption="Each cell: the mean over heads of the share of a query's softmax mass that falls "
    "in a distance bin (columns, in bucket sizes), for the queries of a bucket (rows); colour "
    "is the lift over uniform attention on a log scale (red: the heads favour that distance, "
    "blue: they avoid it).",
    sources=("reach_mass_by_distance",),
    per_model=True,
)
def mass_heatmap(marts: Marts, model_id: str) -> alt.Chart:
    rows = finite(
        _rows(marts, "reach_mass_by_distance", "model_id = ?", (model_id,)), "mass", "lift"
    )
    if not rows:
        raise Absent(NOT_COMPUTED)
    for r in rows:
        r["lift"] = max(float(r["lift"]), 1e-3)
    rows = marts.tag(rows)
    return (
        alt.Chart(table_of(rows))
        .mark_rect()
        .encode(
            x=alt.X("distance_bin:O", title="distance bin (bucket sizes)"),
            y=alt.Y("q_bucket:O", title="query bucket", sort="descending"),
            color=alt.Color(
                "lift:Q",
                title="lift",
                scale=alt.Scale(type="log", scheme="redblue", reverse=True, domainMid=1),
            ),
            tooltip=model_tooltip(
                alt.Tooltip("q_bucket:O", title="query bucket"),
                alt.Tooltip("distance_bin:O", title="distance bin"),
                alt.Tooltip("mass:Q", title="mass", format=".3f"),
                alt.Tooltip("uniform_mass:Q", title="uniform", format=".3f"),
                alt.Tooltip("lift:Q", title="lift", format=".2f"),
                alt.Tooltip("n_heads:Q", title="heads"),
            ),
        )
        .properties(width=420, height=300, title=marts.display(model_id))
    )


@figure(
    "reach-vs-plasticity",
    section=SECTION,
    title="Softmax reach against pairwise plasticity per head",
    caption="Each point is a head. Heads high on plasticity (right) but low on reach (bottom) "
    "separate keys in pairs yet spend their softmax nearby: the globality gap.",
    sources=("reach_head_metrics",),
)
def reach_vs_ap(marts: Marts) -> alt.Chart:
    rows = finite(_rows(marts, "reach_head_metrics"), "reach", "ap_overall")
    if not rows:
        raise Absent(NOT_COMPUTED)
    rows = marts.tag(rows)
    look = model_look(marts, {r["model_id"] for r in rows})
    return (
        alt.Chart(table_of(rows))
        .mark_point(filled=True, size=40)
        .encode(
            x=alt.X("ap_overall:Q", title="attention plasticity AP (0–1)"),
            y=alt.Y("reach:Q", title="softmax reach (1 = uniform)"),
            color=look.color(),
            shape=look.shape(),
            opacity=look.opacity(),
            tooltip=model_tooltip(
                alt.Tooltip("head_label:N", title="head"),
                alt.Tooltip("reach:Q", format=".3f"),
                alt.Tooltip("ap_overall:Q", format=".3f"),
                alt.Tooltip("globality_gap:Q", title="globality gap"),
            ),
        )
        .add_params(look.selection)
        .properties(width=480, height=340)
    )


@figure(
    "reach-drop-vs-ap-drop",
    section=SECTION,
    title="Reach drop against plasticity drop per model",
    caption="Each point is a model: how much its mean reach shrinks from the first to the last "
    "20 % of the context (vertical) against its plasticity drop (horizontal), with their "
    "layer-cluster intervals.",
    sources=("model_metric_ci",),
)
def drop_vs_drop(marts: Marts) -> alt.Chart:
    rows = marts.rows("model_metric_ci", "metric IN ('reach_drop', 'ap_drop')")
    by_model: dict[str, dict] = {}
    for r in rows:
        d = by_model.setdefault(r["model_id"], {"model_id": r["model_id"]})
        d[r["metric"]] = r["estimate"]
        d[r["metric"] + "_low"] = r["ci_low"]
        d[r["metric"] + "_high"] = r["ci_high"]
    data = finite(
        [d for d in by_model.values() if "reach_drop" in d and "ap_drop" in d],
        "reach_drop",
        "ap_drop",
    )
    if not data:
        raise Absent(NOT_COMPUTED)
    data = marts.tag(data)
    look = model_look(marts, {r["model_id"] for r in data})
    base = alt.Chart(table_of(data)).encode(color=look.color(), opacity=look.opacity())
    x_title, y_title = "ap_drop (first − last 20 %)", "reach_drop (first − last 20 %)"
    points = base.mark_point(filled=True, size=80).encode(
        x=alt.X("ap_drop:Q", title=x_title),
        y=alt.Y("reach_drop:Q", title=y_title),
        shape=look.shape(),
        tooltip=model_tooltip(
            alt.Tooltip("reach_drop:Q", format=".3f"), alt.Tooltip("ap_drop:Q", format=".3f")
        ),
    )
    ybars = base.mark_rule().encode(
        x=alt.X("ap_drop:Q", title=x_title),
        y=alt.Y("reach_drop_low:Q", title=y_title),
        y2="reach_drop_high:Q",
    )
    xbars = base.mark_rule().encode(
        y=alt.Y("reach_drop:Q", title=y_title),
        x=alt.X("ap_drop_low:Q", title=x_title),
        x2="ap_drop_high:Q",
    )
    return (
        alt.layer(ybars, xbars, points).add_params(look.selection).properties(width=420, height=320)
    )


@figure(
    "reach-estimate-vs-exact",
    section=SECTION,
    title="Reach estimated from the sampled keys against the exact attention",
    caption="Each point is a head whose capture recorded the model's own attention: the "
    "Horvitz–Thompson estimate from the sampled vectors (vertical) against the exact value "
    "over the same queries (horizontal); the diagonal is perfect agreement.",
    sources=("reach_head_metrics",),
)
def estimate_vs_exact(marts: Marts) -> Drawn:
    rows = finite(_rows(marts, "reach_head_metrics"), "reach", "reach_exact")
    if not rows:
        raise Absent("no exact attention recorded at capture")
    rows = marts.tag(rows)
    look = model_look(marts, {r["model_id"] for r in rows})
    hi = max(max(r["reach"] for r in rows), max(r["reach_exact"] for r in rows), 0.01)
    diag = (
        alt.Chart(table_of([{"x": 0.0, "y": 0.0}, {"x": hi, "y": hi}]))
        .mark_line(color="#888888", strokeDash=[4, 4])
        .encode(
            x=alt.X("x:Q", title="reach, exact attention"),
            y=alt.Y("y:Q", title="reach, estimated from the sampled keys"),
        )
    )
    points = (
        alt.Chart(table_of(rows))
        .mark_point(filled=True, size=40)
        .encode(
            x=alt.X("reach_exact:Q", title="reach, exact attention"),
            y=alt.Y("reach:Q", title="reach, estimated from the sampled keys"),
            color=look.color(),
            opacity=look.opacity(),
            tooltip=model_tooltip(
                alt.Tooltip("head_label:N", title="head"),
                alt.Tooltip("reach:Q", format=".3f"),
                alt.Tooltip("reach_exact:Q", format=".3f"),
            ),
        )
        .add_params(look.selection)
    )
    n = len(rows)
    return Drawn(alt.layer(diag, points).properties(width=400, height=340), f"{n} heads.")


LIMIT_COLUMNS = (
    ("model", "model"),
    ("measured_context", "measured context"),
    ("trained_context", "trained context"),
    ("windowed_layers", "windowed layers"),
    ("min_window", "smallest window"),
    ("critical_dim", "critical dim"),
    ("extrapolation_bound", "extrapolation bound"),
)


@figure(
    "reach-limits",
    section=SECTION,
    title="Architectural limits: up to which length the measurements say anything",
    caption="Per model: the context the capture measured, the context the model was trained "
    "on, its sliding windows, and the RoPE critical dimension with the extrapolation bound "
    "(Liu et al. 2024). Beyond the smallest of these, plasticity and reach say nothing.",
    sources=("model_reach_limits",),
)
def limits_table(marts: Marts) -> alt.Chart:
    if not marts.has("model_reach_limits"):
        raise Absent("no model_reach_limits (run `qkwh build`)")
    rows = marts.tag(marts.rows("model_reach_limits"))
    if not rows:
        raise Absent("no models")
    cells = []
    for i, r in enumerate(rows):
        for col, title in LIMIT_COLUMNS:
            v = r.get(col)
            text = "—" if v is None else (f"{v:,.0f}" if isinstance(v, (int, float)) else str(v))
            cells.append({"row": i, "column": title, "text": text, **_who(r)})
    return _text_table(cells, [t for _, t in LIMIT_COLUMNS], 110, len(rows))


FLAG_COLUMNS = (
    ("model", "model"),
    ("benchmark", "benchmark"),
    ("length", "length"),
    ("beyond", "beyond"),
)
FLAG_NAMES = (
    ("beyond_measured", "measured context"),
    ("beyond_window", "smallest window"),
    ("beyond_extrapolation", "extrapolation bound"),
)


def flag_rows(marts: Marts) -> list[dict]:
    """One row per (model, benchmark, mode, length) of the per-length benchmark scores, with
    ``beyond``: the limits the length exceeds ('' when measurable, None without limits)."""
    if not marts.has("benchmark_joins") or "measurable" not in marts.columns("benchmark_joins"):
        raise Absent("no benchmark flags (run `qkwh build`)")
    seen: dict[tuple, dict] = {}
    for r in marts.rows("benchmark_joins", "length_scope = 'length'"):
        key = (r["model_id"], r["benchmark"], r["mode"], r["context_length_tokens"])
        if key in seen:
            continue
        beyond = (
            None
            if r["measurable"] is None
            else ", ".join(title for col, title in FLAG_NAMES if r[col])
        )
        seen[key] = {
            "model_id": r["model_id"],
            "benchmark": r["benchmark"] + (f" ({r['mode']})" if r["mode"] else ""),
            "length": int(r["context_length_tokens"]),
            "beyond": beyond,
        }
    if not seen:
        raise Absent("no per-length benchmark scores for these models")
    return marts.tag(
        sorted(seen.values(), key=lambda r: (r["model_id"], r["benchmark"], r["length"]))
    )


@figure(
    "reach-benchmark-flags",
    section=SECTION,
    title="Benchmark lengths beyond the architectural limits",
    caption="Per model and per-length benchmark score: the limits the benchmark length exceeds "
    "(the measured context, the smallest sliding window, the RoPE extrapolation bound; "
    "benchmark_joins). A score at a length beyond any of them says nothing about plasticity "
    "or reach; 'measurable' marks the lengths within all three.",
    sources=("benchmark_joins", "model_reach_limits"),
)
def benchmark_flags_table(marts: Marts) -> Drawn:
    rows = flag_rows(marts)
    cells = []
    for i, r in enumerate(rows):
        for col, title in FLAG_COLUMNS:
            v = r.get(col)
            if col == "length":
                text = f"{v:,}"
            elif col == "beyond":
                text = "—" if v is None else (v or "measurable")
            else:
                text = str(v)
            cells.append({"row": i, "column": title, "text": text, **_who(r)})
    n_beyond = sum(1 for r in rows if r["beyond"])
    chart = _text_table(cells, [t for _, t in FLAG_COLUMNS], 170, len(rows))
    return Drawn(chart, f"{n_beyond} of {len(rows)} benchmark lengths beyond a limit.")


def _who(row: dict) -> dict:
    """The fields that name a row's model (its tooltip)."""
    return {k: row.get(k) for k in ("model", "model_id", "family")}


def _text_table(cells: list[dict], columns: list[str], column_width: int, n_rows: int):
    """A table drawn as text marks: ``cells`` of {row, column, text, model, model_id, family},
    columns in that order; hovering a cell names its model."""
    return (
        alt.Chart(table_of(cells))
        .mark_text(align="left", fontSize=12)
        .encode(
            x=alt.X(
                "column:N",
                sort=columns,
                title=None,
                axis=alt.Axis(orient="top", labelAngle=0, domain=False, ticks=False),
            ),
            y=alt.Y("row:O", title=None, axis=None),
            text="text:N",
            tooltip=model_tooltip(),
        )
        .properties(width=column_width * len(columns), height=22 * n_rows)
    )
