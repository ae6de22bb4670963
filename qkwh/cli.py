"""The ``qkwh`` command line: a thin face over the library (nothing imports this module)."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import threading
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from qkwh.analyses import registry as analysis_registry
from qkwh.errors import QkwhError, is_interrupt
from qkwh.paths import DOCS_DIR

app = typer.Typer(
    help="qkwh: a DuckDB warehouse of sniffed post-RoPE Q/K vectors and the attention-geometry "
    f"metrics computed from them (analyses: {', '.join(analysis_registry.names())}).  Tables, metrics "
    f"and the input format are documented in {DOCS_DIR} (docs/ of the repository).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# markup is off: messages carry user text and install hints such as pip install 'qkwh[ray]', which
# rich would read as tags and drop; styled prefixes go through _tagged
# a pipe gets 160 columns unless COLUMNS says otherwise (rich alone would assume 80)
_PIPE_WIDTH = None if "COLUMNS" in os.environ else 160
out = Console(width=None if sys.stdout.isatty() else _PIPE_WIDTH, markup=False)
err = Console(stderr=True, width=None if sys.stderr.isatty() else _PIPE_WIDTH, markup=False)


def _tagged(tag: str, style: str, text: object) -> Text:
    """``tag`` in ``style``, then ``text`` as it is (no markup)."""
    return Text.assemble((tag, style), " ", str(text))


def _print_rows(title: str, cols: list[str], rows: list[list[str]]) -> None:
    """One row per model as a table when every cell fits the terminal whole; otherwise one block
    per row (its first cell as a heading, then ``column  value`` lines), so that no model id or
    parameter set is ever cut short on a narrow terminal."""
    from rich import box
    from rich.cells import cell_len

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
            out.print(f"  {c:<{pad}}{'; '.join(v.splitlines())}", highlight=False, soft_wrap=True)


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


def _friendly(fn):
    """Turn a QkwhError into one line on stderr and its exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except QkwhError as exc:
            err.print(_tagged("error:", "bold red", exc), highlight=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None
        except (KeyboardInterrupt, RuntimeError) as exc:
            if not is_interrupt(exc):  # DuckDB raises RuntimeError for a Ctrl-C during a statement
                raise
            err.print("interrupted; nothing half-written was kept")
            raise typer.Exit(130) from None

    return wrapper


def _existing_warehouse(warehouse: Path | None) -> Path:
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


def _interactive() -> bool:
    return sys.stdin.isatty()


def _confirm(what: str, yes: bool) -> None:
    """Say what will be deleted, then go on with --yes, ask on a terminal, refuse otherwise
    (exit 2 without --yes when stdin is not a terminal, exit 1 when the answer is no)."""
    from qkwh.errors import InputError

    err.print(what, highlight=False, soft_wrap=True)
    if yes:
        return
    if not _interactive():
        raise InputError(
            "not confirmed: pass --yes to delete this (stdin is not a terminal); nothing was deleted"
        )
    if not typer.confirm("delete it?", default=False, err=True):
        raise QkwhError("cancelled; nothing was deleted")


# ---------------------------------------------------------------------------------------------
# ingest / catalog
# ---------------------------------------------------------------------------------------------


@app.command()
@_friendly
def ingest(
    sources: Annotated[
        list[str],
        typer.Argument(
            help="Sniffed dataset folder(s), or hf://datasets/OWNER/NAME@BRANCH (several branches: list them, or --all-branches)."
        ),
    ],
    model_id: Annotated[
        str | None,
        typer.Option(
            "--model-id",
            help="Model id to register under, needed when the model is not in the registry (configs/models.csv); one source only. Letters, digits, '.', '_', '-'.",
        ),
    ] = None,
    remote: Annotated[
        bool,
        typer.Option(
            "--remote",
            help="Catalog Hub branches in place: read the listing, metadata, parquet footers and integer columns over the network, store hf:// URIs; nothing is downloaded and compute workers stream their own files.",
        ),
    ] = False,
    all_branches: Annotated[
        bool,
        typer.Option(
            "--all-branches",
            help="Ingest every branch of each hf://datasets/OWNER/NAME given (one progress bar; branches whose commit is already cataloged are skipped).",
        ),
    ] = False,
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            "--cache-dir",
            help="Hugging Face cache folder for downloaded Hub sources (default: the HF cache).",
        ),
    ] = None,
    family: Annotated[
        str | None,
        typer.Option(
            "--family",
            help="Model family for reports and family-level marts (wins over configs/models.csv; one source only).",
        ),
    ] = None,
    label: Annotated[
        str | None,
        typer.Option(
            "--label",
            help="Display name of the model in reports and marts (default: the model id; one source only).",
        ),
    ] = None,
    dataset: Annotated[
        str | None,
        typer.Option(
            "--dataset",
            help="Name of the text the capture ran on (default: the capture metadata's source_dataset; kept on re-ingest; one source only). Two captures of one model on different datasets are compared in dataset_comparisons.",
        ),
    ] = None,
    yes: YesOpt = False,
    warehouse: WarehouseOpt = None,
) -> None:
    """Validate sniffed datasets and register them in the warehouse.

    Reads every l{LL}h{HH}{q|k}/data.parquet, checks it (docs/input-format.md), and replaces the model's
    catalog (models, files, heads, ingest_findings, the vectors view) in one transaction.
    Ingesting the same source twice changes nothing.  Re-ingesting a changed source deletes the
    computed results of the heads whose files changed: it says what, and asks (or needs --yes
    when stdin is not a terminal).  With several sources (or --all-branches) each is ingested on
    its own: a failing one is reported and the others go on.
    """
    from qkwh.errors import InputError

    if len(sources) == 1 and not all_branches:
        from qkwh.ingest import ingest as run

        report = run(
            sources[0],
            warehouse=warehouse,
            model_id=model_id,
            cache_dir=cache_dir,
            remote=remote,
            family=family,
            label=label,
            dataset=dataset,
            on_progress=lambda m: err.print(m, style="dim"),
            confirm=lambda what: _confirm(what, yes),
        )
        _print_ingest(report)
        return
    if model_id is not None:
        raise InputError(
            "--model-id names one model: give one source (branches take their ids from the registry)"
        )
    if family is not None or label is not None or dataset is not None:
        raise InputError("--family / --label / --dataset describe one model: give one source")
    _ingest_many(
        sources,
        all_branches=all_branches,
        remote=remote,
        cache_dir=cache_dir,
        warehouse=warehouse,
        confirm=lambda what: _confirm(what, yes),
    )


def _print_ingest(report) -> None:
    out.print(report.summary())
    for f in report.findings:
        if f.severity != "info":
            out.print(f"  [{f.severity}] {f.check}: {f.file or ''} {f.detail}", highlight=False)


