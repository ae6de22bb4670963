"""The one renderer: every figure of the catalogue -> an offline HTML report.

``index.html`` holds the cross-model figures, the model list and the figure index; every model
has its own page (``models/<model>.html``) with its per-model figures (collages, heatmaps, head
profiles), so no page grows with the number of models times the per-model figures.  Every page
loads Vega, Vega-Lite and vega-embed from one file in the report folder (``vega.js``): no
network needed, also from file://.  Each figure's Vega-Lite spec is inlined in its page and
written to ``figures/<id>.vl.json``; PNG and SVG files only when asked (``formats``, the CLI's
``--static``).

Figures come from the figure modules (``pca``, ``rotation``, ``plasticity``, ``training``,
``published``), which read marts only (the collages' stored axes and vectors come through
``vectors``).  A figure without data is left out with a note in the report and in
``figures.json``.  A figure's caption is its catalogue caption plus what its ``build`` adds
(e.g. which interval the error bars show) plus what :meth:`Marts.sample` left out.
"""

from __future__ import annotations

import datetime as _dt
import functools
import gc
import html
import json
import logging
import os
import re
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import altair as alt
import duckdb
import vl_convert as vlc
from jsonschema.exceptions import best_match

from qkwh import __version__, store
from qkwh.errors import NotFoundError, QkwhError
from qkwh.paths import REPORTS_DIR
from qkwh.reports import catalogue as _catalogue
from qkwh.reports.base import (
    POINT_BUDGET,
    Absent,
    Drawn,
    FigureDef,
    Marts,
    ModelInfo,
    NoData,
    ordered_models,
    relations,
    slug,
    with_config,
)

log = logging.getLogger("qkwh.reports")

DEFAULT_OUT = REPORTS_DIR / "latest"
FIGURE_DIR = "figures"
MODEL_DIR = "models"  # one page per model: its per-model figures
VENDOR_JS = "vega.js"  # Vega, Vega-Lite and vega-embed, loaded by every page from the report folder
VL_VERSION = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])  # e.g. "6.4"


@dataclass(frozen=True)
class RenderedFigure:
    """One drawn figure and its files (paths absolute): the page showing it (index.html for a
    cross-model figure, the model's page for a per-model one), its Vega-Lite spec, and PNG / SVG
    when asked for."""

    id: str
    section: str
    title: str
    caption: str
    sources: tuple[str, ...]
    model_id: str | None
    png: Path | None
    svg: Path | None
    spec: Path
    page: Path


@dataclass(frozen=True)
class SkippedFigure:
    """A figure left out: no data (``failed`` False) or an error while drawing it (True)."""

    id: str
    section: str
    title: str
    reason: str
    model_id: str | None = None
    failed: bool = False


@dataclass(frozen=True)
class ReportResult:
    """What ``render`` wrote: ``index`` (index.html), the model pages, the figures and the
    figures left out."""

    out: Path
    index: Path
    figures: tuple[RenderedFigure, ...]
    skipped: tuple[SkippedFigure, ...]
    models: tuple[str, ...]
    seconds: float = 0.0
    figure_index: Path | None = field(default=None)
    model_pages: tuple[Path, ...] = ()

    @property
    def failed(self) -> tuple[SkippedFigure, ...]:
        return tuple(s for s in self.skipped if s.failed)

    def summary(self) -> str:
        left = f", {len(self.skipped)} left out" if self.skipped else ""
        bad = f" ({len(self.failed)} failed)" if self.failed else ""
        pages = f" and {len(self.model_pages)} model page(s)" if self.model_pages else ""
        return (
            f"{len(self.figures)} figures for {len(self.models)} model(s){left}{bad} "
            f"in {self.seconds:.1f}s: {self.index}{pages}"
        )

    def __str__(self) -> str:
        return str(self.index)


