"""What a render wrote: the drawn figures, the figures left out, the pages."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class RenderedFigure:
    """One drawn figure: the page showing it (index.html for a cross-model figure, the model's
    page for a per-model one; paths absolute), its Vega-Lite spec (JSON text, written once:
    inline in that page), and its PNG / SVG files when asked for.  ``key`` is the catalogue
    key; ``id`` is the key, plus ``-<model file name>`` for a per-model figure."""

    id: str
    section: str
    title: str
    caption: str
    sources: tuple[str, ...]
    model_id: str | None
    png: Path | None
    svg: Path | None
    spec: str
    page: Path
    key: str = ""


@dataclass(frozen=True)
class SkippedFigure:
    """A figure left out: no data (``failed`` False) or an error while drawing it (True)."""

    id: str
    section: str
    title: str
    reason: str
    model_id: str | None = None
    failed: bool = False
    key: str = ""


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

    def left_out_lines(self) -> list[tuple[str, bool]]:
        """One line per reason a figure was left out, ``(line, failed)``: the figures (and
        models) left out for one reason are named together, so a reason is printed once."""
        groups: dict[tuple[str, bool], list[str]] = {}
        for s in self.skipped:
            groups.setdefault((s.reason, s.failed), []).append(s.id)
        return [(f"  left out {', '.join(ids)}: {why}", bad) for (why, bad), ids in groups.items()]

    def __str__(self) -> str:
        return str(self.index)