def _ingest_many(sources: list[str], **kwargs) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from qkwh.ingest import ingest_many

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    ) as progress:
        state: dict = {}

        def on_done(o) -> None:
            progress.advance(state["task"])
            if o.skipped:
                out.print(
                    f"{o.source}: unchanged (commit already cataloged); skipped", highlight=False
                )
            elif o.report is not None:
                _print_ingest(o.report)
            else:
                err.print(
                    _tagged("failed", "red", f"{o.source}: {o.error}"),
                    highlight=False,
                    soft_wrap=True,
                )

        outcomes = ingest_many(
            sources,
            **kwargs,
            on_start=lambda n: state.setdefault(
                "task", progress.add_task("ingesting branches", total=n)
            ),
            on_source=lambda src: progress.update(state["task"], description=f"ingesting {src}"),
            on_done=on_done,
            on_progress=lambda m: progress.console.print(m, style="dim", highlight=False),
        )
        progress.update(state["task"], description="ingested")
    failed = [o for o in outcomes if o.error is not None]
    skipped = sum(o.skipped for o in outcomes)
    out.print(
        f"{len(outcomes) - len(failed) - skipped} ingested, {skipped} skipped unchanged, {len(failed)} failed"
    )
    if failed:
        codes = {o.error.exit_code for o in failed}  # type: ignore[union-attr]
        error = QkwhError(
            f"{len(failed)} of {len(outcomes)} source(s) failed (listed above); the others were ingested"
        )
        error.exit_code = codes.pop() if len(codes) == 1 else 1
        raise error


@app.command()
@_friendly
def models(warehouse: WarehouseOpt = None) -> None:
    """List the models in the warehouse with their files, heads and computed heads (a table where
    it fits the terminal, else one block per model)."""
    from qkwh import store
    from qkwh.status import models_overview

    con = store.connect(_existing_warehouse(warehouse), read_only=True)
    try:
        cols, rows = models_overview(con)
    finally:
        con.close()
    cells = [
        ["" if v is None else f"{v:,}" if isinstance(v, int) else str(v) for v in r] for r in rows
    ]
    _print_rows(str(store.resolve_warehouse(warehouse)), cols, cells)
    if not rows:
        out.print("no models yet: `qkwh ingest SOURCE`")


@app.command()
@_friendly
def findings(
    model_id: Annotated[str | None, typer.Argument(help="Only this model.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Include info findings.")] = False,
    warehouse: WarehouseOpt = None,
) -> None:
    """Show the data-quality findings stored at ingest (warnings by default)."""
    from qkwh import store
    from qkwh.errors import NotFoundError, unknown_names

    con = store.connect(_existing_warehouse(warehouse), read_only=True)
    try:
        known = [r[0] for r in con.execute("SELECT model_id FROM models ORDER BY 1").fetchall()]
        rows = con.execute(store.load_sql("findings"), [model_id, all_]).fetchall()
    finally:
        con.close()  # closed before any error: a traceback must not keep the file open
    if model_id is not None and model_id not in known:
        raise NotFoundError(unknown_names("model", [model_id], known, " in the warehouse"))
    table = Table("model_id", "severity", "check", "file", "detail")
    for r in rows:
        table.add_row(*[str(v) if v is not None else "" for v in r])
    out.print(table)


@app.command()
@_friendly
def remove(
    model_id: Annotated[str, typer.Argument(help="The model to remove.")],
    yes: YesOpt = False,
    warehouse: WarehouseOpt = None,
) -> None:
    """Remove a model and everything derived from it, in one transaction.

    Says what it will delete (rows per table, computed heads) and asks; when stdin is not a
    terminal it needs --yes, and without it exits 2 having deleted nothing.
    """
    from qkwh.ingest import remove as run

    def confirm(plan) -> None:
        lines = [plan.summary() + ":"] + [f"  {t}: {n:,}" for t, n in plan.rows.items()]
        _confirm("\n".join(lines), yes)

    counts = run(model_id, warehouse=_existing_warehouse(warehouse), confirm=confirm)
    n = sum(counts.values())
    out.print(f"removed {model_id}: {n:,} rows from {sum(1 for v in counts.values() if v)} tables")


@app.command()
@_friendly
def sql(
    query: Annotated[
        str,
        typer.Argument(
            help="One SQL query: SELECT, WITH, FROM, VALUES, DESCRIBE, SHOW or SUMMARIZE (the warehouse is opened read-only; nothing is written)."
        ),
    ],
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="table (for reading), csv or json (every row and column, for other tools).",
        ),
    ] = "table",
    max_rows: Annotated[
        int,
        typer.Option(
            "--max-rows",
            "-n",
            help="With --format table: rows shown (0 = all). csv and json always hold every row.",
        ),
    ] = 40,
    warehouse: WarehouseOpt = None,
) -> None:
    """Run one read-only SQL query against the warehouse and print the result.

    Exactly one query statement runs; it may read local files but never writes one (COPY,
    EXPORT, ATTACH, INSTALL, SET and every other kind of statement are refused, exit 2; see
    docs/guarantees.md).  The table shows floats to 6 significant digits and says how many rows
    and columns it leaves out and how to see them all; csv and json print the whole result at
    full precision.  A SQL error is shown whole, with DuckDB's hints (did you mean, candidate
    bindings).
    """
    from qkwh import store
    from qkwh.errors import InputError, MissingFilesError
    from qkwh.readonly import check_query, error_text, lock_down

    if fmt not in ("table", "csv", "json"):
        raise InputError(f"--format must be table, csv or json, not {fmt!r}")
    if max_rows < 0:
        raise InputError(f"--max-rows must be 0 (all) or a positive number, not {max_rows}")
    check_query(query)
    con = store.connect(_existing_warehouse(warehouse), read_only=True)
    try:
        lock_down(con)
        rel = con.sql(query)
        columns = list(rel.columns)
        reader = rel.to_arrow_reader(10_000)
        if fmt == "csv":
            _write_csv(columns, reader)
        elif fmt == "json":
            _write_json(columns, reader)
        else:
            _print_table(columns, reader, max_rows)
        _warn_stale(con, query=query)
    except Exception as exc:  # duckdb errors
        if isinstance(exc, QkwhError):
            raise
        line = str(exc).splitlines()[0]
        if "the vectors of model" in line:  # a model's files are missing (the vectors views)
            raise MissingFilesError(line.split(": ", 1)[-1]) from None
        raise QkwhError(error_text(exc)) from None
    finally:
        con.close()


def _cell(value) -> str:
    """A value as the table format shows it: floats to 6 significant digits (csv and json keep
    every digit), NULL for missing values, lists and structs element by element."""
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_cell(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_cell(v)}" for k, v in value.items()) + "}"
    return str(value)


def _batches(reader):
    for batch in reader:
        yield from zip(*(col.to_pylist() for col in batch.columns))


def _write_csv(columns: list[str], reader) -> None:
    import csv

    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow(columns)
    for row in _batches(reader):
        w.writerow(row)


def _write_json(columns: list[str], reader) -> None:
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