def render(
    warehouse: str | Path | None = None,
    out: str | Path | None = None,
    models: Sequence[str] | None = None,
    *,
    figures: Sequence[str] | None = None,
    formats: Sequence[str] = (),
    max_points: int = 1000,
    point_budget: int = POINT_BUDGET,
    scale: float = 2.0,
    strict: bool = False,
) -> ReportResult:
    """Render every figure the marts support into an offline HTML report.

    WAREHOUSE is the DuckDB file (default: $QKWH_WAREHOUSE, else ./qkwh.duckdb in the working
    directory); it must have been built with `qkwh build`.  OUT is the report folder (default: reports/latest,
    overwritten).  MODELS limits the report to these model ids (default: every model).

    Writes OUT/index.html (the cross-model figures, the model list and the figure index),
    OUT/models/<model>.html (one page per model with its per-model figures: collages,
    heatmaps, head profiles), OUT/vega.js (Vega, Vega-Lite and vega-embed, the one script every
    page loads from the folder: no network needed), OUT/figures/<id>.vl.json per figure and
    OUT/figures.json (the figure index: pages, files, source marts, figures left out and why).
    FORMATS adds static files per figure, OUT/figures/<id>.png (``scale``× pixel density) and/or
    .svg (the CLI's ``--static`` writes both).  Tooltips name model, layer and head; clicking a
    model in a legend picks it.  A figure without data (e.g. no checkpoints ingested) is left
    out with a note.  FIGURES limits the report to some figures: keys (``pca-taxonomy``), key
    prefixes (``train``) or sections (``Plasticity``).  Collages plot at most ``max_points``
    rows per kind per head; a cross-model point cloud at most ``point_budget`` marks (split
    evenly over the models, see :meth:`Marts.sample`).  With ``strict`` an error while drawing
    a figure is raised instead of noted.
    """
    t0 = time.perf_counter()
    bad = [f for f in formats if f not in ("png", "svg")]
    if bad:
        raise QkwhError(f"unknown figure format {', '.join(bad)}: choose png and/or svg")
    out_dir = Path(out).expanduser().resolve() if out else DEFAULT_OUT
    catalogue = _catalogue.select(figures)
    con = _open(warehouse)
    try:
        selected = _models(con, models)
        marts = Marts(con, selected, max_points=max_points, point_budget=point_budget)
        built, skipped = _build_all(marts, catalogue, strict=strict)
        infos = [marts.info(m) for m in selected]
    finally:
        con.close()

    fig_dir = out_dir / FIGURE_DIR
    _clear(out_dir)
    fig_dir.mkdir(parents=True, exist_ok=True)
    pages = _pages(infos, built, skipped, out_dir)

    rendered: list[RenderedFigure] = []
    specs: dict[str, str] = {}
    static = {}
    if formats:
        with ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1))) as pool:
            static = {
                fid: pool.submit(_write_static, fig_dir, fid, spec, formats, scale)
                for _, fid, _, spec, _ in built
            }
    for fig, fid, model_id, spec, caption in built:
        png = svg = None
        if fid in static:
            try:
                png, svg = static[fid].result()
            except Exception as exc:  # a spec Vega cannot draw is a bug: note it, keep the rest
                if strict:
                    raise
                log.warning("figure %s failed to render: %s", fid, exc)
                skipped.append(
                    SkippedFigure(
                        fid,
                        fig.section,
                        fig.title,
                        f"failed to render: {exc}",
                        model_id,
                        failed=True,
                    )
                )
                continue
        text = json.dumps(spec, separators=(",", ":"))
        spec_path = fig_dir / f"{fid}.vl.json"
        spec_path.write_text(text, encoding="utf-8")
        specs[fid] = text
        rendered.append(
            RenderedFigure(
                fid,
                fig.section,
                fig.title,
                caption,
                fig.sources,
                model_id,
                png,
                svg,
                spec_path,
                pages[model_id],
            )
        )

    wh = store.resolve_warehouse(warehouse)
    (out_dir / VENDOR_JS).write_text(_js_bundle(), encoding="utf-8")
    head = _Head(infos, wh)
    index = pages[None]
    index.write_text(_index_html(head, rendered, skipped, specs, pages, out_dir), encoding="utf-8")
    for info in infos:
        page = pages.get(info.model_id)
        if page is not None:
            page.parent.mkdir(parents=True, exist_ok=True)
            page.write_text(
                _model_html(head, info, rendered, skipped, specs, pages, out_dir), encoding="utf-8"
            )
    fig_index = out_dir / "figures.json"
    fig_index.write_text(
        json.dumps(_index_json(rendered, skipped, selected, wh, out_dir, pages), indent=2),
        encoding="utf-8",
    )
    return ReportResult(
        out_dir,
        index,
        tuple(rendered),
        tuple(skipped),
        tuple(selected),
        time.perf_counter() - t0,
        fig_index,
        tuple(p for m, p in pages.items() if m),
    )


