"""RoPE frequency-band figures (docs/metrics/rope.md): where the query and key energy sits in the
rotary spectrum, plasticity on each band beside the full head's, each band's logit contribution
against distance, and a forest of ap_drop per band across models.

The ``rope`` analysis is opt-in: without its results every figure here is left out silently
(:class:`Absent`), so such a report looks as it did before the analysis existed.
"""

from __future__ import annotations

from typing import Any

import altair as alt

from qkwh.reports.base import (
    Absent,
    Drawn,
    FigureDef,
    Marts,
    finite,
    model_look,
    model_tooltip,
    table_of,
    token_axis,
)
from qkwh.reports.catalogue import register, section
from qkwh.reports.forest import group_panels
from qkwh.reports.intervals import Intervals

SECTION = section("RoPE bands", order=40)

BANDS = ("high", "mid", "low", "unrotated")
BAND_COLORS = {"high": "#e45756", "mid": "#f2a93b", "low": "#4c78a8", "unrotated": "#9e9e9e"}
BAND_TITLES = {
    "high": "high (wavelength < bucket size)",
    "mid": "mid",
    "low": "low (wavelength ≥ context)",
    "unrotated": "unrotated",
}
_BAND_PANELS = [(b, alt.Title(BAND_TITLES[b], fontSize=13, color=BAND_COLORS[b])) for b in BANDS]
FULL = "full head (all dims)"
NOT_COMPUTED = "no RoPE band results (run `qkwh compute --analyses rope` and `qkwh build`)"
AP_TITLE = "attention plasticity AP (0–1)"


def _line_figure(layers: tuple[alt.Chart, ...], title: str, subtitle: list[str]) -> alt.LayerChart:
    """The layout shared by the two line figures (energy spectrum, band logits): the layers over
    one 560 x 300 plot with a title and subtitle lines."""
    return alt.layer(*layers).properties(
        width=560, height=300, title=alt.Title(title, subtitle=subtitle)
    )


def _band_color(with_full: bool = False, title: str = "band") -> alt.Color:
    domain = list(BANDS) + ([FULL] if with_full else [])
    colors = [BAND_COLORS[b] for b in BANDS] + (["#222222"] if with_full else [])
    return alt.Color(
        "band:N",
        title=title,
        scale=alt.Scale(domain=domain, range=colors),
        legend=alt.Legend(symbolOpacity=1, symbolType="circle"),
    )


def _rows(marts: Marts, mart: str, where: str = "", params: list[Any] | None = None) -> list[dict]:
    """The mart's rows, or :class:`Absent` when there are none (rope not computed)."""
    rows = marts.rows(mart, where, params or [])
    if not rows:
        raise Absent(NOT_COMPUTED)
    return rows


# ------------------------------------------------------------------------------------------
# energy: shares per band across models, and each model's spectrum
# ------------------------------------------------------------------------------------------


KINDS = {"queries": "q", "keys": "k"}
KIND_COLORS = {"queries": "#4c78a8", "keys": "#e45756"}


def band_energy(marts: Marts) -> Drawn:
    rows = marts.tag(_rows(marts, "rope_band_energy"))
    ci = Intervals(
        marts, [f"rope_{side}_energy_share_{b}" for side in KINDS.values() for b in BANDS]
    )
    data = []
    for r in rows:
        for kind, side in KINDS.items():
            data.append(
                {
                    "model_id": r["model_id"],
                    "model": r["model"],
                    "family": r["family"],
                    "band": r["band"],
                    "kind": kind,
                    "value": r[f"{side}_energy_share"],
                    "n_planes": r["n_planes"],
                    "n_heads": r["n_heads"],
                    **ci.fields(r["model_id"], f"rope_{side}_energy_share_{r['band']}"),
                }
            )
    color = alt.Color(
        "kind:N",
        title="energy of",
        scale=alt.Scale(domain=list(KIND_COLORS), range=list(KIND_COLORS.values())),
    )
    x = alt.X(
        "value:Q",
        title="share of the energy",
        axis=alt.Axis(format="%"),
        scale=alt.Scale(zero=True),
    )
    tip = model_tooltip(
        alt.Tooltip("band:N", title="band"),
        alt.Tooltip("kind:N", title="energy of"),
        alt.Tooltip("value:Q", title="energy share", format=".1%"),
        alt.Tooltip("interval:N", title="interval"),
        alt.Tooltip("n_planes:Q", title="planes per head (most)"),
        alt.Tooltip("n_heads:Q", title="heads with the band"),
    )
    panels = group_panels(
        marts,
        data,
        "band",
        _BAND_PANELS,
        x,
        tip,
        color,
        size=45,
        width=200,
        step=24,
        offset=alt.YOffset("kind:N", sort=list(KINDS)),
    )
    chart = alt.hconcat(*panels, data=table_of(data), spacing=14).properties(
        title=alt.Title(
            "Query and key energy per RoPE band, with intervals",
            subtitle=[
                "share of each head's energy (mean of q² or k² summed over the band's planes, no "
                "centring), averaged over the model's heads; a model's bands sum to 100 %",
                "heavy low-frequency bands are the 'massive values' of RoPE models; "
                "bar = interval, hollow = no interval",
            ],
        )
    )
    return Drawn(chart, ci.caption("Bars"))