def _print_table(columns: list[str], reader, max_rows: int) -> None:
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
    table = Table(*shown_cols)
    for col in table.columns:
        col.overflow = "ellipsis"
        col.no_wrap = True
        col.max_width = 40
    for row in rows:
        table.add_row(*[_cell(v) for v in row])
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


def _warn_stale(con, *, query: str | None = None, models: list[str] | None = None) -> None:
    """On stderr: stale marts (when ``query`` reads marts, or always without a query) and
    current parameter sets that cover only part of a model's heads."""
    from qkwh import status

    if query is not None and not status.relations_in(query, status.snapshot_relations(con)):
        return
    message = status.staleness(con, models).message()
    if message:
        err.print(_tagged("warning:", "yellow", message), highlight=False, soft_wrap=True)
    if query is None:
        for s in status.list_sets(con, models):
            if s.is_current and s.partial:
                err.print(
                    _tagged(
                        "warning:",
                        "yellow",
                        f"{s.model_id}: the current {s.analysis} set {s.label} covers "
                        f"{s.n_heads} of {s.n_analysable} heads (partial: `qkwh compute` to complete it)",
                    ),
                    highlight=False,
                    soft_wrap=True,
                )


# ---------------------------------------------------------------------------------------------
# compute
# ---------------------------------------------------------------------------------------------


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