def _clear(out_dir: Path) -> None:
    """Remove what an earlier render wrote (a re-render must not leave its files behind)."""
    for old in (out_dir / FIGURE_DIR).glob("*"):
        if old.is_file() and old.name.endswith((".png", ".svg", ".vl.json")):
            old.unlink()
    for old in (out_dir / MODEL_DIR).glob("*.html"):
        old.unlink()


def _pages(
    infos: Sequence[ModelInfo],
    built: Sequence[tuple],
    skipped: Sequence[SkippedFigure],
    out_dir: Path,
) -> dict[str | None, Path]:
    """The page of every figure: ``None`` (cross-model) -> index.html, a model -> its own page
    (only models with per-model figures drawn or left out get one)."""
    pages: dict[str | None, Path] = {None: out_dir / "index.html"}
    have = {b[2] for b in built} | {s.model_id for s in skipped}
    for info in infos:
        if info.model_id in have:
            pages[info.model_id] = out_dir / MODEL_DIR / f"{slug(info.model_id)}.html"
    return pages


# ------------------------------------------------------------------------------------------
# building
# ------------------------------------------------------------------------------------------


def _open(warehouse: str | Path | None):
    """The warehouse, read-only.  When this process still holds it open read-write (a dbt build
    or compute just ran in-process, e.g. `qkwh demo`), DuckDB refuses a second, read-only
    configuration: collect the stale handle and retry, then share the read-write one."""
    try:
        return store.connect(warehouse, read_only=True)
    except duckdb.ConnectionException as exc:
        if "different configuration" not in str(exc):
            raise
    gc.collect()
    try:
        return store.connect(warehouse, read_only=True)
    except duckdb.ConnectionException as exc:
        if "different configuration" not in str(exc):
            raise
    log.info("warehouse already open read-write in this process: reading through that")
    return store.connect(warehouse, read_only=False)


def _models(con: Any, wanted: Sequence[str] | None) -> list[str]:
    if "model_summary" not in relations(con):
        raise QkwhError(
            "the warehouse has no marts (model_summary missing): run `qkwh build` first"
        )
    ordered = ordered_models(con)
    if not ordered:
        raise QkwhError(
            "the warehouse has no models: run `qkwh ingest`, `qkwh compute` and `qkwh build` first"
        )
    if not wanted:
        return ordered
    wanted = [m for m in wanted if m]
    missing = [m for m in wanted if m not in ordered]
    if missing:
        raise NotFoundError(
            f"no model {', '.join(map(repr, missing))} in the marts (have: {', '.join(ordered)})"
        )
    return [m for m in ordered if m in set(wanted)]


def _build_all(marts: Marts, catalogue: Sequence[FigureDef], *, strict: bool):
    built: list[tuple[FigureDef, str, str | None, dict[str, Any], str]] = []
    skipped: list[SkippedFigure] = []
    for fig in catalogue:
        targets: Iterable[str | None] = marts.models if fig.per_model else [None]  # type: ignore[list-item]
        for model_id in targets:
            fid = f"{fig.key}-{slug(model_id)}" if model_id else fig.key
            marts.notes.clear()
            try:
                chart = fig.build(marts, model_id) if model_id else fig.build(marts)
                caption = fig.caption
                if isinstance(chart, Drawn):
                    caption = f"{caption} {chart.caption}".strip()
                    chart = chart.chart
                caption = " ".join([caption, *marts.notes]).strip()
                spec = _spec(chart)
            except Absent:  # an opt-in analysis not computed: no figure, no note
                continue
            except NoData as exc:
                skipped.append(SkippedFigure(fid, fig.section, fig.title, str(exc), model_id))
                continue
            except Exception as exc:
                if strict:
                    raise
                log.warning("figure %s failed: %s", fid, exc)
                skipped.append(
                    SkippedFigure(
                        fid,
                        fig.section,
                        fig.title,
                        f"failed: {type(exc).__name__}: {exc}",
                        model_id,
                        failed=True,
                    )
                )
                continue
            built.append((fig, fid, model_id, spec, caption))
    return built, skipped


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


def _prune(spec: dict[str, Any]) -> dict[str, Any]:
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


