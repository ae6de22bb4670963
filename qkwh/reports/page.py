"""The report's HTML pages, from the Jinja2 templates in ``templates/`` (autoescaped).

``index.html`` holds the cross-model figures, the model list and the figure index; every model
with per-model figures has its own page.  Each figure's Vega-Lite spec is inlined once, in the
page that shows it, as ``<script type="application/json" class="vl-spec">`` with ``<``, ``>``
and ``&`` written as JSON escapes (:func:`qkwh.reports.specs.inline_json`), so no label or
dataset name can end the script or open a comment; its datasets are stored by column
(:func:`qkwh.reports.specs.pack_datasets`) and turned back into rows by the page's script.
Every other text and attribute is escaped by the templates.  :func:`read_specs` reads the
specs back from a report folder, as Vega-Lite specs.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from qkwh import __version__
from qkwh.reports.base import ModelInfo, slug
from qkwh.reports.catalogue import sections
from qkwh.reports.result import RenderedFigure, SkippedFigure
from qkwh.reports.specs import VL_VERSION, inline_json, pack_datasets, unpack_datasets
from qkwh.reports.static import VENDOR_JS

TEMPLATES = Path(__file__).with_name("templates")


@functools.lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["inline_json"] = lambda text: Markup(inline_json(text))
    return env


@dataclass(frozen=True)
class Head:
    """What every page's header says."""

    infos: Sequence[ModelInfo]
    warehouse: Path
    generated: str = field(
        default_factory=lambda: _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    )

    def fields(self) -> dict[str, Any]:
        import vl_convert as vlc

        return {
            "warehouse": str(self.warehouse),
            "generated": self.generated,
            "version": __version__,
            "vega": vlc.get_vega_version(),
            "vega_lite": VL_VERSION,
            "vendor": VENDOR_JS,
        }


def href(path: Path, page: Path, anchor: str = "") -> str:
    """Link from ``page`` to ``path`` (relative, so the folder can be moved), plus ``#anchor``."""
    rel = "" if path == page else os.path.relpath(path, page.parent).replace(os.sep, "/")
    return rel + (f"#{anchor}" if anchor else "")


@dataclass(frozen=True)
class _Group:
    title: str
    section: str
    reason: str
    models: list[str]


def skip_groups(skipped: Sequence[SkippedFigure]) -> list[_Group]:
    """Skips of one figure with one reason, the models listed together."""
    groups: dict[tuple[str, str], _Group] = {}
    for s in skipped:
        key = (s.key or s.id, s.reason)
        if key not in groups:
            groups[key] = _Group(s.title, s.section, s.reason, [])
        if s.model_id:
            groups[key].models.append(s.model_id)
    return list(groups.values())


def packed_spec(spec: str) -> str:
    """The text a page holds for a figure's spec (JSON text): its datasets by column
    (:func:`qkwh.reports.specs.pack_datasets`)."""
    return json.dumps(pack_datasets(json.loads(spec)), separators=(",", ":"))


def _figure(f: RenderedFigure, page: Path, packed: Mapping[str, str]) -> dict[str, Any]:
    links = [(text, href(p, page)) for text, p in (("PNG", f.png), ("SVG", f.svg)) if p]
    return {
        "id": f.id,
        "title": f.title,
        "caption": f.caption,
        "spec": packed[f.id] if f.id in packed else packed_spec(f.spec),
        "sources": f.sources,
        "links": links,
    }


def _sections(
    figures: Sequence[RenderedFigure],
    skipped: Sequence[SkippedFigure],
    page: Path,
    packed: Mapping[str, str],
) -> list[dict[str, Any]]:
    out = []
    for name in sections():
        figs = [f for f in figures if f.section == name]
        skips = [s for s in skipped if s.section == name]
        if figs or skips:
            out.append(
                {
                    "name": name,
                    "slug": slug(name),
                    "skips": skip_groups(skips),
                    "figures": [_figure(f, page, packed) for f in figs],
                }
            )
    return out


def _jump(
    head: Head, pages: dict[str | None, Path], page: Path, current: str | None = None
) -> list[tuple[str, str, bool]]:
    """The selector opening a model's page (a plain list of links is on the index too)."""
    return [
        (i.display, href(pages[i.model_id], page), i.model_id == current)
        for i in head.infos
        if i.model_id in pages
    ]


