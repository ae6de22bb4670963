"""Catalog commands: ingest, models, findings, remove, sql and export."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from qkwh.cli.common import WarehouseOpt, YesOpt, confirm, existing_warehouse, friendly, warn_stale
from qkwh.cli.output import (
    FileFormat,
    PipeClosed,
    TableFormat,
    err,
    out,
    print_ingest,
    print_rows,
    print_table,
    simple_table,
    tagged,
    write_csv,
    write_json,
)
from qkwh.errors import QkwhError


@friendly
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
            confirm=lambda what: confirm(what, yes),
        )
        print_ingest(report)
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
        confirm=lambda what: confirm(what, yes),
    )


def _ingest_many(sources: list[str], **kwargs) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    from qkwh.cli.output import lazy_progress
    from qkwh.ingest_branches import ingest_many

    with lazy_progress(
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
                print_ingest(o.report)
            else:
                err.print(
                    tagged("failed", "red", f"{o.source}: {o.error}"),
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


@friendly
def models(warehouse: WarehouseOpt = None) -> None:
    """List the models in the warehouse with their files, heads and computed heads (a table where
    it fits the terminal, else one block per model)."""
    from qkwh import store
    from qkwh.status import models_overview

    con = store.connect(existing_warehouse(warehouse), read_only=True)
    try:
        cols, rows = models_overview(con)
    finally:
        con.close()
    cells = [
        ["" if v is None else f"{v:,}" if isinstance(v, int) else str(v) for v in r] for r in rows
    ]
    print_rows(str(store.resolve_warehouse(warehouse)), cols, cells)
    if not rows:
        out.print("no models yet: `qkwh ingest SOURCE`")


@friendly
def findings(
    model_id: Annotated[str | None, typer.Argument(help="Only this model.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Include info findings.")] = False,
    warehouse: WarehouseOpt = None,
) -> None:
    """Show the data-quality findings stored at ingest (warnings by default)."""
    from qkwh import status, store

    con = store.connect(existing_warehouse(warehouse), read_only=True)
    try:
        rows = status.findings(con, model_id, all_)
    finally:
        con.close()  # closed before any error: a traceback must not keep the file open
    if not rows:
        which = "" if all_ else " (warnings or errors; --all adds info findings)"
        out.print(f"no findings{which}", highlight=False)
        return
    out.print(simple_table(["model_id", "severity", "check", "file", "detail"], rows))


@friendly
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

    def ask(plan) -> None:
        lines = [plan.summary() + ":"] + [f"  {t}: {n:,}" for t, n in plan.rows.items()]
        confirm("\n".join(lines), yes)

    counts = run(model_id, warehouse=existing_warehouse(warehouse), confirm=ask)
    n = sum(counts.values())
    out.print(f"removed {model_id}: {n:,} rows from {sum(1 for v in counts.values() if v)} tables")


@friendly
def sql(
    query: Annotated[
        str,
        typer.Argument(
            help="One SQL query: SELECT, WITH, FROM, VALUES, DESCRIBE, SHOW or SUMMARIZE (the warehouse is opened read-only; nothing is written)."
        ),
    ],
    fmt: Annotated[
        TableFormat,
        typer.Option(
            "--format",
            "-f",
            help="table (for reading), csv or json (every row and column, for other tools).",
        ),
    ] = TableFormat.table,
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

    if max_rows < 0:
        raise InputError(f"--max-rows must be 0 (all) or a positive number, not {max_rows}")
    check_query(query)
    con = store.connect(existing_warehouse(warehouse), read_only=True)
    try:
        lock_down(con)
        rel = con.sql(query)
        columns = list(rel.columns)
        reader = rel.to_arrow_reader(10_000)
        if fmt == "csv":
            write_csv(columns, reader)
        elif fmt == "json":
            write_json(columns, reader)
        else:
            print_table(columns, reader, max_rows)
        warn_stale(con, query=query)
    except Exception as exc:  # duckdb errors
        if isinstance(exc, (QkwhError, BrokenPipeError, PipeClosed)):
            raise
        line = str(exc).splitlines()[0]
        if "the vectors of model" in line:  # a model's files are missing (the vectors views)
            raise MissingFilesError(line.split(": ", 1)[-1]) from None
        raise QkwhError(error_text(exc)) from None
    finally:
        con.close()


@friendly
def export(
    names: Annotated[
        list[str] | None, typer.Argument(help="Tables, views or marts to export.")
    ] = None,
    fmt: Annotated[
        FileFormat, typer.Option("--format", "-f", help="File format.")
    ] = FileFormat.parquet,
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

    if not names and not legacy:
        raise InputError("name at least one table or mart, or pass --legacy")
    wh = existing_warehouse(warehouse)
    written = list(run(wh, list(names), fmt.value, out_dir)) if names else []
    if legacy:
        written += export_legacy(wh, out_dir, model)
    for p in written:
        out.print(str(p))