class _ComputeCommand(typer.core.TyperCommand):
    """``compute`` with ``--documents`` usable without its value (``--documents [G]``): G is
    then the declared default of ``uncertainty.document_groups``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        args = list(args)
        for i, arg in enumerate(args):
            if arg == "--":
                break
            if arg == "--documents" and (i + 1 == len(args) or args[i + 1].startswith("-")):
                default = analysis_registry.get("uncertainty").default_params().document_groups
                args.insert(i + 1, str(default))
        return super().parse_args(ctx, args)


@app.command(cls=_ComputeCommand)
@_friendly
def compute(
    model: Annotated[
        list[str] | None,
        typer.Option(
            "--model", "-m", help="Model id(s) to compute (repeat or comma-separate; default: all)."
        ),
    ] = None,
    analyses: Annotated[
        str | None,
        typer.Option(
            "--analyses",
            "-a",
            help=f"Comma-separated subset of the registered analyses ({','.join(analysis_registry.names())}; "
            f"default: {','.join(analysis_registry.default_names())}).",
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            "-j",
            help="Worker processes of the local pool (default: CPU count; 1 = in-process). A Ray cluster uses all its CPUs.",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="Run config YAML overriding the shipped defaults (configs/run.yaml; see docs/README.md).",
        ),
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option(
            "--param",
            "-p",
            help="Override a parameter, e.g. -p plasticity.cov_mode=diag (repeatable).",
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Recompute heads even when inputs and parameters are unchanged."
        ),
    ] = False,
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            "-n",
            help="Name this parameter set (recorded in run_config; see `qkwh runs`). With a name already held and no --config/--param, compute more heads of that set with its parameters.",
        ),
    ] = None,
    keep_current: Annotated[
        bool,
        typer.Option(
            "--keep-current",
            help="Do not make this set the one the marts report (a model without a current set still gets it); `qkwh runs use` switches later.",
        ),
    ] = False,
    executor: Annotated[
        str | None,
        typer.Option(
            "--executor",
            "-e",
            help="Where the heads are computed: pool (local worker processes) or ray (a Ray cluster; pip install 'qkwh\\[ray]'). Default: the run config's executor, else pool.",
        ),
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address",
            help="With --executor ray: auto (this machine's cluster), ray://HOST:PORT or HOST:PORT. Default: the run config's ray_address, else $RAY_ADDRESS, else a private local Ray.",
        ),
    ] = None,
    documents: Annotated[
        int | None,
        typer.Option(
            "--documents",
            metavar="[G]",
            help="Also run the document-group jackknife (the opt-in analysis uncertainty, docs/metrics/jackknife.md) with G document groups (default 10): --analyses ...,uncertainty -p uncertainty.document_groups=G. About G times the cost of the other analyses; add -p plasticity.pairs=exhaustive for plasticity's SE (sampled pairs add their noise to it).",
        ),
    ] = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Run the per-head analyses (docs/metrics/) for every head with a q and a k file.

    Finished heads are written in batches, one transaction each (never part of a head), and the
    warehouse is open only while a batch is written, so `qkwh sql`, `qkwh report` and
    `duckdb -readonly` work during a long compute.  Heads whose inputs and parameters are
    unchanged are skipped, so an interrupted run resumes.  Every parameter is recorded in
    run_config; each parameter set keeps its own rows and the set computed becomes the one the
    marts report (unless --keep-current).  The executor never changes the results.  A model
    whose key files are missing (its folder moved) is left out with an error naming the fix
    (exit 4) and the others are computed; --force says how many computed heads it replaces.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from qkwh import store
    from qkwh.compute.runner import compute as run
    from qkwh.config import load_execution, load_run_config

    execution = load_execution(config)
    kind = executor or execution["executor"] or "pool"
    if kind not in ("pool", "ray"):
        from qkwh.errors import InputError

        raise InputError(f"--executor must be pool or ray, not {kind!r}")
    if name is not None:
        from qkwh.runs import check_name

        check_name(name)
    if documents is not None:  # --documents [G]: the jackknife, with G groups
        param = [*(param or []), f"uncertainty.document_groups={documents}"]
    wh = _existing_warehouse(warehouse)
    cfg, covered = (
        _named_config(name, wh)
        if name is not None and config is None and not param
        else (None, None)
    )
    cfg = cfg or load_run_config(config, param)
    names = (
        tuple(_split([analyses]) or []) if analyses is not None else covered
    )  # a named set: its analyses
    if documents is not None:
        base = names if names is not None else analysis_registry.default_names()
        names = tuple(dict.fromkeys((*base, "uncertainty")))
    scope, gone = _models_with_files(wh, _split(model))
    if force:
        _say_force(wh, scope, names, cfg)
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    ) as progress:
        state: dict = {}

        def on_start(n: int) -> None:
            state["task"] = progress.add_task("computing heads", total=n, rate="")

        def on_head(label: str) -> None:
            t = state["task"]
            progress.advance(t)
            task = progress.tasks[t]
            if task.elapsed:
                progress.update(t, rate=f"{task.completed / task.elapsed:.1f} heads/s")

        report = run(
            wh,
            models=scope,
            analyses=names,
            config=cfg,
            workers=workers,
            executor=kind,
            ray_address=ray_address or execution["ray_address"],
            force=force,
            name=name,
            make_current=not keep_current,
            on_start=on_start,
            on_head=on_head,
        )
    label = f"set {name}: " if name else ""
    out.print(
        f"computed {report.n_written} head(s), skipped {report.n_skipped} unchanged "
        f"({label}{', '.join(f'{a}={c}' for a, c in report.config_ids.items())}; code {report.code_version})"
    )
    for _, why in report.excluded:
        err.print(_tagged("warning:", "yellow", why), highlight=False, soft_wrap=True)
    for _, _, why in report.left_out:
        err.print(_tagged("warning:", "yellow", why), highlight=False, soft_wrap=True)
    for why in report.notes:
        err.print(_tagged("warning:", "yellow", why), highlight=False, soft_wrap=True)
    if report.failures:
        for label, error in report.failures[:10]:
            err.print(_tagged("failed", "red", f"{label}: {error}"), highlight=False)
        con = store.connect(wh, read_only=True)
        try:
            missing = store.missing_vector_files(con, scope)
        finally:
            con.close()
        for model_id, what in sorted(missing.items()):
            err.print(store.missing_files_message(model_id, *what), highlight=False, soft_wrap=True)
    if gone:
        raise gone
    if report.failures:
        raise QkwhError(f"{len(report.failures)} head(s) failed; the others were written")


def _models_with_files(wh: Path, models: list[str] | None):
    """(models to compute, MissingFilesError or None).  A model with a missing key file (its
    folder moved or deleted, say) is left out: a key file is shared by several heads, and the
    others go on; the error names it and the fix.  A missing query file fails its head only."""
    from qkwh import store
    from qkwh.errors import MissingFilesError

    con = store.connect(wh, read_only=True)
    try:
        missing_k = store.missing_vector_files(con, models, kind="k")
        if not missing_k:
            return models, None
        missing = store.missing_vector_files(con, sorted(missing_k))
        known = [m for (m,) in con.execute("SELECT model_id FROM models ORDER BY 1").fetchall()]
    finally:
        con.close()
    for model_id in sorted(missing):
        err.print(
            store.missing_files_message(model_id, *missing[model_id]),
            highlight=False,
            soft_wrap=True,
        )
    names = sorted(missing)
    error = MissingFilesError(
        f"{len(names)} model(s) left out because their files are missing: {', '.join(names)} (fix listed above)"
        if len(names) > 1
        else store.missing_files_message(names[0], *missing[names[0]])
    )
    scope = [m for m in (models or known) if m not in missing]
    if not scope:
        raise error
    return scope, error


def _say_force(wh: Path, models: list[str] | None, analyses: tuple[str, ...] | None, cfg) -> None:
    """--force recomputes heads already computed with these parameters (this parameter set; other
    sets are never touched): say how many it replaces (the same inputs and parameters give the
    same numbers, so it does not ask)."""
    from qkwh import store
    from qkwh.analyses import registry
    from qkwh.compute.units import code_version

    config_ids = [
        cfg.fingerprint(a, code_version(a)) for a in (analyses or registry.default_names())
    ]
    con = store.connect(wh, read_only=True)
    try:
        n = con.execute(
            "SELECT count(*) FROM (SELECT DISTINCT model_id, layer, q_head FROM head_runs "  # type: ignore[index]
            "WHERE ($1 IS NULL OR list_contains($1, model_id)) AND list_contains($2, config_id))",
            [models or None, config_ids],
        ).fetchone()[0]
    finally:
        con.close()
    if n:
        which = f" ({', '.join(analyses)})" if analyses else ""
        err.print(
            f"--force: the stored results of {n} computed head(s){which} are recomputed "
            "and replaced as each head is written",
            highlight=False,
        )


def _named_config(name: str, warehouse):
    """(the parameters of the set called ``name``, the analyses it covers) when the warehouse
    holds it, else (None, None).  A set may cover only some analyses (`compute --name N -a X`):
    computing more of it computes those."""
    from qkwh import store
    from qkwh.analyses import registry
    from qkwh.runs import config_of, resolve

    wh = store.resolve_warehouse(warehouse)
    if not wh.exists():
        return None, None
    con = store.connect(wh, read_only=True)
    try:
        if not con.execute("SELECT 1 FROM run_config WHERE name = ?", [name]).fetchone():
            return None, None
        covered = resolve(con, name)
        return config_of(con, name), tuple(a for a in registry.names() if a in covered)
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------
# parameter sets and status
# ---------------------------------------------------------------------------------------------

runs_app = typer.Typer(
    help="Parameter sets of the per-head results: list them (default), make one current, compare "
    "two, drop one.  A set is named by `qkwh compute --name`, or referred to by its config_id (or a "
    "unique prefix of it).",
    no_args_is_help=False,
    add_completion=False,
)
app.add_typer(runs_app, name="runs")
ModelsOpt = Annotated[
    list[str] | None,
    typer.Option("--model", "-m", help="Only these models (repeat or comma-separate)."),
]


def _param_summary(s) -> str:
    """The parameters of a set that differ from the defaults, e.g. `seed=1 plasticity.cov_mode=diag`."""
    from qkwh.params import RunConfig
    from qkwh.runs import _flatten

    default = _flatten(RunConfig().analysis_params(s.analysis))
    mine = _flatten(s.params)
    changed = [f"{k}={v}" for k, v in sorted(mine.items()) if default.get(k) != v]
    return " ".join(changed) or "defaults"


@runs_app.callback(invoke_without_command=True)
@_friendly
def runs(ctx: typer.Context, model: ModelsOpt = None, warehouse: WarehouseOpt = None) -> None:
    """List the parameter sets per model and analysis (same as `qkwh runs list`)."""
    if ctx.invoked_subcommand is None:
        _runs_list(model, warehouse)


@runs_app.command("list")
@_friendly
def runs_list(model: ModelsOpt = None, warehouse: WarehouseOpt = None) -> None:
    """List the parameter sets per model and analysis: name, config_id, parameters that differ
    from the defaults, heads covered of the analysable heads, created, and which is current."""
    _runs_list(model, warehouse)


def _runs_list(model, warehouse) -> None:
    from qkwh import store
    from qkwh.runs import list_sets

    con = store.connect(_existing_warehouse(warehouse), read_only=True)
    try:
        sets = list_sets(con, _split(model))
    finally:
        con.close()
    table = Table(
        "model_id",
        "analysis",
        "current",
        "name",
        "config_id",
        "heads",
        "parameters (non-default)",
        "created (UTC)",
        title="parameter sets (current = what the marts report)",
    )
    for s in sets:
        heads = f"{s.n_heads}/{s.n_analysable}" + (" partial" if s.partial else "")
        table.add_row(
            s.model_id,
            s.analysis,
            "*" if s.is_current else "",
            s.name or "",
            s.config_id,
            heads,
            _param_summary(s),
            f"{s.created_at:%Y-%m-%d %H:%M}" if s.created_at else "",
        )
    out.print(table)
    if not sets:
        out.print("no computed results yet: `qkwh compute`")


@runs_app.command("use")
@_friendly
def runs_use(
    ref: Annotated[
        str, typer.Argument(help="The set: its name, config_id or a unique config_id prefix.")
    ],
    model: ModelsOpt = None,
    analysis: Annotated[
        list[str] | None,
        typer.Option(
            "--analysis", "-a", help="Only these analyses (default: every analysis of the set)."
        ),
    ] = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Make a set the one the marts report, for every model holding it (or --model).  Then run
    `qkwh build` to rebuild the marts from it."""
    from qkwh import store
    from qkwh.runs import use

    done = use(warehouse, ref, _split(model), _split(analysis))
    con = store.connect(warehouse, read_only=True)
    try:
        names = dict(
            con.execute("SELECT config_id, name FROM run_config WHERE name IS NOT NULL").fetchall()
        )
    finally:
        con.close()
    for m, a, c in done:
        out.print(f"{m} {a}: current set is now {names.get(c, c)}", highlight=False)
    out.print("run `qkwh build` to rebuild the marts from it")