def spectrum(marts: Marts, model_id: str) -> Drawn:
    rows = _rows(marts, "rope_energy_spectrum", "model_id = ?", [model_id])
    rotated = finite(rows, "wavelength")
    if not rotated:
        raise Absent("no rotated plane")
    data = []
    for r in rotated:
        for kind, col in (("Q", "q_energy_share"), ("K", "k_energy_share")):
            data.append(
                {
                    "plane": r["plane"],
                    "band": r["band"],
                    "wavelength": r["wavelength"],
                    "kind": kind,
                    "share": r[col],
                    "n_heads": r["n_heads"],
                    "inv_freq": r["inv_freq"],
                }
            )
    # shaded bands between their edges: the bucket size m and the context length L_ctx
    info = marts.rows("model_summary", "model_id = ?", [model_id])
    m = info[0].get("bucket_size") if info else None
    ctx = info[0].get("context_length") if info else None
    wl = [r["wavelength"] for r in rotated]
    lo, hi = min(wl) / 1.5, max(wl) * 1.5
    if m and ctx:
        lo, hi = min(lo, m / 1.5), max(hi, ctx * 1.5)
        edges = {"high": (lo, m), "mid": (m, ctx), "low": (ctx, hi)}
    else:  # without the edges: from each band's shortest to its longest wavelength
        edges = {}
        for r in rotated:
            a, b = edges.get(r["band"], (r["wavelength"], r["wavelength"]))
            edges[r["band"]] = (min(a, r["wavelength"]), max(b, r["wavelength"]))
    present = {r["band"] for r in rotated}
    shade = [{"band": b, "lo": a, "hi": z} for b, (a, z) in edges.items() if b in present]
    decades = [10.0**k for k in range(13) if lo <= 10.0**k <= hi]
    x = alt.X(
        "wavelength:Q",
        title="wavelength 2π / inv_freq (tokens, log scale)",
        scale=alt.Scale(type="log", domain=[lo, hi], nice=False),
        axis=token_axis(values=decades),
    )
    rect = (
        alt.Chart(table_of(shade))
        .mark_rect(opacity=0.12)
        .encode(
            x=alt.X("lo:Q", title=x.to_dict().get("title"), scale=alt.Scale(type="log")),
            x2="hi:Q",
            color=_band_color(),
        )
    )
    base = alt.Chart(table_of(data)).encode(
        x=x,
        y=alt.Y("share:Q", title="share of the head's energy", axis=alt.Axis(format="%")),
        strokeDash=alt.StrokeDash(
            "kind:N", title="vectors", scale=alt.Scale(domain=["Q", "K"], range=[[1, 0], [5, 3]])
        ),
    )
    lines = base.mark_line(color="#333", strokeWidth=1.6)
    pts = base.mark_point(filled=True, size=45, color="#333").encode(
        shape=alt.Shape("kind:N", title="vectors", scale=alt.Scale(domain=["Q", "K"])),
        tooltip=[
            alt.Tooltip("plane:Q", title="plane"),
            alt.Tooltip("band:N", title="band"),
            alt.Tooltip("kind:N", title="Q or K"),
            alt.Tooltip("wavelength:Q", title="wavelength (tokens)", format=",.1f"),
            alt.Tooltip("share:Q", title="energy share", format=".2%"),
            alt.Tooltip("n_heads:Q", title="heads"),
        ],
    )
    chart = _line_figure(
        (rect, lines, pts),
        f"Energy spectrum: {marts.display(model_id)}",
        [
            "share of the head's query (solid) and key (dashed) energy per rotary plane, "
            "mean over heads",
            "shading = band: high below the bucket size m, low from the context length on",
        ],
    )
    n_unrot = len(rows) - len(rotated)
    note = (
        f" {n_unrot} unrotated plane row(s) have no finite wavelength and are not drawn here "
        "(their share is in the band energy figure)."
        if n_unrot
        else ""
    )
    return Drawn(chart, "Means over heads, drawn without an interval." + note)


# ------------------------------------------------------------------------------------------
# band plasticity: per-model profiles, and the forest of ap_drop per band
# ------------------------------------------------------------------------------------------


