"""What every command shares: the error wrapper, the common options, the warehouse lookup, the
confirmation prompt and the staleness warnings."""

from __future__ import annotations

import functools
import inspect
import re
import sys
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperCommand, TyperGroup

from qkwh.cli.coercion import install
from qkwh.cli.output import PipeClosed, drop_stdout, err, tagged, warn
from qkwh.errors import QkwhError, is_interrupt

YesOpt = Annotated[
    bool,
    typer.Option(
        "--yes", "-y", help="Delete without asking (needed when stdin is not a terminal)."
    ),
]

WarehouseOpt = Annotated[
    Path | None,
    typer.Option(
        "--warehouse",
        "-w",
        help="Warehouse file (default: $QKWH_WAREHOUSE, else ./qkwh.duckdb in the working directory).",
    ),
]

ModelsOpt = Annotated[
    list[str] | None,
    typer.Option("--model", "-m", help="Only these models (repeat or comma-separate)."),
]


def _no_type(ctx) -> None:
    return None


def _flags_without_type(params: list) -> list:
    """``params`` with no ``<bool>`` shown for the flags in --help, and their values converted
    without pydantic where that is certain (:mod:`qkwh.cli.coercion`)."""
    for p in params:
        if getattr(p, "is_flag", False):
            p.display_type_rich = _no_type
    return install(params)


class Command(TyperCommand):
    """A qkwh command: flags show no type in --help; plain values skip pydantic."""

    def get_params(self, ctx):
        return _flags_without_type(super().get_params(ctx))


class Group(TyperGroup):
    """A qkwh command group: flags show no type in --help; plain values skip pydantic."""

    def get_params(self, ctx):
        return _flags_without_type(super().get_params(ctx))


def unwrap(text: str | None) -> str:
    """A docstring as help text: dedented, each paragraph joined into one line (the terminal
    wraps it), bullet lines (``* ...``) kept on their own lines."""
    paragraphs = inspect.cleandoc(text or "").split("\n\n")
    joined = []
    for para in paragraphs:
        lines: list[str] = []
        for line in para.splitlines():
            if lines and not line.startswith("* "):
                lines[-1] += " " + line.strip()
            else:
                lines.append(line.strip())
        joined.append("\n".join(lines))
    return re.sub(r"(?<=[.?!:])  (?=\S)", " ", "\n\n".join(joined))


def friendly(fn):
    """Turn a QkwhError into one line on stderr and its exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (BrokenPipeError, PipeClosed):  # stdout's reader went away (`| head`)
            drop_stdout()
            raise typer.Exit(0) from None
        except QkwhError as exc:
            err.print(tagged("error:", "bold red", exc), highlight=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None
        except (KeyboardInterrupt, RuntimeError) as exc:
            if not is_interrupt(exc):  # DuckDB raises RuntimeError for a Ctrl-C during a statement
                raise
            err.print("interrupted; nothing half-written was kept")
            raise typer.Exit(130) from None

    return wrapper


def existing_warehouse(warehouse: Path | None) -> Path:
    """The resolved warehouse file; NotFoundError (exit 4) when it does not exist, so commands
    that need data never create an empty one."""
    from qkwh import store
    from qkwh.errors import NotFoundError

    wh = store.resolve_warehouse(warehouse)
    if not wh.is_file():
        raise NotFoundError(
            f"no warehouse at {wh}: run `qkwh ingest SOURCE` first, or pass --warehouse "
            "(or set $QKWH_WAREHOUSE)"
        )
    return wh


def interactive() -> bool:
    return sys.stdin.isatty()


def confirm(what: str, yes: bool) -> None:
    """Say what will be deleted, then go on with --yes, ask on a terminal, refuse otherwise
    (exit 2 without --yes when stdin is not a terminal, exit 1 when the answer is no)."""
    from qkwh.errors import InputError

    err.print(what, highlight=False, soft_wrap=True)
    if yes:
        return
    if not interactive():
        raise InputError(
            "not confirmed: pass --yes to delete this (stdin is not a terminal); nothing was deleted"
        )
    if not typer.confirm("delete it?", default=False, err=True):
        raise QkwhError("cancelled; nothing was deleted")


def split(values: list[str] | None) -> list[str] | None:
    """Repeated and comma-separated values as one list (None when there are none)."""
    if not values:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def warn_stale(con, *, query: str | None = None, models: list[str] | None = None) -> None:
    """On stderr: stale marts (when ``query`` reads marts, or always without a query) and
    current parameter sets that cover only part of a model's heads."""
    from qkwh import status

    if query is not None and not status.relations_in(query, status.snapshot_relations(con)):
        return
    message = status.staleness(con, models).message()
    if message:
        warn(message)
    if query is None:
        for s in status.list_sets(con, models):
            if s.is_current and s.partial:
                warn(
                    f"{s.model_id}: the current {s.analysis} set {s.label} covers "
                    f"{s.n_heads} of {s.n_analysable} heads (partial: `qkwh compute` to complete it)"
                )
