"""``qkwh demo``: the whole pipeline on the embedded samples."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from qkwh.cli.common import friendly
from qkwh.cli.output import out, tagged
from qkwh.errors import QkwhError


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
        out.print(tagged("ingest ", "bold", rep.summary()))
        ids.append(rep.model_id)
    # the three default analyses plus the two opt-in ones (the RoPE bands and the document
    # jackknife, uncertainty.document_groups at its default): the demo shows everything
    analyses = demo_analyses()
    crep = run_compute(wh, models=ids, analyses=analyses)
    out.print(
        tagged(
            "compute",
            "bold",
            f"{crep.n_written} head(s) computed ({', '.join(analyses)}), "
            f"{crep.n_skipped} unchanged, {len(crep.failures)} failed",
        )
    )
    if crep.failures:
        raise QkwhError(f"compute failed on {crep.failures[0][0]}: {crep.failures[0][1]}")
    res = run_build(wh)
    out.print(tagged("build  ", "bold", res.summary))
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