def band_profiles(marts: Marts, model_id: str) -> Drawn:
    rows = _rows(
        marts,
        "rope_band_plasticity_model",
        "model_id = ? AND estimator = 'gaussian'",
        [model_id],
    )
    data: list[dict[str, Any]] = []
    for r in rows:
        for k in range(10):
            common = {"variant": r["variant"], "decile": k, "rel": (k + 0.5) / 10}
            if r.get(f"decile_{k}") is not None:
                data.append(
                    {**common, "band": r["band"], "ap": r[f"decile_{k}"], "n_heads": r["n_heads"]}
                )
            if r.get(f"decile_{k}_full") is not None:
                data.append(
                    {
                        **common,
                        "band": FULL,
                        "ap": r[f"decile_{k}_full"],
                        "n_heads": r["n_heads"],
                        "of": r["band"],
                    }
                )
    if not data:
        raise Absent("no band deciles")
    # the full head over the heads of each band row: one line per (band row), drawn once per
    # variant panel; identical when every band covers the same heads
    base = alt.Chart().encode(
        x=alt.X(
            "rel:Q",
            title="query position, decile centre (share of the context window)",
            axis=alt.Axis(format="%", values=[0, 0.2, 0.4, 0.6, 0.8, 1.0]),
            scale=alt.Scale(domain=[0, 1], nice=False),
        ),
        y=alt.Y("ap:Q", title=AP_TITLE, scale=alt.Scale(zero=False)),
        color=_band_color(with_full=True, title="dims"),
        detail="of:N",
    )
    tip = [
        alt.Tooltip("band:N", title="dims"),
        alt.Tooltip("of:N", title="heads of band"),
        alt.Tooltip("variant:N", title="variant"),
        alt.Tooltip("decile:O", title="decile"),
        alt.Tooltip("ap:Q", title="AP", format=".4f"),
        alt.Tooltip("n_heads:Q", title="heads"),
    ]
    full = base.transform_filter(alt.datum.band == FULL).mark_line(
        strokeDash=[5, 3], strokeWidth=1.4, opacity=0.7
    )
    bands = base.transform_filter(alt.datum.band != FULL)
    layer = alt.layer(
        full,
        bands.mark_line(strokeWidth=2.2),
        bands.mark_point(filled=True, size=40).encode(tooltip=tip),
        data=table_of(data),
    ).properties(width=380, height=260)
    variants = sorted({d["variant"] for d in data})
    chart = (
        layer.facet(
            column=alt.Column(
                "variant:N",
                title=None,
                sort=["only", "without"],
                header=alt.Header(
                    labelExpr="datum.value == 'only' ? \"the band's dims only\" : "
                    '"every dim but the band\'s"'
                ),
            )
        )
        if len(variants) > 1
        else layer
    )
    return Drawn(
        chart.properties(
            title=alt.Title(
                f"Plasticity per RoPE band: {marts.display(model_id)}",
                subtitle=[
                    "model decile profile re-fitted on each band's dims (same pairs as the full "
                    "head); dashed = the full head over the same heads",
                ],
            )
        ),
        "Model deciles (means over heads); their intervals are in model_metric_ci "
        "(rope_decile_<k>_<band>_<variant>) and in the ap_drop forest.",
    )


def drop_forest(marts: Marts) -> Drawn:
    rows = _rows(marts, "rope_band_plasticity_model", "estimator = 'gaussian' AND variant = 'only'")
    rows = marts.tag(finite(rows, "ap_drop"))
    if not rows:
        raise Absent("no band ap_drop")
    ci = Intervals(marts, [f"rope_ap_drop_{b}_only" for b in BANDS])
    data = []
    for r in rows:
        data.append(
            {
                "model_id": r["model_id"],
                "model": r["model"],
                "family": r["family"],
                "band": r["band"],
                "value": r["ap_drop"],
                "full": r["ap_drop_full"],
                "n_heads": r["n_heads"],
                **ci.fields(r["model_id"], f"rope_ap_drop_{r['band']}_only"),
            }
        )
    look = model_look(marts, {d["model_id"] for d in data})
    x = alt.X("value:Q", title="ap_drop (first 20 % − last 20 %)", scale=alt.Scale(zero=False))
    tip = model_tooltip(
        alt.Tooltip("band:N", title="band"),
        alt.Tooltip("value:Q", title="band ap_drop", format=".4f"),
        alt.Tooltip("interval:N", title="interval"),
        alt.Tooltip("full:Q", title="full head ap_drop", format=".4f"),
        alt.Tooltip("n_layers:Q", title="layers (resampled)"),
        alt.Tooltip("n_heads:Q", title="heads"),
    )

    def full_tick(base: alt.Chart) -> alt.Chart:
        return base.mark_tick(color="#222", thickness=2, size=14, opacity=0.6).encode(
            x=alt.X("full:Q", title=x.to_dict().get("title"))
        )

    panels = group_panels(
        marts,
        data,
        "band",
        _BAND_PANELS,
        x,
        tip,
        look.color(legend=False),
        size=55,
        width=220,
        step=22,
        under=full_tick,
    )
    chart = alt.hconcat(*panels, data=table_of(data), spacing=14).properties(
        title=alt.Title(
            "ap_drop on each RoPE band's dims, with intervals",
            subtitle=[
                "point = band ap_drop, bar = its interval, hollow = no interval; "
                "black tick = the full head's ap_drop over the same heads",
            ],
        )
    )
    return Drawn(chart, ci.caption("Bars"))