def index_html(
    head: Head,
    figures: Sequence[RenderedFigure],
    skipped: Sequence[SkippedFigure],
    pages: dict[str | None, Path],
    packed: Mapping[str, str] | None = None,
) -> str:
    """index.html.  ``packed``: the page text of figures' specs by figure id (:func:`packed_spec`;
    made here for the figures it lacks)."""
    packed = packed or {}
    page = pages[None]
    ids = [i.model_id for i in head.infos]
    cross = [f for f in figures if f.model_id is None]
    per_model = [f for f in figures if f.model_id is not None]
    section_list = _sections(cross, [s for s in skipped if s.model_id is None], page, packed)
    nav = [(s["name"], f"#section-{s['slug']}") for s in section_list if s["figures"]]
    nav += [("models", "#models"), ("figure index", "#figure-index")]
    keys = list(dict.fromkeys(f.key for f in per_model))
    first = {k: next(f for f in per_model if f.key == k) for k in keys}
    drawn = {(f.key, f.model_id) for f in per_model}
    by_key = {(f.key, f.model_id): f for f in per_model}
    model_rows = []
    for info in head.infos:
        mp = pages.get(info.model_id)
        cells = [
            href(mp, page, "fig-" + by_key[(k, info.model_id)].id)
            if mp and (k, info.model_id) in drawn
            else None
            for k in keys
        ]
        model_rows.append(
            {
                "display": info.display,
                "model_id": info.model_id,
                "family": info.family,
                "href": href(mp, page) if mp else None,
                "cells": cells,
            }
        )
    index_rows: list[dict[str, Any]] = [
        {
            "title": f.title,
            "anchor": f"fig-{f.id}",
            "section": f.section,
            "count": None,
            "sources": f.sources,
        }
        for f in cross
    ]
    index_rows += [
        {
            "title": first[k].title,
            "anchor": None,
            "section": first[k].section,
            "count": sum(1 for f in per_model if f.key == k),
            "sources": first[k].sources,
        }
        for k in keys
    ]
    return (
        _env()
        .get_template("index.html")
        .render(
            title=f"qkwh report: {', '.join(ids[:4])}{' …' if len(ids) > 4 else ''}",
            heading="qkwh report: attention-head Q/K geometry",
            n_models=len(ids),
            shown=", ".join(i.display for i in head.infos[:12]) + (" …" if len(ids) > 12 else ""),
            head=head.fields(),
            nav=nav,
            jump=_jump(head, pages, page),
            any_figure=bool(cross),
            section_list=section_list,
            per_model_titles=[first[k].title for k in keys],
            model_rows=model_rows,
            index_rows=index_rows,
            all_skips=skip_groups(skipped),
            left_out_title=Markup(
                "<strong>Left out</strong> (figures without data are not drawn):"
            ),
            vendor_href=href(pages[None].parent / VENDOR_JS, page),
        )
    )


def model_html(
    head: Head,
    info: ModelInfo,
    figures: Sequence[RenderedFigure],
    skipped: Sequence[SkippedFigure],
    pages: dict[str | None, Path],
    packed: Mapping[str, str] | None = None,
) -> str:
    """A model's page (``packed`` as in :func:`index_html`)."""
    packed = packed or {}
    page = pages[info.model_id]
    index = pages[None]
    mine = [f for f in figures if f.model_id == info.model_id]
    skips = [s for s in skipped if s.model_id == info.model_id]
    order = [i for i in head.infos if i.model_id in pages]
    at = [i.model_id for i in order].index(info.model_id)
    nav = [("all models: cross-model figures", href(index, page))]
    if at > 0:
        nav.append((f"← {order[at - 1].display}", href(pages[order[at - 1].model_id], page)))
    if at + 1 < len(order):
        nav.append((f"{order[at + 1].display} →", href(pages[order[at + 1].model_id], page)))
    return (
        _env()
        .get_template("model.html")
        .render(
            title=f"qkwh report: {info.display}",
            heading=info.display,
            info=info,
            position=at + 1,
            n_pages=len(order),
            head=head.fields(),
            nav=nav,
            jump=_jump(head, pages, page, info.model_id),
            any_figure=bool(mine),
            section_list=_sections(mine, skips, page, packed),
            vendor_href=href(index.parent / VENDOR_JS, page),
        )
    )


class _SpecReader(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.specs: dict[str, str] = {}
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "script" and "vl-spec" in (a.get("class") or "").split():
            self._in = a.get("data-figure") or ""
            self.specs[self._in] = ""

    def handle_data(self, data: str) -> None:
        if self._in is not None:
            self.specs[self._in] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in = None


def read_specs(folder: str | Path) -> dict[str, dict[str, Any]]:
    """Every figure's Vega-Lite spec in a report folder, by figure id, read from the pages (where
    each spec is written once)."""
    folder = Path(folder)
    specs: dict[str, dict[str, Any]] = {}
    for page in [folder / "index.html", *sorted((folder / "models").glob("*.html"))]:
        if page.is_file():
            reader = _SpecReader()
            reader.feed(page.read_text(encoding="utf-8"))
            specs.update({k: unpack_datasets(json.loads(v)) for k, v in reader.specs.items()})
    return specs