@runs_app.command("drop")
@_friendly
def runs_drop(
    ref: Annotated[
        str, typer.Argument(help="The set: its name, config_id or a unique config_id prefix.")
    ],
    model: ModelsOpt = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Do not ask (needed when not interactive).")
    ] = False,
    warehouse: WarehouseOpt = None,
) -> None:
    """Delete a set's per-head rows (and head_runs), in one transaction.  The current set of a
    model is refused: make another set current first (`qkwh runs use`)."""
    from qkwh import store
    from qkwh.errors import InputError
    from qkwh.runs import drop, drop_plan

    models = _split(model)
    con = store.connect(_existing_warehouse(warehouse), read_only=True)
    try:
        counts = drop_plan(con, ref, models)
    finally:
        con.close()
    total = sum(counts.values())
    what = ", ".join(f"{n:,} from {t}" for t, n in counts.items() if n)
    out.print(
        f"dropping set {ref}{' in ' + ', '.join(models) if models else ''}: {total:,} rows ({what or 'none'})",
        highlight=False,
    )
    if not yes:
        if not sys.stdin.isatty():
            raise InputError(
                "dropping a parameter set deletes rows: pass --yes to confirm (not interactive)"
            )
        if not typer.confirm("delete them?", default=False):
            raise typer.Exit(1)
    counts = drop(warehouse, ref, models)
    out.print(f"dropped {sum(counts.values()):,} rows")


@runs_app.command("diff")
@_friendly
def runs_diff(
    ref_a: Annotated[str, typer.Argument(help="First set (name or config_id).")],
    ref_b: Annotated[str, typer.Argument(help="Second set (name or config_id).")],
    warehouse: WarehouseOpt = None,
) -> None:
    """Compare two sets: per analysis, the parameters and code version in which they differ."""
    from qkwh import store
    from qkwh.params import RunConfig
    from qkwh.runs import _flatten, diff

    con = store.connect(_existing_warehouse(warehouse), read_only=True)
    try:
        rows = diff(con, ref_a, ref_b)
    finally:
        con.close()
    table = Table("analysis", "parameter", f"A = {ref_a}", f"B = {ref_b}")
    for d in rows:
        if d.config_a is None or d.config_b is None:  # an analysis only one of the sets covers
            only = "A" if d.config_b is None else "B"
            default = _flatten(RunConfig().analysis_params(d.analysis))
            values = (
                " ".join(f"{k}={v}" for k, v in d.only_params.items() if default.get(k) != v)
                or "defaults"
            )
            table.add_row(
                d.analysis,
                f"(only in {only})",
                values if only == "A" else "not computed",
                values if only == "B" else "not computed",
            )
            continue
        if d.code_a != d.code_b:
            table.add_row(d.analysis, "code_version", str(d.code_a), str(d.code_b))
        for k, va, vb in d.params:
            table.add_row(d.analysis, k, str(va), str(vb))
        if not d.params and d.code_a == d.code_b:
            table.add_row(d.analysis, "(same parameters)", "same", "same")
    out.print(table)