# ------------------------------------------------------------------------------------------
# logit contribution against distance
# ------------------------------------------------------------------------------------------


def band_logits(marts: Marts, model_id: str) -> Drawn:
    rows = _rows(marts, "rope_band_logits_model", "model_id = ?", [model_id])
    data = [
        {
            "band": r["band"],
            "distance": (r["distance_lo"] + r["distance_hi"]) / 2,
            "distance_lo": r["distance_lo"],
            "distance_hi": r["distance_hi"],
            "mean": r["logit_mean"],
            "lo": r["logit_mean"] - r["logit_sd"] if r["logit_sd"] is not None else None,
            "hi": r["logit_mean"] + r["logit_sd"] if r["logit_sd"] is not None else None,
            "n_pairs": r["n_pairs"],
            "n_heads": r["n_heads"],
        }
        for r in finite(rows, "logit_mean", "distance_lo")
    ]
    if not data:
        raise Absent("no band logits")
    x = alt.X("distance:Q", title="query − key distance (tokens, bin centre)", axis=token_axis())
    y = alt.Y("mean:Q", title="band's logit contribution Σ q_a k_a + q_b k_b")
    base = alt.Chart(table_of(data)).encode(x=x, color=_band_color())
    spread = base.mark_area(opacity=0.07).encode(
        y=alt.Y("lo:Q", title=y.to_dict().get("title")), y2="hi:Q"
    )
    lines = base.mark_line(strokeWidth=2).encode(y=y)
    pts = base.mark_point(filled=True, size=35).encode(
        y=y,
        tooltip=[
            alt.Tooltip("band:N", title="band"),
            alt.Tooltip("distance_lo:Q", title="distance from", format=","),
            alt.Tooltip("distance_hi:Q", title="distance to (excl.)", format=","),
            alt.Tooltip("mean:Q", title="mean contribution", format=".4g"),
            alt.Tooltip("n_pairs:Q", title="pairs", format=","),
            alt.Tooltip("n_heads:Q", title="heads"),
        ],
    )
    chart = _line_figure(
        (spread, lines, pts),
        f"Logit contribution by distance per RoPE band: {marts.display(model_id)}",
        [
            "mean over every head's causal same-example pairs in the distance bin; shading = "
            "± 1 sd over the pairs (a spread, not an interval)",
        ],
    )
    return Drawn(chart, "Pooled over heads (n, sum and sum of squares added), without an interval.")


FIGURES = register(
    FigureDef(
        "rope-band-energy",
        SECTION,
        "Query and key energy per RoPE band",
        "Each band's share of the heads' query and key energy, one row per model and a panel "
        "per band: means over heads with their layer-cluster intervals.",
        ("rope_band_energy",),
        band_energy,
    ),
    FigureDef(
        "rope-drop-forest",
        SECTION,
        "ap_drop per RoPE band across models",
        "Plasticity drop re-fitted on each band's dims alone, with its interval, beside the "
        "full head's drop over the same heads.",
        ("rope_band_plasticity_model", "model_metric_ci"),
        drop_forest,
    ),
    FigureDef(
        "rope-spectrum",
        SECTION,
        "Energy spectrum over the rotary planes",
        "Each plane's share of the query and key energy against its wavelength (log scale), "
        "bands shaded.",
        ("rope_energy_spectrum",),
        spectrum,
        per_model=True,
    ),
    FigureDef(
        "rope-band-profiles",
        SECTION,
        "Plasticity profiles per RoPE band",
        "The model's decile profile on each band's dims beside the full head's.",
        ("rope_band_plasticity_model",),
        band_profiles,
        per_model=True,
    ),
    FigureDef(
        "rope-band-logits",
        SECTION,
        "Logit contribution by distance per RoPE band",
        "Each band's mean contribution to the attention logit against the query-key distance.",
        ("rope_band_logits_model",),
        band_logits,
        per_model=True,
    ),
)
