"""The one renderer: every figure of the catalogue -> PNG + SVG + Vega-Lite spec, and one
self-contained ``index.html`` (Vega, Vega-Lite and vega-embed inlined; no network needed).

Figures come from the figure modules (``pca``, ``rotation``, ``plasticity``, ``training``,
``published``), which read marts only (the collages' stored axes and vectors come through
``vectors``).  A figure without data is left out with a note in the report and in
``figures.json``.  A figure's caption is its catalogue caption plus what its ``build`` adds
(e.g. which interval the error bars show).
"""

from __future__ import annotations

import datetime as _dt
import functools
import gc
import html
import json
import logging
import os
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import altair as alt
import duckdb
import vl_convert as vlc

from qkwh import __version__, store
from qkwh.errors import NotFoundError, QkwhError
from qkwh.paths import REPORTS_DIR
from qkwh.reports import pca, plasticity, published, rotation, training
from qkwh.reports.base import (
    Drawn,
    FigureDef,
    Marts,
    NoData,
    base_config,
    ordered_models,
    relations,
    slug,
)

log = logging.getLogger("qkwh.reports")

CATALOGUE: tuple[FigureDef, ...] = (
    pca.FIGURES + rotation.FIGURES + plasticity.FIGURES + training.FIGURES + published.FIGURES
)
SECTIONS = ("PCA", "Rotation", "Plasticity", "Training dynamics", "Published comparison")
DEFAULT_OUT = REPORTS_DIR / "latest"
FIGURE_DIR = "figures"
VL_VERSION = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])  # e.g. "6.4"

@dataclass(frozen=True)
class RenderedFigure:
    """One drawn figure and its files (paths absolute)."""

    id: str
    section: str
    title: str
    caption: str
    sources: tuple[str, ...]
    model_id: str | None
    png: Path | None
    svg: Path | None
    spec: Path


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
    """What ``render`` wrote: ``index`` (index.html), the figures and the figures left out."""

    out: Path
    index: Path
    figures: tuple[RenderedFigure, ...]
    skipped: tuple[SkippedFigure, ...]
    models: tuple[str, ...]
    seconds: float = 0.0
    figure_index: Path | None = field(default=None)

    @property
    def failed(self) -> tuple[SkippedFigure, ...]:
        return tuple(s for s in self.skipped if s.failed)

    def summary(self) -> str:
        left = f", {len(self.skipped)} left out" if self.skipped else ""
        bad = f" ({len(self.failed)} failed)" if self.failed else ""
        return (f"{len(self.figures)} figures for {len(self.models)} model(s){left}{bad} "
                f"in {self.seconds:.1f}s: {self.index}")

    def __str__(self) -> str:
        return str(self.index)


def render(
    warehouse: str | Path | None = None,
    out: str | Path | None = None,
    models: Sequence[str] | None = None,
    *,
    figures: Sequence[str] | None = None,
    formats: Sequence[str] = ("png", "svg"),
    max_points: int = 1000,
    scale: float = 2.0,
    strict: bool = False,
) -> ReportResult:
    """Render every figure the marts support into an offline HTML report plus PNG/SVG files.

    WAREHOUSE is the DuckDB file (default: $QKWH_WAREHOUSE, else warehouse/qkwh.duckdb); it must
    have been built with `qkwh build`.  OUT is the report folder (default: reports/latest,
    overwritten).  MODELS limits the report to these model ids (default: every model).

    Writes OUT/index.html (one self-contained page: Vega, Vega-Lite and vega-embed inlined,
    a figure index, tooltips naming model, layer and head, click a model in a legend to pick
    it), OUT/figures/<id>.png (``scale``× pixel density), .svg and .vl.json per figure,
    and OUT/figures.json (the figure index: files, source marts, figures left out and why).
    A figure without data (e.g. no checkpoints ingested) is left out with a note.  FIGURES
    limits the report to some figures: keys (``pca-taxonomy``), key prefixes (``train``) or
    sections (``Plasticity``).  Collages plot at most ``max_points`` rows per kind per head.
    With ``strict`` an error while drawing a figure is raised instead of noted.
    """
    t0 = time.perf_counter()
    bad = [f for f in formats if f not in ("png", "svg")]
    if bad:
        raise QkwhError(f"unknown figure format {', '.join(bad)}: choose png and/or svg")
    out_dir = Path(out).expanduser().resolve() if out else DEFAULT_OUT
    catalogue = _select(figures)
    con = _open(warehouse)
    try:
        selected = _models(con, models)
        marts = Marts(con, selected, max_points=max_points)
        built, skipped = _build_all(marts, catalogue, strict=strict)
    finally:
        con.close()

    fig_dir = out_dir / FIGURE_DIR
    fig_dir.mkdir(parents=True, exist_ok=True)
    for old in fig_dir.iterdir():  # a re-render must not leave figures of an earlier run behind
        if old.is_file() and old.name.endswith((".png", ".svg", ".vl.json")):
            old.unlink()

    rendered: list[RenderedFigure] = []
    specs: dict[str, dict[str, Any]] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1))) as pool:
        jobs = [pool.submit(_write_files, fig_dir, fid, spec, formats, scale)
                for _, fid, _, spec, _ in built]
        for (fig, fid, model_id, spec, caption), job in zip(built, jobs):
            try:
                png, svg, spec_path = job.result()
            except Exception as exc:  # a spec Vega cannot draw is a bug: note it, keep the rest
                if strict:
                    raise
                log.warning("figure %s failed to render: %s", fid, exc)
                skipped.append(SkippedFigure(fid, fig.section, fig.title, f"failed to render: {exc}",
                                             model_id, failed=True))
                continue
            specs[fid] = spec
            rendered.append(RenderedFigure(fid, fig.section, fig.title, caption, fig.sources,
                                          model_id, png, svg, spec_path))

    wh = store.resolve_warehouse(warehouse)
    index = out_dir / "index.html"
    index.write_text(_html(rendered, skipped, specs, selected, wh, out_dir), encoding="utf-8")
    fig_index = out_dir / "figures.json"
    fig_index.write_text(json.dumps(_index_json(rendered, skipped, selected, wh, out_dir), indent=2),
                         encoding="utf-8")
    return ReportResult(out_dir, index, tuple(rendered), tuple(skipped), tuple(selected),
                        time.perf_counter() - t0, fig_index)


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
        raise QkwhError("the warehouse has no marts (model_summary missing): run `qkwh build` first")
    ordered = ordered_models(con)
    if not ordered:
        raise QkwhError("the warehouse has no models: run `qkwh ingest`, `qkwh compute` and "
                        "`qkwh build` first")
    if not wanted:
        return ordered
    wanted = [m for m in wanted if m]
    missing = [m for m in wanted if m not in ordered]
    if missing:
        raise NotFoundError(f"no model {', '.join(map(repr, missing))} in the marts "
                            f"(have: {', '.join(ordered)})")
    return [m for m in ordered if m in set(wanted)]


