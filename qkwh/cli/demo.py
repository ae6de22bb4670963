"""``qkwh demo``: the whole pipeline on the embedded samples."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from qkwh.cli.common import friendly
from qkwh.cli.output import out, tagged

#: the headers of the demo's summary table (the columns of qkwh/sql/demo_summary.sql)
SUMMARY_HEADERS = (
    "model_id",
    "heads",
    "taxonomy (most common)",
    "mean |r_k_a|",
    "mean bias_strength",
    "ap_overall",
    "ap_drop",
)


@friendly
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
    Python source code), compute their heads (the four default analyses plus the opt-in RoPE
    bands and document jackknife, so the report shows the band figures and the comparison of the
    two datasets with document-level intervals), build the marts and draw the report
    (./reports/demo), then print commands to go on with that work as printed in the same folder.
    In a warehouse holding other models only the sample models are added or refreshed: no model
    is dropped or recomputed, and the file is never deleted.  Everything is checked before anything
    is written.
    """
    from qkwh.demo import next_steps, run

    tags = {"ingest": "ingest ", "compute": "compute", "build": "build  "}

    def on_step(step: str, line: str) -> None:
        if step in tags:
            out.print(tagged(tags[step], "bold", line), highlight=False)
        else:
            out.print(line, highlight=False)

    result = run(warehouse, out_dir, on_step=on_step)
    table = Table(*SUMMARY_HEADERS, title="summary")
    for r in result.summary:
        table.add_row(*[f"{v:.4g}" if isinstance(v, float) else str(v) for v in r])
    out.print(table)
    rr = result.report
    out.print(f"warehouse: {result.plan.warehouse}", highlight=False)
    out.print(
        f"report:    {rr.index}  ({len(rr.figures)} figures, {len(rr.skipped)} left out for lack of data)",
        highlight=False,
    )
    out.print(f"done in {result.seconds:.0f} s")
    out.print("next, in this folder:")
    for line in next_steps(result.plan.warehouse):
        out.print(f"  {line}", highlight=False, soft_wrap=True)
