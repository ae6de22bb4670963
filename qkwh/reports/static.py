"""Files beside the pages: each figure's PNG and SVG (``qkwh report --static``), and ``vega.js``
(Vega, Vega-Lite and vega-embed in one script, which every page loads from the report folder)."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import vl_convert as vlc

from qkwh.reports.specs import VL_VERSION

VENDOR_JS = "vega.js"  # Vega, Vega-Lite and vega-embed, loaded by every page from the report folder


def write_static(
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


@functools.lru_cache(maxsize=1)
def js_bundle() -> str:
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