def _spec(chart: Any) -> dict[str, Any]:
    """The chart's Vega-Lite spec with the report's look, validated against the Vega-Lite schema.

    Validated once, as a whole and without its data rows (Altair's own ``validate=True`` checks
    every nested object again and every data record: most of a large report's time).
    """
    with alt.data_transformers.enable("default", max_rows=None):
        spec = _prune(with_config(chart.to_dict(validate=False)))
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


def _write_static(
    fig_dir: Path, fid: str, spec: dict[str, Any], formats: Sequence[str], scale: float
) -> tuple[Path | None, Path | None]:
    """The figure's SVG and / or PNG (``qkwh report --static``)."""
    png = svg = None
    text = vlc.vegalite_to_svg(spec, vl_version=VL_VERSION)
    if "svg" in formats:
        svg = fig_dir / f"{fid}.svg"
        svg.write_text(text, encoding="utf-8")
    if "png" in formats:  # rasterise the SVG: same drawing, no second Vega run
        png = fig_dir / f"{fid}.png"
        png.write_bytes(vlc.svg_to_png(text, scale=scale))
    return png, svg


# ------------------------------------------------------------------------------------------
# index.html
# ------------------------------------------------------------------------------------------

_CSS = """
:root { --fg: #1d2330; --muted: #5b6472; --line: #dde1e6; --accent: #2f6db5; }
* { box-sizing: border-box; }
body { font-family: "Liberation Sans", "DejaVu Sans", Helvetica, Arial, sans-serif; color: var(--fg);
       margin: 0; background: #f7f8fa; line-height: 1.45; }
header { background: #1d2330; color: #fff; padding: 18px 32px; }
header h1 { margin: 0 0 4px; font-size: 22px; }
header p { margin: 2px 0; color: #c8ced8; font-size: 13px; }
main { padding: 16px 32px 48px; max-width: 1500px; }
h2 { margin: 32px 0 8px; font-size: 20px; border-bottom: 2px solid var(--line); padding-bottom: 4px; }
table.index { border-collapse: collapse; background: #fff; font-size: 13px; width: 100%; }
table.index th, table.index td { border: 1px solid var(--line); padding: 4px 8px; text-align: left;
       vertical-align: top; }
table.index th { background: #eef1f4; }
.note { background: #fff8e5; border: 1px solid #f0d78c; padding: 8px 12px; margin: 8px 0;
        font-size: 13px; }
.note ul { margin: 4px 0 0 18px; padding: 0; }
figure.fig { background: #fff; border: 1px solid var(--line); border-radius: 6px; margin: 16px 0;
        padding: 12px 16px; overflow-x: auto; }
figure.fig h3 { margin: 0 0 2px; font-size: 16px; }
figure.fig .caption { color: var(--muted); font-size: 13px; margin: 0 0 8px; }
figure.fig .meta { color: var(--muted); font-size: 12px; margin-top: 6px; }
a { color: var(--accent); }
code { font-size: 12px; background: #eef1f4; padding: 0 3px; border-radius: 3px; }
header code { background: #313a4b; color: #e8ecf2; }
.vis { min-height: 60px; }
nav.top { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px;
          margin: 8px 0 12px; font-size: 14px; }
nav.top .jump { margin-left: 16px; }
nav.top select { font-size: 14px; max-width: 420px; }
"""

_JS = """
(function () {
  const state = window.qkwhReport = { ready: false, views: {}, errors: [], total: 0 };
  const opts = { renderer: "canvas", actions: { export: true, source: false, compiled: false,
                 editor: false }, downloadFileName: null };
  const jobs = [];
  document.querySelectorAll("script.vl-spec").forEach(function (node) {
    const id = node.dataset.figure;
    const target = document.getElementById("vis-" + id);
    state.total += 1;
    let spec;
    try { spec = JSON.parse(node.textContent); }
    catch (e) { state.errors.push(id + ": " + e); console.error("qkwh: bad spec " + id, e); return; }
    jobs.push(vegaEmbed(target, spec, Object.assign({}, opts, { downloadFileName: id }))
      .then(function (res) { state.views[id] = res.view; })
      .catch(function (e) { state.errors.push(id + ": " + e); console.error("qkwh: figure " + id, e);
                            target.textContent = "This figure could not be drawn: " + e; }));
  });
  Promise.allSettled(jobs).then(function () { state.ready = true; });
})();
"""