def _select(wanted: Sequence[str] | None) -> tuple[FigureDef, ...]:
    if not wanted:
        return CATALOGUE
    picked = []
    for w in wanted:
        hits = [f for f in CATALOGUE
                if w.lower() in (f.key, f.section.lower()) or f.key.startswith(w.lower() + "-")]
        if not hits:
            raise QkwhError(f"no figure {w!r}; figures: {', '.join(f.key for f in CATALOGUE)}; "
                            f"sections: {', '.join(SECTIONS)}")
        picked += [f for f in hits if f not in picked]
    return tuple(f for f in CATALOGUE if f in picked)


def _build_all(marts: Marts, catalogue: Sequence[FigureDef], *, strict: bool):
    built: list[tuple[FigureDef, str, str | None, dict[str, Any], str]] = []
    skipped: list[SkippedFigure] = []
    for fig in catalogue:
        targets: Iterable[str | None] = marts.models if fig.per_model else [None]  # type: ignore[list-item]
        for model_id in targets:
            fid = f"{fig.key}-{slug(model_id)}" if model_id else fig.key
            try:
                chart = fig.build(marts, model_id) if model_id else fig.build(marts)
                caption = fig.caption
                if isinstance(chart, Drawn):
                    caption = f"{caption} {chart.caption}".strip()
                    chart = chart.chart
                with alt.data_transformers.enable("default", max_rows=None):
                    spec = base_config(chart).to_dict(validate=True)
            except NoData as exc:
                skipped.append(SkippedFigure(fid, fig.section, fig.title, str(exc), model_id))
                continue
            except Exception as exc:
                if strict:
                    raise
                log.warning("figure %s failed: %s", fid, exc)
                skipped.append(SkippedFigure(fid, fig.section, fig.title,
                                             f"failed: {type(exc).__name__}: {exc}", model_id,
                                             failed=True))
                continue
            built.append((fig, fid, model_id, spec, caption))
    return built, skipped


