"""Marts and reports: build, docs, compare, report and status."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from qkwh.cli.common import ModelsOpt, WarehouseOpt, existing_warehouse, friendly, split, warn_stale
from qkwh.cli.output import TableFormat, err, lazy_progress, out, print_rows
from qkwh.errors import QkwhError


@friendly
def build(
    select: Annotated[
        str | None, typer.Option("--select", "-s", help="dbt node selection (default: everything).")
    ] = None,
    warehouse: WarehouseOpt = None,
    unit_tests: Annotated[
        bool,
        typer.Option(
            "--unit-tests",
            help="Also run dbt's unit tests (each model's logic on fixed rows; they read nothing "
            "from the warehouse).",
        ),
    ] = False,
) -> None:
    """Run `dbt build` on the warehouse (marts and all their data tests).

    Seeds, staging, intermediate and mart models, and every dbt data test on what they hold.
    dbt's unit tests check the models' logic on fixed rows, not your data: --unit-tests runs
    them too (the test suite always does).  Shows progress, the nodes that fail or warn (a
    failing check of a table is named with the rows that fail it, e.g. "in_range(depth, 0, 1):
    3 rows"), and a summary; dbt's full log is kept in the warehouse's dbt folder (<warehouse
    name>.dbt/logs/dbt.log, path printed).
    Reports clearly when another process holds the warehouse.  Ctrl-C stops it with one line and
    exit code 130.
    """
    wh = existing_warehouse(warehouse)
    result = run_build(wh, select=select, unit_tests=unit_tests)
    out.print(result.summary, highlight=False)
    out.print(f"full log: {result.log_path / 'dbt.log'}", highlight=False)


def run_build(wh: Path, select: str | None = None, unit_tests: bool = False):
    """``qkwh.build.build`` with its progress on stderr: one line when dbt has planned its nodes
    (how many of each kind), a progress bar on a terminal, and one line per node that fails,
    warns or is skipped, all from dbt's structured events (``progress=``, a callback receiving a
    ``BuildProgress``: ``event``, ``total``, ``n_done`` and the ``line`` to print).  dbt's own
    text stays in its log file, whose path the caller prints once."""
    from qkwh.build import build

    with dbt_progress() as on_progress:
        return build(wh, select=select, progress=on_progress, unit_tests=unit_tests)


@contextlib.contextmanager
def dbt_progress():
    """A ``progress`` callback for ``qkwh.build.build`` (see :func:`run_build`)."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    from qkwh.build import BuildProgress

    bar = lazy_progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=True,
        disable=not err.is_terminal,
    )
    state: dict = {}

    def on_progress(
        p: BuildProgress,
    ) -> None:  # one call at a time (build.py serialises dbt's threads)
        if p.event == "planned":
            state["task"] = bar.add_task("dbt build", total=p.total)
        elif p.event == "finished" and "task" in state:
            bar.update(state["task"], completed=p.n_done)
        if p.line:
            failed = p.node is not None and p.node.status in ("error", "fail", "runtime error")
            style = "red" if failed else "yellow" if p.node is not None else None
            bar.console.print(p.line, style=style, highlight=False, soft_wrap=True)

    with bar:
        yield on_progress


@friendly
def docs(warehouse: WarehouseOpt = None) -> None:
    """Generate the dbt documentation site (models, columns, tests, lineage) and print its path."""
    from qkwh.build import docs_generate

    path = docs_generate(existing_warehouse(warehouse))
    out.print(f"dbt docs: {path} (open it in a browser)")


@friendly
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
    fmt: Annotated[
        TableFormat, typer.Option("--format", "-f", help="table (for reading), csv or json.")
    ] = TableFormat.table,
    warehouse: WarehouseOpt = None,
) -> None:
    """Is model A really different from model B?  Differences with intervals, from the marts.

    For each metric: both models' values with their 95 % layer-cluster bootstrap intervals, the
    difference A - B with its interval, and the verdict: `A > B` / `A < B` when the interval
    excludes 0, `cannot tell` when it holds 0.  Reads model_comparisons and model_metric_ci
    (run `qkwh build` first); the metrics compared are those the analyses declare as compared (the dbt var comparison_metrics overrides the list).  Two
    captures of one model on different datasets are compared head by head (dataset_comparisons);
    a model with a document-group jackknife (`compute --documents`) gets intervals that also
    count document noise (docs/uncertainty.md).  Where both models have `qkwh ablate` runs of
    the same metric, order, method, k and length, a second table (table format only) sets their
    ablation effects side by side.
    """
    from qkwh.compare import compare as run
    from qkwh.compare import fmt as num
    from qkwh.compare import fmt_interval, to_csv, to_json

    wh = existing_warehouse(warehouse)
    rows = run(wh, model_a, model_b, split(metric))
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
        _ablation_section(wh, model_a, model_b)
        return
    out.print(f"difference = A − B = {model_a} − {model_b}", highlight=False)
    context = _interval_context(wh, [model_a, model_b])
    for n in _notes(rows, context):
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
        # the kinds of the intervals shown (a row without an interval shows none)
        kinds = sorted({r.interval for r in rows if r.interval and r.ci_low is not None})
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
        elif kinds:
            without = [m for m in (model_a, model_b) if m in context and not context[m].documents]
            out.print(
                "interval shown: layers "
                + (
                    f"(no document-group jackknife for {' and '.join(without)}; `qkwh compute "
                    "--documents` adds document noise)"
                    if without
                    else "(these metrics get no document term)"
                ),
                highlight=False,
            )
    _ablation_section(wh, model_a, model_b)