@functools.lru_cache(maxsize=1)
def _js_bundle() -> str:
    """vega + vega-lite + vega-embed as one script (vl-convert builds it offline, ~5 s), written
    to the report folder as ``vega.js``; cached
    per vl-convert and Vega-Lite version in ~/.cache/qkwh (or $XDG_CACHE_HOME/qkwh)."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "qkwh"
    name = f"vega-bundle-vlc{getattr(vlc, '__version__', vlc.get_vega_version())}-vl{VL_VERSION}.js"
    cached = root / name
    try:
        text = cached.read_text(encoding="utf-8")
        if "vegaEmbed" in text:
            return text
    except OSError:
        pass
    text = vlc.javascript_bundle(vl_version=VL_VERSION)  # type: ignore[call-arg]  # snippet is optional
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, cached)
    except OSError:  # a read-only home: just build it each time
        pass
    return text


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _rel(path: Path | None, base: Path) -> str | None:
    if path is None:
        return None
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return path.as_posix()


def _skip_groups(skipped: Sequence[SkippedFigure]) -> list[tuple[SkippedFigure, list[str]]]:
    """Skips of one figure with one reason, the models listed together."""
    groups: dict[tuple[str, str], tuple[SkippedFigure, list[str]]] = {}
    for s in skipped:
        base_id = s.id if s.model_id is None else s.id[: -len(slug(s.model_id)) - 1]
        reason = s.reason
        key = (base_id, reason)
        if key not in groups:
            groups[key] = (s, [])
        if s.model_id:
            groups[key][1].append(s.model_id)
    return list(groups.values())


@dataclass(frozen=True)
class _Head:
    """What every page's header says."""

    infos: Sequence[ModelInfo]
    warehouse: Path
    generated: str = field(
        default_factory=lambda: _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    )

    def meta(self) -> str:
        return (
            f"<p>warehouse <code>{_esc(self.warehouse)}</code> · generated {self.generated} · "
            f"qkwh {__version__} · Vega {vlc.get_vega_version()} · Vega-Lite {VL_VERSION} "
            f"(<code>{VENDOR_JS}</code> in the report folder: works offline)</p>"
        )


def _href(path: Path, page: Path, anchor: str = "") -> str:
    """Link from ``page`` to ``path`` (relative, so the folder can be moved), plus ``#anchor``."""
    rel = os.path.relpath(path, page.parent).replace(os.sep, "/")
    if path == page:
        rel = ""
    return _esc(rel + (f"#{anchor}" if anchor else ""))


def _start(title: str, parts: list[str]) -> None:
    parts.append('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">')
    parts.append('<meta name="viewport" content="width=device-width, initial-scale=1">')
    parts.append(f"<title>{_esc(title)}</title>")
    parts.append(f"<style>{_CSS}</style></head><body>")


def _end(page: Path, out: Path, parts: list[str]) -> str:
    parts.append("</main>")
    parts.append(f'<script src="{_href(out / VENDOR_JS, page)}"></script>')
    parts.append(f"<script>{_JS}</script>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _model_jump(
    head: _Head, pages: dict[str | None, Path], page: Path, current: str | None = None
) -> str:
    """A selector opening a model's page (a plain list of links is on the index too)."""
    opts = ['<option value="">choose a model…</option>']
    for i in head.infos:
        if i.model_id in pages:
            sel = " selected" if i.model_id == current else ""
            opts.append(
                f'<option value="{_href(pages[i.model_id], page)}"{sel}>{_esc(i.display)}</option>'
            )
    if len(opts) == 1:
        return ""
    return (
        '<label class="jump">per-model figures: <select onchange="if (this.value) '
        f'location.href = this.value">{"".join(opts)}</select></label>'
    )


def _figure(f: RenderedFigure, spec: str, page: Path, parts: list[str]) -> None:
    links = " · ".join(
        f'<a href="{_href(p, page)}">{k}</a>'
        for k, p in (("Vega-Lite spec", f.spec), ("PNG", f.png), ("SVG", f.svg))
        if p
    )
    parts.append(f'<figure class="fig" id="fig-{_esc(f.id)}">')
    parts.append(f"<h3>{_esc(f.title)}</h3>")
    parts.append(f'<p class="caption">{_esc(f.caption)}</p>')
    parts.append(f'<div class="vis" id="vis-{_esc(f.id)}"></div>')
    safe = spec.replace("</", "<\\/")  # no "</script>" inside the JSON
    parts.append(
        f'<script type="application/json" class="vl-spec" '
        f'data-figure="{_esc(f.id)}">{safe}</script>'
    )
    parts.append(
        f'<p class="meta">id <code>{_esc(f.id)}</code> · from '
        f"{_esc(', '.join(f.sources))} · {links}</p></figure>"
    )


