"""What the CLI prints: the two consoles, tables, csv and json, and text made safe to print.

On a terminal, rich wraps to its width.  To a pipe or a file nothing wraps (``soft_wrap``): a line
meant for scripts (a path, a message) stays one line whatever its length, and tables are laid out
160 columns wide unless ``$COLUMNS`` says otherwise.  Text from the data (labels, dataset names,
metadata) is printed with its control characters escaped (``\\x1b``), so that it can never move the
cursor or recolour the terminal.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

# a pipe gets 160 columns for its tables unless COLUMNS says otherwise (rich alone would assume 80)
_PIPE_WIDTH = None if "COLUMNS" in os.environ else 160


class PipeClosed(Exception):
    """The reader of stdout went away (``qkwh sql ... | head``): the command ends quietly."""


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich would exit 1; the command ends quietly instead (see ``common.friendly``)
        self.quiet = True
        raise PipeClosed


def _console(stream) -> Console:
    tty = stream.isatty()
    # markup is off: messages carry user text and install hints such as pip install 'qkwh[ray]',
    # which rich would read as tags and drop; styled prefixes go through ``tagged``.  Not on a
    # terminal, nothing wraps (soft_wrap): a message or path stays one line for scripts.
    return _Console(
        stderr=stream is sys.stderr,
        width=None if tty else _PIPE_WIDTH,
        soft_wrap=not tty,
        markup=False,
    )


def drop_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it at exit after its reader went away raises
    nothing (Python's documented way out of a broken pipe)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (a test runner's buffer)
        pass


out = _console(sys.stdout)
err = _console(sys.stderr)


class TableFormat(StrEnum):
    """``--format`` of the commands that print query results."""

    table = "table"
    csv = "csv"
    json = "json"


class FileFormat(StrEnum):
    """``--format`` of ``qkwh export``."""

    parquet = "parquet"
    csv = "csv"


# C0 controls but newline and tab, DEL, and C1 controls (ESC [ ... and CSI as one code point)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: object, *, newlines: bool = False) -> str:
    """``text`` with every control character shown escaped (``\\x1b``, ``\\r``); a newline is kept
    when ``newlines`` (a cell of several lines), else escaped as ``\\n``."""
    s = str(text)
    s = _CONTROL.sub(lambda m: repr(m.group())[1:-1], s)
    if not newlines:
        s = s.replace("\n", "\\n")
    return s.replace("\t", "\\t")


def tagged(tag: str, style: str, text: object) -> Text:
    """``tag`` in ``style``, then ``text`` as it is (no markup)."""
    return Text.assemble((tag, style), " ", str(text))


def warn(text: object) -> None:
    """``warning: text`` on stderr, one line."""
    err.print(tagged("warning:", "yellow", text), highlight=False, soft_wrap=True)


def print_rows(title: str, cols: list[str], rows: list[list[str]]) -> None:
    """One row per model as a table when every cell fits the terminal whole; otherwise one block
    per row (its first cell as a heading, then ``column  value`` lines), so that no model id or
    parameter set is ever cut short on a narrow terminal.  Control characters in the cells are
    shown escaped."""
    from rich import box
    from rich.cells import cell_len

    title = printable(title)
    rows = [[printable(v, newlines=True) for v in r] for r in rows]
    table = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), show_edge=False)
    for c in cols:
        table.add_column(c, no_wrap=True)
    for r in rows:
        table.add_row(*r)
    natural = Console(width=10_000, markup=False, color_system=None)
    with natural.capture() as cap:
        natural.print(table)
    if max(map(cell_len, cap.get().splitlines() or [""])) <= out.width:
        out.print(table)
        return
    out.print(title, highlight=False, soft_wrap=True)
    pad = max(cell_len(c) for c in cols[1:]) + 2
    for r in rows:
        out.print(Text(r[0], style="bold"), soft_wrap=True)
        for c, v in zip(cols[1:], r[1:], strict=True):
            value = "; ".join(v.splitlines())
            if 2 + pad + cell_len(value) > out.width and 4 + cell_len(value) <= out.width:
                out.print(f"  {c}\n    {value}", highlight=False, soft_wrap=True)  # fits below
            else:
                out.print(f"  {c:<{pad}}{value}", highlight=False, soft_wrap=True)


def simple_table(cols: list[str], rows: Sequence[Sequence[Any]], **kwargs: Any) -> Table:
    """A rich table of ``rows`` (None as empty, control characters escaped)."""
    table = Table(*cols, **kwargs)
    for r in rows:
        table.add_row(*["" if v is None else printable(v, newlines=True) for v in r])
    return table


def cell(value) -> str:
    """A value as the table format shows it: floats to 6 significant digits (csv and json keep
    every digit), NULL for missing values, lists and structs element by element."""
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(cell(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {cell(v)}" for k, v in value.items()) + "}"
    return printable(value)


def _batches(reader):
    for batch in reader:
        yield from zip(*(col.to_pylist() for col in batch.columns))


def write_csv(columns: list[str], reader) -> None:
    """Every row of an arrow record batch reader as CSV on stdout, at full precision."""
    import csv

    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow(columns)
    for row in _batches(reader):
        w.writerow(row)


def write_json(columns: list[str], reader) -> None:
    """A JSON array of objects; NaN and infinities become null (JSON has no such numbers)."""
    import json
    import math

    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, list):
            return [clean(x) for x in v]
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        return v

    sys.stdout.write("[")
    for i, row in enumerate(_batches(reader)):
        sys.stdout.write(
            ("," if i else "") + "\n" + json.dumps(dict(zip(columns, map(clean, row))), default=str)
        )
    sys.stdout.write("\n]\n")


def print_table(columns: list[str], reader, max_rows: int) -> None:
    """At most ``max_rows`` rows (0: all) and the columns that fit the terminal, then one line
    saying what was left out and how to see it."""
    width = out.width or 160
    max_cols = max(1, width // 12)
    shown_cols = columns[:max_cols]
    rows: list[tuple] = []
    total = 0
    for row in _batches(reader):
        total += 1
        if not max_rows or len(rows) < max_rows:
            rows.append(row[: len(shown_cols)])
    table = Table(*[printable(c) for c in shown_cols])
    for col in table.columns:
        col.overflow = "ellipsis"
        col.no_wrap = True
        col.max_width = 40
    for row in rows:
        table.add_row(*[cell(v) for v in row])
    out.print(table)
    cut = []
    if len(rows) < total:
        cut.append(f"{len(rows):,} of {total:,} rows (--max-rows 0 shows all)")
    if len(shown_cols) < len(columns):
        cut.append(
            f"{len(shown_cols)} of {len(columns)} columns (left out: {', '.join(columns[len(shown_cols) :])})"
        )
    if cut:
        out.print(
            f"showing {' and '.join(cut)}; --format csv or json prints every row and column",
            highlight=False,
        )
    else:
        out.print(f"{total:,} row(s)", highlight=False)


def lazy_progress(*columns, **kwargs):
    """A rich progress display on stderr that appears only once its first task is added, so that
    a command failing before its work starts prints its error as the first line (no empty line
    of a progress display that never started)."""
    from rich.progress import Progress

    class _LazyProgress(Progress):
        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            if self.live.is_started:
                self.stop()

        def add_task(self, *args, **kw):
            if not self.live.is_started:
                self.start()
            return super().add_task(*args, **kw)

    kwargs.setdefault("console", err)
    return _LazyProgress(*columns, **kwargs)


def print_ingest(report) -> None:
    """An ingest report: its summary, then each warning or error finding."""
    out.print(printable(report.summary()), highlight=False)
    for f in report.findings:
        if f.severity != "info":
            out.print(
                printable(f"  [{f.severity}] {f.check}: {f.file or ''} {f.detail}"), highlight=False
            )
