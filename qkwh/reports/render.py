"""The one renderer: every figure of the catalogue -> an offline HTML report.

``index.html`` holds the cross-model figures, the model list and the figure index; every model
has its own page (``models/<name>.html``) with its per-model figures (collages, heatmaps, head
profiles), so no page grows with the number of models times the per-model figures.  Every page
loads Vega, Vega-Lite and vega-embed from one file in the report folder (``vega.js``): no
network needed, also from file://.  Each figure's Vega-Lite spec is written once, inline in
its page (:func:`qkwh.reports.page.read_specs` reads them back); PNG and SVG files only when
asked (``formats``, the CLI's ``--static``).

The figures are those the report modules declare (:mod:`qkwh.reports.catalogue`); they read
marts only (the collages' stored axes and vectors come through ``vectors``).  A figure without
data is left out with a note in the report and in ``figures.json``.  A figure's caption is its
catalogue caption plus what its ``build`` adds (e.g. which interval the error bars show) plus
what :meth:`Marts.sample` left out.

The report is written into a new folder beside the output folder and swapped in at the end:
an interrupted or failed render (Ctrl-C, a full disk) leaves the earlier report as it was, and
the next render clears what it left behind.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import secrets
import shutil
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

import duckdb

from qkwh import __version__, store
from qkwh.errors import InputError, NotFoundError, QkwhError
from qkwh.paths import REPORTS_DIR
from qkwh.reports import catalogue as _catalogue
from qkwh.reports.base import (
    POINT_BUDGET,
    Absent,
    Drawn,
    FigureDef,
    Marts,
    NoData,
    file_names,
    ordered_models,
    relations,
)
from qkwh.reports.page import Head, index_html, model_html
from qkwh.reports.result import RenderedFigure, ReportResult, SkippedFigure
from qkwh.reports.specs import pack_datasets, spec_of
from qkwh.reports.static import VENDOR_JS, js_bundle, write_static

__all__ = ["DEFAULT_OUT", "RenderedFigure", "ReportResult", "SkippedFigure", "render"]

log = logging.getLogger("qkwh.reports")

DEFAULT_OUT = REPORTS_DIR / "latest"
FIGURE_DIR = "figures"
MODEL_DIR = "models"  # one page per model: its per-model figures
INDEX = "index.html"
FIGURE_INDEX = "figures.json"  # every report folder has one: what marks it as a report
_NEW, _OLD = ".qkwh-new-", ".qkwh-old-"  # <parent>/.<name>.qkwh-new-<pid>-<hex>: being written


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
    directory); it must have been built with `qkwh build`.  OUT is the report folder (default:
    reports/latest): new, empty or an earlier report, which is replaced as a whole at the end
    (any other folder is refused).  MODELS limits the report to these model ids (default:
    every model).

    Writes OUT/index.html (the cross-model figures, the model list and the figure index),
    OUT/models/<model>.html (one page per model with its per-model figures: collages,
    heatmaps, head profiles), OUT/vega.js (Vega, Vega-Lite and vega-embed, the one script every
    page loads from the folder: no network needed) and OUT/figures.json (the figure index:
    pages, files, source marts, figures left out and why).  Each figure's Vega-Lite spec is
    inline in its page, once.  FORMATS adds static files per figure, OUT/figures/<id>.png
    (``scale``× pixel density) and/or .svg (the CLI's ``--static`` writes both).  Tooltips
    name model, layer and head; clicking a model in a legend picks it.  A figure without data
    (e.g. no checkpoints ingested) is left out with a note.  FIGURES limits the report to some
    figures: keys (``pca-taxonomy``), key prefixes (``train``) or sections (``Plasticity``).
    Collages plot at most ``max_points`` rows per kind per head; a cross-model point cloud at
    most ``point_budget`` marks (split evenly over the models, see :meth:`Marts.sample`).  With
    ``strict`` an error while drawing a figure is raised instead of noted.
    """
    t0 = time.perf_counter()
    bad = [f for f in formats if f not in ("png", "svg")]
    if bad:
        raise QkwhError(f"unknown figure format {', '.join(bad)}: choose png and/or svg")
    out_dir = Path(out).expanduser().resolve() if out else DEFAULT_OUT
    check_out_dir(out_dir)
    catalogue = _catalogue.select(figures)
    con = _open(warehouse)
    try:
        selected = _models(con, models)
        marts = Marts(con, selected, max_points=max_points, point_budget=point_budget)
        names = file_names(selected)
        built, skipped = _build_all(marts, catalogue, names, strict=strict)
        infos = [marts.info(m) for m in selected]
    finally:
        con.close()
    wh = store.resolve_warehouse(warehouse)
    pages = _pages(infos, built, skipped, out_dir, names)
    with _staged(out_dir) as tmp:
        rendered = _write(tmp, out_dir, built, skipped, formats, scale, strict, pages)
        # each spec as its page stores it (datasets by column), from the dicts at hand
        packed = {
            fid: json.dumps(pack_datasets(spec), separators=(",", ":"))
            for _, fid, _, spec, _ in built
        }
        head = Head(infos, wh)
        _put(tmp, out_dir, pages[None], index_html(head, rendered, skipped, pages, packed))
        for info in infos:
            if info.model_id in pages:
                _put(
                    tmp,
                    out_dir,
                    pages[info.model_id],
                    model_html(head, info, rendered, skipped, pages, packed),
                )
        index_json = _index_json(rendered, skipped, selected, wh, out_dir, pages)
        _put(tmp, out_dir, out_dir / FIGURE_INDEX, json.dumps(index_json, indent=2))
        _put(tmp, out_dir, out_dir / VENDOR_JS, js_bundle())
    return ReportResult(
        out_dir,
        pages[None],
        tuple(rendered),
        tuple(skipped),
        tuple(selected),
        time.perf_counter() - t0,
        out_dir / FIGURE_INDEX,
        tuple(p for m, p in pages.items() if m),
    )