def _left_out(
    skipped: Sequence[SkippedFigure], parts: list[str], title: str, with_models: bool
) -> None:
    if not skipped:
        return
    parts.append(f'<div class="note">{title}<ul>')
    for s, mods in _skip_groups(skipped):
        who = f" [{_esc(', '.join(mods))}]" if mods and with_models else ""
        parts.append(
            f"<li><strong>{_esc(s.title)}</strong> ({_esc(s.section)}){who}: {_esc(s.reason)}</li>"
        )
    parts.append("</ul></div>")


def _sections(
    figures: Sequence[RenderedFigure],
    skipped: Sequence[SkippedFigure],
    specs: dict[str, str],
    page: Path,
    parts: list[str],
    with_models: bool,
) -> None:
    for section in _catalogue.sections():
        figs = [f for f in figures if f.section == section]
        skips = [s for s in skipped if s.section == section]
        if not figs and not skips:
            continue
        parts.append(f'<h2 id="section-{slug(section)}">{_esc(section)}</h2>')
        _left_out(skips, parts, "Left out here:", with_models)
        for f in figs:
            _figure(f, specs[f.id], page, parts)


def _index_html(
    head: _Head,
    figures: Sequence[RenderedFigure],
    skipped: Sequence[SkippedFigure],
    specs: dict[str, str],
    pages: dict[str | None, Path],
    out: Path,
) -> str:
    page = pages[None]
    ids = [i.model_id for i in head.infos]
    cross = [f for f in figures if f.model_id is None]
    per_model = [f for f in figures if f.model_id is not None]
    parts: list[str] = []
    _start(f"qkwh report: {', '.join(ids[:4])}{' …' if len(ids) > 4 else ''}", parts)
    parts.append("<header><h1>qkwh report: attention-head Q/K geometry</h1>")
    shown = ", ".join(i.display for i in head.infos[:12]) + (" …" if len(ids) > 12 else "")
    parts.append(f"<p>{len(ids)} model(s): {_esc(shown)}</p>")
    parts.append(head.meta())
    parts.append("</header><main>")
    sections = [s for s in _catalogue.sections() if any(f.section == s for f in cross)]
    nav = [f'<a href="#section-{slug(s)}">{_esc(s)}</a>' for s in sections]
    nav += ['<a href="#models">models</a>', '<a href="#figure-index">figure index</a>']
    parts.append(f'<nav class="top">{" · ".join(nav)} {_model_jump(head, pages, page)}</nav>')
    parts.append(
        '<p class="caption">This page holds the figures across models; each model\'s own '
        "figures (collages, heatmaps, head profiles) are on its page: pick it above or in the "
        '<a href="#models">model list</a>. Hover a mark for its model, layer and head; click a '
        "model in a legend to pick it (shift-click for several, double-click to reset). Error "
        "bars and bands are intervals: each caption says which. A figure's menu (…) saves it "
        "as PNG or SVG; <code>qkwh report --static</code> writes both for every figure into "
        "<code>figures/</code>.</p>"
    )
    if not cross:
        parts.append('<p class="note">No cross-model figure was drawn.</p>')
    _sections(cross, [s for s in skipped if s.model_id is None], specs, page, parts, True)

    # the models and their pages
    parts.append('<h2 id="models">Models</h2>')
    keys = list(dict.fromkeys(f.id[: -len(slug(f.model_id or "")) - 1] for f in per_model))
    titles = {f.id[: -len(slug(f.model_id or "")) - 1]: f.title for f in per_model}
    drawn = {f.id for f in per_model}
    parts.append(
        '<table class="index"><tr><th>#</th><th>model</th><th>model id</th><th>family</th>'
        + "".join(f"<th>{_esc(titles[k])}</th>" for k in keys)
        + "</tr>"
    )
    for n, info in enumerate(head.infos, 1):
        mp = pages.get(info.model_id)
        name = f'<a href="{_href(mp, page)}">{_esc(info.display)}</a>' if mp else _esc(info.display)
        cells = []
        for k in keys:
            fid = f"{k}-{slug(info.model_id)}"
            cells.append(
                f'<td><a href="{_href(mp, page, "fig-" + fid)}">figure</a></td>'
                if mp and fid in drawn
                else "<td>–</td>"
            )
        parts.append(
            f"<tr><td>{n}</td><td>{name}</td><td><code>{_esc(info.model_id)}</code></td>"
            f"<td>{_esc(info.family)}</td>{''.join(cells)}</tr>"
        )
    parts.append("</table>")

    # figure index
    parts.append('<h2 id="figure-index">Figure index</h2>')
    parts.append(
        '<table class="index"><tr><th>#</th><th>figure</th><th>section</th><th>where</th>'
        "<th>source marts / tables</th></tr>"
    )
    n = 0
    for f in cross:
        n += 1
        parts.append(
            f'<tr><td>{n}</td><td><a href="#fig-{_esc(f.id)}">{_esc(f.title)}</a></td>'
            f"<td>{_esc(f.section)}</td><td>this page</td><td>{_esc(', '.join(f.sources))}</td></tr>"
        )
    for k in keys:
        first = next(f for f in per_model if f.id.startswith(k + "-") and f.title == titles[k])
        count = len([f for f in per_model if f.id == f"{k}-{slug(f.model_id or '')}"])
        n += 1
        parts.append(
            f"<tr><td>{n}</td><td>{_esc(titles[k])}</td><td>{_esc(first.section)}</td>"
            f'<td><a href="#models">each model\'s page</a> ({count})</td>'
            f"<td>{_esc(', '.join(first.sources))}</td></tr>"
        )
    parts.append("</table>")
    if skipped:
        parts.append('<div id="left-out"></div>')
        _left_out(
            skipped, parts, "<strong>Left out</strong> (figures without data are not drawn):", True
        )
    return _end(page, out, parts)


