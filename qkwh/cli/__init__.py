"""The ``qkwh`` command line: thin commands over the library (nothing outside this package imports
it).

One module per group of commands (:mod:`~qkwh.cli.catalog`, :mod:`~qkwh.cli.compute`,
:mod:`~qkwh.cli.marts`, :mod:`~qkwh.cli.capture`, :mod:`~qkwh.cli.demo`), what they print in
:mod:`~qkwh.cli.output`, what they share in :mod:`~qkwh.cli.common`.  This module builds the app
and registers the commands in the order ``qkwh --help`` lists them.  Heavy libraries (dbt, altair,
torch, ray, pyarrow) are imported inside the commands, so that ``qkwh --help`` starts fast.
"""

from __future__ import annotations

import re
from typing import Annotated

import typer
from typer.core import TyperCommand

from qkwh.analyses import registry as analysis_registry
from qkwh.cli import ablate, capture, catalog, compute, demo, marts
from qkwh.cli.common import Command, Group, unwrap
from qkwh.cli.deferred import defer
from qkwh.paths import DOCS_DIR

defer()  # rich.markdown and rich.traceback, which typer's help imports and qkwh never uses

__all__ = ["app", "commands_markdown", "main"]

app = typer.Typer(
    help="qkwh: a DuckDB warehouse of sniffed post-RoPE Q/K vectors and the attention-geometry "
    f"metrics computed from them (analyses: {', '.join(analysis_registry.names())}). Tables, metrics "
    f"and the input format are documented in {DOCS_DIR} (docs/ of the repository).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=Group,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        from qkwh import __version__

        typer.echo(f"qkwh {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    pass


def _command(fn, **kwargs) -> None:
    app.command(**kwargs)(fn)


_command(catalog.ingest)
_command(catalog.models)
_command(catalog.findings)
_command(catalog.remove)
_command(catalog.sql)
_command(compute.compute, cls=compute.ComputeCommand)
app.add_typer(compute.runs_app, name="runs")
_command(marts.status)
_command(
    capture.synth,
    cls=capture.SynthCommand,
    short_help="Write a synthetic sniffed dataset with planted geometry.",
)
_command(capture.capture)
_command(ablate.ablate)
_command(marts.build)
_command(marts.docs)
_command(catalog.export)
_command(marts.compare)
_command(marts.report)
_command(demo.demo)


def _finish(typer_app: typer.Typer) -> None:
    """Every command of ``typer_app`` (and its groups) gets its docstring as help with the
    paragraphs unwrapped (the terminal wraps them) and the qkwh command class."""
    for c in typer_app.registered_commands:
        c.help = unwrap(c.help or c.callback.__doc__)
        if c.cls is None or c.cls is TyperCommand:
            c.cls = Command
    for g in typer_app.registered_groups:
        assert g.typer_instance is not None
        info = g.typer_instance.info
        info.help = unwrap(info.help)
        _finish(g.typer_instance)


_finish(app)


def commands_markdown() -> str:
    """The README's command table, generated from this app: one row per command (and per `runs`
    subcommand) with the first sentence of its help.  tests/test_docs.py fails when the README's
    copy drifts; regenerate it with
    ``python -c "from qkwh.cli import commands_markdown; print(commands_markdown())"``."""
    import inspect

    def first_sentence(text: str | None) -> str:
        para = " ".join(inspect.cleandoc(text or "").split("\n\n", 1)[0].split())
        return (
            re.split(r"(?<=[.?])\s", para, maxsplit=1)[0]
            .rstrip(".")
            .replace("\\[", "[")
            .replace("|", "\\|")
        )

    rows = []

    def walk(typer_app, prefix: str) -> None:
        for c in typer_app.registered_commands:
            name = c.name or c.callback.__name__.replace("_", "-")
            rows.append((f"{prefix}{name}", first_sentence(c.help or c.callback.__doc__)))
        for g in typer_app.registered_groups:
            rows.append((f"{prefix}{g.name}", first_sentence(g.typer_instance.info.help)))
            walk(g.typer_instance, f"{prefix}{g.name} ")

    walk(app, "qkwh ")
    lines = ["| command | what it does |", "|---|---|"]
    lines += [f"| `{cmd}` | {text} |" for cmd, text in rows]
    return "\n".join(lines) + "\n"


def main(args: list[str] | None = None) -> None:
    """The console entry point (``qkwh``, ``python -m qkwh``): run the command, then leave
    quickly.

    A command exits through SystemExit (click's standalone mode).  Before the interpreter shuts
    down, every object still alive is moved out of the garbage collector's reach
    (:func:`gc.freeze`): shutdown would otherwise walk the whole heap, which after `qkwh build`
    holds dbt's parsed project (about a second of a corpus build).  Memory goes back to the
    system with the process either way; qkwh closes its warehouse connections itself, and a
    DuckDB commit is durable when it returns.  Meant as a process's last call: a Python program
    that goes on afterwards calls ``app`` (or the library) instead, as frozen objects are never
    collected.
    """
    import gc

    try:
        app(args=args, prog_name="qkwh")
    finally:
        gc.freeze()