def _ablation_section(wh: Path, model_a: str, model_b: str) -> None:
    """The table of ablation effects where both models have runs (nothing when they do not)."""
    from qkwh.compare import ablation_effects
    from qkwh.compare import fmt as num

    rows = ablation_effects(wh, model_a, model_b)
    if not rows:
        return
    table = Table(
        "metric",
        "order",
        "method",
        "length",
        "k",
        "A logprob",
        "B logprob",
        "A accuracy",
        "B accuracy",
        "A − random",
        "B − random",
        title=f"head ablation: {model_a} (A) vs {model_b} (B), the metric's heads knocked out",
    )

    def vs_random(v: float | None, flag: bool | None) -> str:
        return num(v) + (" *" if flag else "")

    for r in rows:
        table.add_row(
            r["metric"],
            r["rank_order"],
            r["method"],
            str(r["length"]),
            str(r["k"]),
            num(r["mean_logprob_a"]),
            num(r["mean_logprob_b"]),
            num(r["accuracy_a"]),
            num(r["accuracy_b"]),
            vs_random(r["diff_random_logprob_a"], r["distinguishable_a"]),
            vs_random(r["diff_random_logprob_b"], r["distinguishable_b"]),
        )
    out.print(table)
    out.print(
        "logprob: mean log-probability of the pass key (nats); − random: paired difference from "
        "the random selections of the same k; * = distinguishable (its interval excludes 0); "
        "the intervals are in the mart ablation_effects",
        highlight=False,
    )


def _interval_context(wh: Path, models: list[str]) -> dict:
    from qkwh import status, store

    con = store.connect(wh, read_only=True)
    try:
        return status.interval_context(con, models)
    finally:
        con.close()


def _notes(rows, context: dict) -> list[str]:
    """The notes of the comparison rows, once each; "too few layers" names the model(s) without
    an interval, the layers they have and the fewest the bootstrap draws from."""
    from qkwh.status import min_layers

    notes = []
    for r in rows:
        if not r.note:
            continue
        if "too few layers" in r.note:
            lacking = [
                m
                for m, lo in ((r.model_a, r.ci_low_a), (r.model_b, r.ci_low_b))
                if lo is None and m in context
            ]
            if lacking:
                need = min_layers()
                said = " and ".join(
                    f"{m} has {context[m].n_layers} layer(s) with a value" for m in lacking
                )
                notes.append(
                    f"no interval: {said}; the layer bootstrap needs at least {need} "
                    "(dbt var min_layers)"
                )
                continue
        notes.append(r.note)
    return sorted(set(notes))


@friendly
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

    wh = existing_warehouse(warehouse)
    target = Path(out_dir).expanduser().resolve() if out_dir else DEFAULT_OUT
    replacing = check_report_dir(target)
    if build_first:
        con = store.connect(wh, read_only=True)
        try:
            stale = st.staleness(con).stale
        finally:
            con.close()
        if stale:
            err.print("the marts are stale: rebuilding them first", highlight=False)
            res = run_build(wh)
            out.print(res.summary, highlight=False)
    con = store.connect(wh, read_only=True)
    try:
        warn_stale(con, models=split(models))
    finally:
        con.close()
    if replacing:
        err.print(f"replacing the earlier report in {target}", highlight=False)
    result = render(wh, out=target, models=split(models), formats=("png", "svg") if static else ())
    out.print(result.summary(), highlight=False)
    for line, failed in result.left_out_lines():
        out.print(line, highlight=False, soft_wrap=True, style="red" if failed else None)
    out.print(f"report: {result.index}")
    if result.failed:
        raise QkwhError(
            f"{len(result.failed)} figure(s) failed to render (listed above); the rest were written"
        )


@friendly
def status(
    model: ModelsOpt = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Per model: what is ingested, computed (per parameter set: heads covered of the analysable
    heads) and built (marts up to date, stale or not built); a table where it fits the terminal,
    else one block per model."""
    from qkwh import status as st
    from qkwh import store

    con = store.connect(existing_warehouse(warehouse), read_only=True)
    try:
        models, staleness = st.status(con)
        wanted = split(model)
        models = [m for m in models if not wanted or m.model_id in wanted]
        columns, rows = st.status_table(models)
        print_rows(str(store.resolve_warehouse(warehouse)), columns, rows)
        if not models:
            out.print("no models yet: `qkwh ingest SOURCE`")
        if staleness.built_at:
            out.print(
                f"marts last built {staleness.built_at:%Y-%m-%d %H:%M:%S} UTC", highlight=False
            )
        warn_stale(con, models=wanted)
    finally:
        con.close()