def _model_html(
    head: _Head,
    info: ModelInfo,
    figures: Sequence[RenderedFigure],
    skipped: Sequence[SkippedFigure],
    specs: dict[str, str],
    pages: dict[str | None, Path],
    out: Path,
) -> str:
    page = pages[info.model_id]
    index = pages[None]
    mine = [f for f in figures if f.model_id == info.model_id]
    skips = [s for s in skipped if s.model_id == info.model_id]
    order = [i.model_id for i in head.infos if i.model_id in pages]
    at = order.index(info.model_id)
    parts: list[str] = []
    _start(f"qkwh report: {info.display}", parts)
    parts.append(f"<header><h1>{_esc(info.display)}</h1>")
    parts.append(
        f"<p>model id <code>{_esc(info.model_id)}</code> · family {_esc(info.family)} · "
        f"model {at + 1} of {len(order)}</p>"
    )
    parts.append(head.meta())
    parts.append("</header><main>")
    nav = [f'<a href="{_href(index, page)}">all models: cross-model figures</a>']
    if at > 0:
        prev = next(i for i in head.infos if i.model_id == order[at - 1])
        nav.append(f'<a href="{_href(pages[prev.model_id], page)}">← {_esc(prev.display)}</a>')
    if at + 1 < len(order):
        nxt = next(i for i in head.infos if i.model_id == order[at + 1])
        nav.append(f'<a href="{_href(pages[nxt.model_id], page)}">{_esc(nxt.display)} →</a>')
    parts.append(
        f'<nav class="top">{" · ".join(nav)} {_model_jump(head, pages, page, info.model_id)}</nav>'
    )
    if not mine:
        parts.append('<p class="note">No per-model figure was drawn for this model.</p>')
    _sections(mine, skips, specs, page, parts, False)
    return _end(page, out, parts)


def _index_json(
    figures: Sequence[RenderedFigure],
    skipped: Sequence[SkippedFigure],
    models: Sequence[str],
    warehouse: Path,
    out: Path,
    pages: dict[str | None, Path],
) -> dict[str, Any]:
    def fig(f: RenderedFigure) -> dict[str, Any]:
        d = asdict(f)
        for k in ("png", "svg", "spec", "page"):
            d[k] = _rel(getattr(f, k), out)
        d["sources"] = list(f.sources)
        return d

    return {
        "qkwh_version": __version__,
        "warehouse": str(warehouse),
        "models": list(models),
        "pages": {m or "": _rel(p, out) for m, p in pages.items()},
        "vendor_js": VENDOR_JS,
        "figures": [fig(f) for f in figures],
        "skipped": [asdict(s) for s in skipped],
    }