def _write_files(fig_dir: Path, fid: str, spec: dict[str, Any], formats: Sequence[str],
                 scale: float) -> tuple[Path | None, Path | None, Path]:
    spec_path = fig_dir / f"{fid}.vl.json"
    spec_path.write_text(json.dumps(spec, separators=(",", ":")), encoding="utf-8")
    png = svg = None
    text = vlc.vegalite_to_svg(spec, vl_version=VL_VERSION)
    if "svg" in formats:
        svg = fig_dir / f"{fid}.svg"
        svg.write_text(text, encoding="utf-8")
    if "png" in formats:  # rasterise the SVG: same drawing, no second Vega run
        png = fig_dir / f"{fid}.png"
        png.write_bytes(vlc.svg_to_png(text, scale=scale))
    return png, svg, spec_path


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
    """vega + vega-lite + vega-embed as one script (vl-convert builds it offline, ~5 s), cached
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


def _html(figures: Sequence[RenderedFigure], skipped: Sequence[SkippedFigure],
          specs: dict[str, dict[str, Any]], models: Sequence[str], warehouse: Path, out: Path) -> str:
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    bundle = _js_bundle()
    parts: list[str] = []
    parts.append("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">")
    parts.append("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">")
    parts.append(f"<title>qkwh report: {_esc(', '.join(models[:4]))}{' …' if len(models) > 4 else ''}</title>")
    parts.append(f"<style>{_CSS}</style></head><body>")
    parts.append("<header><h1>qkwh report: attention-head Q/K geometry</h1>")
    parts.append(f"<p>{len(models)} model(s): {_esc(', '.join(models))}</p>")
    parts.append(f"<p>warehouse <code>{_esc(warehouse)}</code> · generated {now} · qkwh {__version__} · "
                 f"Vega {vlc.get_vega_version()} · Vega-Lite {VL_VERSION} (inlined, works offline)</p>")
    parts.append("</header><main>")

    # figure index
    parts.append("<h2 id=\"figure-index\">Figure index</h2>")
    parts.append("<p class=\"caption\">Hover a mark for its model, layer and head; click a model in a "
                 "legend to pick it (shift-click for several, double-click to reset). Error bars and "
                 "bands are intervals: each caption says which. Every figure "
                 "also exists as PNG and SVG in <code>figures/</code>.</p>")
    parts.append("<table class=\"index\"><tr><th>#</th><th>figure</th><th>section</th><th>model</th>"
                 "<th>source marts / tables</th><th>files</th></tr>")
    for i, f in enumerate(figures, 1):
        files = " ".join(f"<a href=\"{_esc(_rel(p, out))}\">{k}</a>"
                         for k, p in (("PNG", f.png), ("SVG", f.svg), ("spec", f.spec)) if p)
        parts.append(f"<tr><td>{i}</td><td><a href=\"#fig-{_esc(f.id)}\">{_esc(f.title)}</a></td>"
                     f"<td>{_esc(f.section)}</td><td>{_esc(f.model_id or 'all')}</td>"
                     f"<td>{_esc(', '.join(f.sources))}</td><td>{files}</td></tr>")
    parts.append("</table>")
    if skipped:
        parts.append("<div class=\"note\" id=\"left-out\"><strong>Left out</strong> "
                     "(figures without data are not drawn):<ul>")
        for s, mods in _skip_groups(skipped):
            who = f" [{_esc(', '.join(mods))}]" if mods else ""
            parts.append(f"<li><strong>{_esc(s.title)}</strong> ({_esc(s.section)}){who}: "
                         f"{_esc(s.reason)}</li>")
        parts.append("</ul></div>")

    # sections
    for section in SECTIONS:
        figs = [f for f in figures if f.section == section]
        skips = [s for s in skipped if s.section == section]
        if not figs and not skips:
            continue
        parts.append(f"<h2 id=\"section-{slug(section)}\">{_esc(section)}</h2>")
        if skips:
            parts.append("<div class=\"note\">Left out here:<ul>")
            for s, mods in _skip_groups(skips):
                who = f" [{_esc(', '.join(mods))}]" if mods else ""
                parts.append(f"<li>{_esc(s.title)}{who}: {_esc(s.reason)}</li>")
            parts.append("</ul></div>")
        for f in figs:
            links = " · ".join(f"<a href=\"{_esc(_rel(p, out))}\">{k}</a>"
                               for k, p in (("PNG", f.png), ("SVG", f.svg), ("Vega-Lite spec", f.spec)) if p)
            parts.append(f"<figure class=\"fig\" id=\"fig-{_esc(f.id)}\">")
            parts.append(f"<h3>{_esc(f.title)}{(' — ' + _esc(f.model_id)) if f.model_id else ''}</h3>")
            parts.append(f"<p class=\"caption\">{_esc(f.caption)}</p>")
            parts.append(f"<div class=\"vis\" id=\"vis-{_esc(f.id)}\"></div>")
            spec_json = json.dumps(specs[f.id], separators=(",", ":")).replace("</", "<\\/")
            parts.append(f"<script type=\"application/json\" class=\"vl-spec\" "
                         f"data-figure=\"{_esc(f.id)}\">{spec_json}</script>")
            parts.append(f"<p class=\"meta\">id <code>{_esc(f.id)}</code> · from "
                         f"{_esc(', '.join(f.sources))} · {links}</p></figure>")
    parts.append("</main>")
    parts.append(f"<script>{bundle}</script>")
    parts.append(f"<script>{_JS}</script>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _index_json(figures: Sequence[RenderedFigure], skipped: Sequence[SkippedFigure],
                models: Sequence[str], warehouse: Path, out: Path) -> dict[str, Any]:
    def fig(f: RenderedFigure) -> dict[str, Any]:
        d = asdict(f)
        for k in ("png", "svg", "spec"):
            d[k] = _rel(getattr(f, k), out)
        d["sources"] = list(f.sources)
        return d

    return {
        "qkwh_version": __version__,
        "warehouse": str(warehouse),
        "models": list(models),
        "figures": [fig(f) for f in figures],
        "skipped": [asdict(s) for s in skipped],
    }