@app.command()
@_friendly
def status(
    model: ModelsOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Per model: what is ingested, computed (per parameter set: heads covered of the analysable
    heads) and built (marts up to date, stale or not built); a table where it fits the terminal,
    else one block per model."""
    from qkwh import status as st
    from qkwh import store

    con = store.connect(_existing_warehouse(warehouse), read_only=True)
    try:
        con.execute(
            "SET python_enable_replacements = false"
        )  # a table name never finds a Python variable
        models, staleness = st.status(con)
        wanted = _split(model)
        models = [m for m in models if not wanted or m.model_id in wanted]
        columns, rows = st.status_table(models)
        _print_rows(str(store.resolve_warehouse(warehouse)), columns, rows)
        if not models:
            out.print("no models yet: `qkwh ingest SOURCE`")
        if staleness.built_at:
            out.print(
                f"marts last built {staleness.built_at:%Y-%m-%d %H:%M:%S} UTC", highlight=False
            )
        _warn_stale(con, models=wanted)
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------
# synthetic data
# ---------------------------------------------------------------------------------------------


def _synth_help() -> str:
    from qkwh.synth import SYNTH_KNOBS, knob_defaults

    knobs = "\n".join(f"* {k} = {v:g}: {SYNTH_KNOBS[k]}" for k, v in knob_defaults().items())
    return (
        "Write a synthetic sniffed dataset with planted geometry.\n\n"
        "Planted: drift slopes, class means, Q/K separation, RoPE-like planes, Gaussian noise, GQA, "
        "uniform buckets.  Register it with `qkwh ingest OUT --model-id ID`.\n\n"
        f"Knobs of the planted geometry (--set NAME=VALUE; the default after =; docs/synth.md):\n\n{knobs}"
    )


@app.command(help=_synth_help())
@_friendly
def synth(
    out_dir: Annotated[Path, typer.Argument(help="Folder to write (sniffer layout).")],
    layers: Annotated[int, typer.Option(help="Layers.")] = 4,
    q_heads: Annotated[int, typer.Option(help="Query heads per layer.")] = 8,
    kv_heads: Annotated[int, typer.Option(help="Key/value heads per layer (GQA).")] = 2,
    head_dim: Annotated[int, typer.Option(help="Head dimension d.")] = 64,
    rows: Annotated[int, typer.Option(help="Rows per q and k file.")] = 2000,
    examples: Annotated[int, typer.Option(help="Source examples (documents).")] = 16,
    context_length: Annotated[int, typer.Option(help="Context length in tokens.")] = 8192,
    bucket_size: Annotated[int, typer.Option(help="Uniform bucket size in tokens.")] = 512,
    seed: Annotated[int, typer.Option(help="Seed: the same seed writes the same bytes.")] = 0,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Set a knob of the planted geometry, e.g. --set alpha_k=2e-3 (repeatable; the knobs are listed above).",
        ),
    ] = None,
) -> None:
    from qkwh.errors import InputError, did_you_mean
    from qkwh.synth import SYNTH_KNOBS, write_dataset

    planted: dict[str, Any] = {}
    for item in set_ or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"--set {item!r}: expected key=value")
        if key.strip() not in SYNTH_KNOBS:
            raise InputError(
                f"--set: unknown knob {key.strip()!r}{did_you_mean(key.strip(), SYNTH_KNOBS)}; "
                f"the knobs are {', '.join(SYNTH_KNOBS)} (`qkwh synth --help`)"
            )
        try:
            planted[key.strip()] = float(value)
        except ValueError:
            raise InputError(f"--set {item!r}: {value!r} is not a number") from None
    try:
        root = write_dataset(
            out_dir,
            n_layers=layers,
            n_q_heads=q_heads,
            n_kv_heads=kv_heads,
            d=head_dim,
            rows_per_file=rows,
            n_examples=examples,
            context_length=context_length,
            bucket_size=bucket_size,
            seed=seed,
            **planted,
        )
    except (TypeError, ValueError) as exc:
        raise InputError(f"synth: {exc}") from None
    out.print(f"wrote {root}")


# ---------------------------------------------------------------------------------------------
# capture (optional extra)
# ---------------------------------------------------------------------------------------------


@app.command()
@_friendly
def capture(
    model: Annotated[
        str,
        typer.Argument(
            help="A Hugging Face model folder, a Hub id OWNER/NAME (taken from the local cache when it is there), or a .gguf file."
        ),
    ],
    texts: Annotated[
        list[str],
        typer.Option(
            "--texts",
            "-t",
            help="Documents, one per example: text files or folders of them, one JSONL or parquet file, or hf://datasets/OWNER/NAME\\[@REVISION] (repeatable).",
        ),
    ],
    out_dir: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Folder to write (sniffer layout); re-running the same command resumes an interrupted capture.",
        ),
    ],
    max_length: Annotated[
        int | None,
        typer.Option(
            "--max-length",
            help="Tokens per document after truncation (default: the model's max_position_embeddings).",
        ),
    ] = None,
    bucket_size: Annotated[
        int | None,
        typer.Option(
            "--bucket-size",
            help="Bucket size in tokens (default: max length / 16); must divide --max-length for uniform/all.",
        ),
    ] = None,
    sampler: Annotated[
        str, typer.Option("--sampler", help="uniform, log_uniform or all.")
    ] = "uniform",
    base_rate: Annotated[
        float,
        typer.Option(
            "--base-rate",
            help="Expected kept positions per bucket per document (uniform/log_uniform).",
        ),
    ] = 1.0,
    heads: Annotated[
        int, typer.Option("--heads", help="Query heads to sample (all if the model has fewer).")
    ] = 300,
    head_seed: Annotated[int, typer.Option("--head-seed", help="Seed of the head sample.")] = 0,
    examples: Annotated[
        int | None,
        typer.Option("--examples", "-n", help="At most this many documents (default: all)."),
    ] = None,
    dtype: Annotated[
        str, typer.Option("--dtype", help="float32 or bfloat16 weights and activations.")
    ] = "float32",
    include_sliding: Annotated[
        bool,
        typer.Option(
            "--include-sliding",
            help="Also sample heads of sliding-window layers (their files record the window); default: full-attention layers only.",
        ),
    ] = False,
    split: Annotated[
        str, typer.Option("--split", help="Split of a hf://datasets/ source.")
    ] = "train",
    subset: Annotated[
        str | None,
        typer.Option("--subset", help="Configuration (subset) of a hf://datasets/ source."),
    ] = None,
    text_column: Annotated[
        str, typer.Option("--text-column", help="Text field of a JSONL, parquet or Hub source.")
    ] = "text",
    id_column: Annotated[
        str | None,
        typer.Option(
            "--id-column",
            help="Id field of a JSONL, parquet or Hub source (default: 'id' if present, else the row number).",
        ),
    ] = None,
    ingest_: Annotated[
        bool,
        typer.Option("--ingest", help="Register the capture in the warehouse when it is done."),
    ] = False,
    model_id: Annotated[
        str | None,
        typer.Option(
            "--model-id", help="With --ingest: the model id (default: the --out folder's name)."
        ),
    ] = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Capture post-RoPE Q/K vectors of a local model into the sniffer layout.

    Needs the optional extra: pip install 'qkwh\\[capture]'.  One document per example, batch 1,
    truncated to --max-length; the sampled positions, heads and files follow the public capture
    protocol, so the result is comparable with published captures.  Then `qkwh ingest OUT`
    (or pass --ingest).
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from qkwh.capture.run import CaptureSettings
    from qkwh.capture.run import capture as run
    from qkwh.errors import InputError

    if model_id is not None and not ingest_:
        raise InputError("--model-id only applies with --ingest")
    settings = CaptureSettings(
        model=model,
        texts=tuple(texts),
        max_length=max_length,
        bucket_size=bucket_size,
        sampler=sampler,
        base_rate=base_rate,
        heads=heads,
        head_seed=head_seed,
        examples=examples,
        dtype=dtype,
        include_sliding=include_sliding,
        split=split,
        text_column=text_column,
        id_column=id_column,
        subset=subset,
    )
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=err,
    ) as progress:
        state: dict = {"tokens": 0}

        def on_start(total: int, done: int) -> None:
            state["task"] = progress.add_task("capturing examples", total=total, rate="")

        def on_example(tokens: int) -> None:
            t = state["task"]
            state["tokens"] += tokens
            progress.advance(t)
            elapsed = progress.tasks[t].elapsed
            if elapsed:
                progress.update(t, rate=f"{state['tokens'] / elapsed:,.0f} tokens/s")

        report = run(
            settings,
            out_dir,
            on_start=on_start,
            on_example=on_example,
            on_message=lambda m: err.print(m, style="dim", highlight=False),
        )
    out.print(report.summary(), highlight=False)
    if ingest_:
        from qkwh.ingest import ingest as run_ingest

        rep = run_ingest(
            str(report.out),
            warehouse=warehouse,
            model_id=model_id or report.out.resolve().name,
            on_progress=lambda m: err.print(m, style="dim"),
        )
        out.print(rep.summary())
        for f in rep.findings:
            if f.severity != "info":
                out.print(f"  [{f.severity}] {f.check}: {f.file or ''} {f.detail}", highlight=False)


from qkwh.cli_ablate import ablate as _ablate  # noqa: E402

app.command(name="ablate")(_friendly(_ablate))


# ---------------------------------------------------------------------------------------------
# build, docs, export, report, demo
# ---------------------------------------------------------------------------------------------


@app.command()
@_friendly
def build(
    select: Annotated[
        str | None, typer.Option("--select", "-s", help="dbt node selection (default: everything).")
    ] = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Run `dbt build` on the warehouse (marts and all their tests).

    Seeds, staging, intermediate and mart models, every dbt test and unit test.  Shows progress,
    the nodes that fail or warn, and a summary; dbt's full log is kept in the warehouse's dbt
    folder (<warehouse name>.dbt/logs/dbt.log, path printed).  Reports clearly when another
    process holds the warehouse.  Ctrl-C stops it with one line and exit code 130.
    """
    from qkwh.build import build as run

    wh = _existing_warehouse(warehouse)
    with _dbt_progress(wh) as sink:
        result = run(wh, select=select, log_sink=sink)
    out.print(result.summary, highlight=False)
    out.print(f"full log: {result.log_path / 'dbt.log'}", highlight=False)


_DBT_NODE = re.compile(r"^\s*(\d+) of (\d+) (START|OK|PASS|ERROR|FAIL|WARN|SKIP)\b")


@contextlib.contextmanager
def _dbt_progress(wh: Path):
    """A log sink for a dbt run: one line when the nodes start (how many, where the full log is),
    a progress bar on a terminal, and the lines of nodes that fail, warn or are skipped; dbt's
    other lines stay in its log file."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from qkwh.build import dbt_work_dir

    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )
    state: dict = {}
    lock = threading.Lock()  # dbt reports from its worker threads

    def sink(line: str) -> None:
        m = _DBT_NODE.match(line)
        if m is None:
            return
        with lock:
            _on_node(line, int(m.group(2)), m.group(3))

    def _on_node(line: str, total: int, what: str) -> None:
        if "task" not in state:
            err.print(
                f"dbt: building {total} nodes (full log: {dbt_work_dir(wh) / 'logs' / 'dbt.log'})",
                highlight=False,
                soft_wrap=True,
            )
            state["task"] = progress.add_task("dbt build", total=total)
        if what == "START":
            return
        progress.advance(state["task"])
        if what in ("ERROR", "FAIL", "WARN", "SKIP"):
            progress.console.print(
                line.strip(),
                style="red" if what in ("ERROR", "FAIL") else "yellow",
                highlight=False,
                soft_wrap=True,
            )

    with progress:
        yield sink


@app.command()
@_friendly
def docs(warehouse: WarehouseOpt = None) -> None:
    """Generate the dbt documentation site (models, columns, tests, lineage) and print its path."""
    from qkwh.build import docs_generate

    path = docs_generate(_existing_warehouse(warehouse))
    out.print(f"dbt docs: {path} (open it in a browser)")


@app.command()
@_friendly
def export(
    names: Annotated[
        list[str] | None, typer.Argument(help="Tables, views or marts to export.")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="parquet or csv.")] = "parquet",
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = Path("export"),
    legacy: Annotated[
        bool,
        typer.Option(
            "--legacy",
            help="Also write the per-head CSVs older tools read (head_metrics.csv, head_bucket_plasticity.csv, head_component_weights.csv, rotated.csv, qk.csv).",
        ),
    ] = False,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="With --legacy: only this model.")
    ] = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Write tables or marts to parquet/CSV files (one file per name)."""
    from qkwh.errors import InputError
    from qkwh.export import export as run
    from qkwh.export import export_legacy

    if fmt not in ("parquet", "csv"):
        raise InputError(f"--format must be parquet or csv, not {fmt!r}")
    if not names and not legacy:
        raise InputError("name at least one table or mart, or pass --legacy")
    wh = _existing_warehouse(warehouse)
    written = list(run(wh, list(names), fmt, out_dir)) if names else []  # type: ignore[arg-type]
    if legacy:
        written += export_legacy(wh, out_dir, model)
    for p in written:
        out.print(str(p))


@app.command()
@_friendly
def compare(
    model_a: Annotated[str, typer.Argument(help="First model id (A).")],
    model_b: Annotated[str, typer.Argument(help="Second model id (B).")],
    metric: Annotated[
        list[str] | None,
        typer.Option(
            "--metric",
            "-m",
            help="Only these metrics (repeat or comma-separate; default: every compared metric).",
        ),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, csv or json.")] = "table",
    warehouse: WarehouseOpt = None,
) -> None:
    """Is model A really different from model B?  Differences with intervals, from the marts.

    For each metric: both models' values with their 95 % layer-cluster bootstrap intervals, the
    difference A - B with its interval, and the verdict: `A > B` / `A < B` when the interval
    excludes 0, `cannot tell` when it holds 0.  Reads model_comparisons and model_metric_ci
    (run `qkwh build` first); the metrics compared are the dbt var comparison_metrics.  Two
    captures of one model on different datasets are compared head by head (dataset_comparisons);
    a model with a document-group jackknife (`compute --documents`) gets intervals that also
    count document noise (docs/uncertainty.md).
    """
    from qkwh.compare import compare as run
    from qkwh.compare import fmt as num
    from qkwh.compare import fmt_interval, to_csv, to_json
    from qkwh.errors import InputError

    if fmt not in ("table", "csv", "json"):
        raise InputError(f"--format must be table, csv or json, not {fmt!r}")
    rows = run(_existing_warehouse(warehouse), model_a, model_b, _split(metric))
    if fmt == "csv":
        sys.stdout.write(to_csv(rows))
        return
    if fmt == "json":
        sys.stdout.write(to_json(rows) + "\n")
        return
    level = next((r.level for r in rows if r.level is not None), None)
    pct = f"{level:.0%}" if level is not None else ""
    label_a = next((r.label_a for r in rows if r.label_a), model_a)
    label_b = next((r.label_b for r in rows if r.label_b), model_b)
    table = Table(
        "metric",
        f"A = {label_a}",
        f"{pct} interval",
        f"B = {label_b}",
        f"{pct} interval",
        "A − B",
        f"{pct} interval",
        "verdict",
        title=f"{model_a} (A) vs {model_b} (B): "
        + (
            "one model on two datasets, paired head by head"
            if any(r.paired for r in rows)
            else "layer-cluster bootstrap"
        ),
    )
    for r in rows:
        table.add_row(
            r.metric,
            num(r.estimate_a),
            fmt_interval(r.ci_low_a, r.ci_high_a),
            num(r.estimate_b),
            fmt_interval(r.ci_low_b, r.ci_high_b),
            num(r.difference),
            fmt_interval(r.ci_low, r.ci_high),
            r.verdict,
        )
    out.print(table)
    if not rows:
        out.print("no metric compared for this pair")
    notes = sorted({r.note for r in rows if r.note})
    for n in notes:
        out.print(f"note: {n}", highlight=False)
    n_boot = next((r.n_boot for r in rows if r.n_boot), None)
    if n_boot:
        paired = any(r.paired for r in rows)
        out.print(
            f"intervals: {n_boot} replicates redrawing "
            + (
                "the layers of the heads both captures hold (paired: the same draw for A and B)"
                if paired
                else "each model's layers"
            )
            + "; `cannot tell` = the interval of A − B holds 0",
            highlight=False,
        )
        kinds = sorted({r.interval for r in rows if r.interval})
        if "layers+documents" in kinds:
            which = "every metric" if kinds == ["layers+documents"] else "the metrics it covers"
            out.print(
                f"interval shown: layers+documents for {which} (the bootstrap combined with the "
                "document-group jackknife: estimate ∓ z·sqrt(se_layers² + se_documents²))"
                + (
                    "; else layers (the bootstrap percentile interval)" if "layers" in kinds else ""
                ),
                highlight=False,
            )
        else:
            out.print(
                "interval shown: layers (no document-group jackknife; `qkwh compute "
                "--documents` adds document noise)",
                highlight=False,
            )


@app.command()
@_friendly
def report(
    models: Annotated[
        list[str] | None,
        typer.Option(
            "--models", "-m", help="Model ids to include (repeat or comma-separate; default: all)."
        ),
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", "-o", help="Output folder (default: ./reports/latest).")
    ] = None,
    build_first: Annotated[
        bool,
        typer.Option(
            "--build",
            help="Rebuild the marts first when they are stale (older than the per-head results or the catalog).",
        ),
    ] = False,
    static: Annotated[
        bool,
        typer.Option(
            "--static",
            help="Also write a PNG and an SVG of every figure into figures/ (slower; the pages can save any figure as PNG or SVG too).",
        ),
    ] = False,
    warehouse: WarehouseOpt = None,
) -> None:
    """Render the figures into an offline HTML report (with --static, PNG and SVG files too).

    index.html holds the figures across models and links to one page per model with its own
    figures (collages, heatmaps, head profiles); every page works offline, from the vega.js beside
    it.  Figures without data are left out with a note.  The output folder must be new,
    empty or an earlier qkwh report (which is replaced, and said so); any other folder is refused.
    Warns when the marts are stale (or rebuilds them with --build) and when a model's current
    parameter set is partial.
    """
    from qkwh import status as st
    from qkwh import store
    from qkwh.demo import check_report_dir
    from qkwh.reports.render import DEFAULT_OUT, render

    wh = _existing_warehouse(warehouse)
    target = Path(out_dir).expanduser().resolve() if out_dir else DEFAULT_OUT
    replacing = check_report_dir(target)
    if build_first:
        con = store.connect(wh, read_only=True)
        try:
            stale = st.staleness(con).stale
        finally:
            con.close()
        if stale:
            from qkwh.build import build as run_build

            err.print("the marts are stale: rebuilding them first", highlight=False)
            with _dbt_progress(wh) as sink:
                res = run_build(wh, log_sink=sink)
            out.print(res.summary, highlight=False)
    con = store.connect(wh, read_only=True)
    try:
        _warn_stale(con, models=_split(models))
    finally:
        con.close()
    if replacing:
        err.print(f"replacing the earlier report in {target}", highlight=False)
    result = render(wh, out=target, models=_split(models), formats=("png", "svg") if static else ())
    out.print(result.summary(), highlight=False)
    for line, failed in result.left_out_lines():
        out.print(line, highlight=False, style="red" if failed else None)
    out.print(f"report: {result.index}")
    if result.failed:
        raise QkwhError(
            f"{len(result.failed)} figure(s) failed to render (listed above); the rest were written"
        )


@app.command()
@_friendly
def demo(
    warehouse: Annotated[
        Path | None,
        typer.Option(
            "--warehouse",
            "-w",
            help="Warehouse to add the sample models to (default: ./qkwh.duckdb when it does not exist or holds only the samples, else ./qkwh-demo.duckdb; $QKWH_WAREHOUSE is not used). Other models in it are left as they are.",
        ),
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Report folder: empty, new, or an earlier qkwh report (default: ./reports/demo).",
        ),
    ] = None,
) -> None:
    """Run the whole pipeline on the embedded samples (what `make demo` runs).

    Ingest the two sample captures (SmolLM2-135M, 12 query heads, on technical prose and on
    Python source code), compute their heads (the three default analyses plus the opt-in RoPE
    bands and document jackknife, so the report shows the band figures and the comparison of the
    two datasets with document-level intervals), build the marts and draw the report
    (./reports/demo), then print commands to go on with that work as printed in the same folder.
    In a warehouse holding other models only the sample models are added or refreshed: no model
    is dropped or recomputed, and the file is never deleted.  Everything is checked before anything
    is written.
    """
    import time

    from qkwh import store
    from qkwh.build import build as run_build
    from qkwh.compute.runner import compute as run_compute
    from qkwh.demo import SAMPLE_MODEL_IDS, demo_analyses, next_steps, prepare
    from qkwh.ingest import ingest as run_ingest
    from qkwh.paths import SAMPLE_DIRS
    from qkwh.reports.render import render

    plan = prepare(warehouse, out_dir)
    wh = plan.warehouse
    if plan.other_models:
        out.print(
            f"{wh} holds {len(plan.other_models)} other model(s) ({', '.join(plan.other_models)}); "
            f"the demo adds or refreshes only {', '.join(SAMPLE_MODEL_IDS)}",
            highlight=False,
        )
    t0 = time.perf_counter()
    ids = []
    for sample in SAMPLE_DIRS:
        rep = run_ingest(str(sample), warehouse=wh)
        out.print(_tagged("ingest ", "bold", rep.summary()))
        ids.append(rep.model_id)
    # the three default analyses plus the two opt-in ones (the RoPE bands and the document
    # jackknife, uncertainty.document_groups at its default): the demo shows everything
    analyses = demo_analyses()
    crep = run_compute(wh, models=ids, analyses=analyses)
    out.print(
        _tagged(
            "compute",
            "bold",
            f"{crep.n_written} head(s) computed ({', '.join(analyses)}), "
            f"{crep.n_skipped} unchanged, {len(crep.failures)} failed",
        )
    )
    if crep.failures:
        raise QkwhError(f"compute failed on {crep.failures[0][0]}: {crep.failures[0][1]}")
    res = run_build(wh)
    out.print(_tagged("build  ", "bold", res.summary))
    if plan.replaces_report:
        out.print(f"replacing the earlier report in {plan.report_dir}", highlight=False)
    rr = render(wh, out=plan.report_dir, models=ids)
    con = store.connect(wh, read_only=True)
    try:
        rows = con.execute(store.load_sql("demo_summary"), [ids]).fetchall()
    finally:
        con.close()
    table = Table(
        "model_id",
        "heads",
        "taxonomy (most common)",
        "mean |r_k_a|",
        "mean bias_strength",
        "ap_overall",
        "ap_drop",
        title="summary",
    )
    for r in rows:
        table.add_row(*[f"{v:.4g}" if isinstance(v, float) else str(v) for v in r])
    out.print(table)
    out.print(f"warehouse: {wh}", highlight=False)
    out.print(
        f"report:    {rr.index}  ({len(rr.figures)} figures, {len(rr.skipped)} left out for lack of data)",
        highlight=False,
    )
    out.print(f"done in {time.perf_counter() - t0:.0f} s")
    out.print("next, in this folder:")
    for line in next_steps(wh):
        out.print(f"  {line}", highlight=False, soft_wrap=True)


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


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