def check_out_dir(out_dir: Path) -> bool:
    """True when ``out_dir`` holds an earlier report (to be replaced), False when it is new or
    empty; :class:`InputError` when it is a file or a folder of something else."""
    if not out_dir.exists():
        return False
    if not out_dir.is_dir():
        raise InputError(f"{out_dir} is a file, not a report folder; pass --out DIR")
    if not any(out_dir.iterdir()):
        return False
    if (out_dir / FIGURE_INDEX).is_file():
        return True
    raise InputError(
        f"{out_dir} is not empty and holds no qkwh report ({FIGURE_INDEX} missing); "
        "qkwh does not write there: pass --out with another folder"
    )


# ------------------------------------------------------------------------------------------
# writing: a new folder beside the report, swapped in at the end
# ------------------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _leftovers(out_dir: Path) -> Iterator[tuple[Path, str, int]]:
    """Folders an earlier render left beside ``out_dir``: (path, kind, pid)."""
    for kind in (_NEW, _OLD):
        for p in out_dir.parent.glob(f".{out_dir.name}{kind}*"):
            pid = p.name[len(out_dir.name) + 1 + len(kind) :].split("-")[0]
            if p.is_dir() and pid.isdigit():
                yield p, kind, int(pid)


def _sweep(out_dir: Path) -> None:
    """Clear what an interrupted render left beside ``out_dir`` (its process gone): a half-written
    new folder is removed; an earlier report moved aside is put back when the swap did not end,
    else removed."""
    for path, kind, pid in sorted(_leftovers(out_dir), key=lambda t: t[1] != _OLD):
        if _alive(pid) and pid != os.getpid():
            continue
        if kind == _OLD and not out_dir.exists():
            os.rename(path, out_dir)
        else:
            shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _staged(out_dir: Path) -> Iterator[Path]:
    """A new folder beside ``out_dir`` to write the report into; at the end of the block it
    replaces ``out_dir`` (two renames, the earlier report removed after).  On any error,
    Ctrl-C included, the new folder is removed and ``out_dir`` is left as it was; an
    OSError (a full disk, no permission) becomes one line naming the folder."""
    tmp: Path | None = None
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        _sweep(out_dir)
        tmp = out_dir.parent / f".{out_dir.name}{_NEW}{os.getpid()}-{secrets.token_hex(4)}"
        tmp.mkdir()
        yield tmp
        if out_dir.exists():
            old = out_dir.parent / f".{out_dir.name}{_OLD}{os.getpid()}-{secrets.token_hex(4)}"
            os.rename(out_dir, old)
            os.rename(tmp, out_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out_dir)
        tmp = None
    except OSError as exc:
        what = exc.strerror or str(exc)
        where = f" ({exc.filename})" if exc.filename else ""
        raise QkwhError(
            f"could not write the report into {out_dir}: {what}{where}; the folder was left as "
            "it was (free space or fix it and run `qkwh report` again)"
        ) from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _put(tmp: Path, out_dir: Path, path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (a path in ``out_dir``) inside the new folder ``tmp``."""
    dest = tmp / path.relative_to(out_dir)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text, encoding="utf-8")


def _write(
    tmp: Path,
    out_dir: Path,
    built: Sequence[tuple[FigureDef, str, str | None, dict[str, Any], str]],
    skipped: list[SkippedFigure],
    formats: Sequence[str],
    scale: float,
    strict: bool,
    pages: dict[str | None, Path],
) -> list[RenderedFigure]:
    """The drawn figures (their PNG / SVG files written into ``tmp`` when asked); a figure Vega
    cannot draw is noted in ``skipped``."""
    rendered: list[RenderedFigure] = []
    static = {}
    if formats:
        (tmp / FIGURE_DIR).mkdir()
        with ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1))) as pool:
            static = {
                fid: pool.submit(write_static, tmp / FIGURE_DIR, fid, spec, formats, scale)
                for _, fid, _, spec, _ in built
            }
    for fig, fid, model_id, spec, caption in built:
        png = svg = None
        if fid in static:
            try:
                png, svg = static[fid].result()
            except OSError:
                raise
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
                        key=fig.key,
                    )
                )
                continue
        rendered.append(
            RenderedFigure(
                fid,
                fig.section,
                fig.title,
                caption,
                fig.sources,
                model_id,
                out_dir / FIGURE_DIR / png.name if png else None,
                out_dir / FIGURE_DIR / svg.name if svg else None,
                json.dumps(spec, separators=(",", ":")),
                pages[model_id],
                fig.key,
            )
        )
    return rendered


def _pages(
    infos: Sequence[Any],
    built: Sequence[tuple],
    skipped: Sequence[SkippedFigure],
    out_dir: Path,
    names: dict[str, str],
) -> dict[str | None, Path]:
    """The page of every figure: ``None`` (cross-model) -> index.html, a model -> its own page
    (only models with per-model figures drawn or left out get one)."""
    pages: dict[str | None, Path] = {None: out_dir / INDEX}
    have = {b[2] for b in built} | {s.model_id for s in skipped}
    for info in infos:
        if info.model_id in have:
            pages[info.model_id] = out_dir / MODEL_DIR / f"{names[info.model_id]}.html"
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


def _build_all(
    marts: Marts, catalogue: Sequence[FigureDef], names: dict[str, str], *, strict: bool
) -> tuple[list[tuple[FigureDef, str, str | None, dict[str, Any], str]], list[SkippedFigure]]:
    built: list[tuple[FigureDef, str, str | None, dict[str, Any], str]] = []
    skipped: list[SkippedFigure] = []
    for fig in catalogue:
        targets: Iterable[str | None] = marts.models if fig.per_model else [None]  # type: ignore[list-item]
        for model_id in targets:
            fid = f"{fig.key}-{names[model_id]}" if model_id else fig.key
            marts.notes.clear()
            try:
                chart = fig.build(marts, model_id) if model_id else fig.build(marts)
                caption = fig.caption
                if isinstance(chart, Drawn):
                    caption = f"{caption} {chart.caption}".strip()
                    chart = chart.chart
                caption = " ".join([caption, *marts.notes]).strip()
                spec = spec_of(chart)
            except Absent:  # an opt-in analysis not computed: no figure, no note
                continue
            except NoData as exc:
                skipped.append(
                    SkippedFigure(fid, fig.section, fig.title, str(exc), model_id, key=fig.key)
                )
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
                        key=fig.key,
                    )
                )
                continue
            built.append((fig, fid, model_id, spec, caption))
    return built, skipped


def _rel(path: Path | None, base: Path) -> str | None:
    if path is None:
        return None
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return path.as_posix()


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
        del d["spec"]  # inline in its page, once (qkwh.reports.page.read_specs)
        for k in ("png", "svg", "page"):
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
