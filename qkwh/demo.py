"""``qkwh demo``: the whole pipeline on the embedded samples, leaving everything else alone.

The embedded samples are one model (SmolLM2-135M-Instruct) captured on two datasets: technical
prose (``smollm2-135m``) and Python source code (``smollm2-135m-code``).
The demo writes the default warehouse ``./qkwh.duckdb`` when there is none (or it holds only the
samples), so that every command it suggests works as printed in that folder; when
``./qkwh.duckdb`` holds other models it uses ``./qkwh-demo.duckdb`` instead (and the commands it
prints name it).  Its report goes to ``./reports/demo``.
Pointed at another warehouse, it adds or refreshes the sample models and nothing else: it never
deletes the file, never drops or recomputes another model, and refuses when the warehouse holds
a different dataset under a sample's model id.  It writes a report only into an empty folder
or over an earlier qkwh report, and says when it replaces one.

:func:`prepare` checks all of this before anything is written; :func:`run` then runs ingest,
compute (the samples' heads only), the dbt build and the report (``qkwh demo`` prints what it
says).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from qkwh import store
from qkwh.errors import InputError, NotAWarehouseError, QkwhError
from qkwh.paths import DEFAULT_WAREHOUSE, DEMO_REPORT, DEMO_WAREHOUSE, SAMPLE_DIR, SAMPLE_DIRS

# each sample folder is named after its registry model id
SAMPLE_MODEL_ID = SAMPLE_DIR.name  # the first sample (technical prose)
SAMPLE_MODEL_IDS = tuple(d.name for d in SAMPLE_DIRS)  # every sample the demo ingests
REPORT_INDEX = "figures.json"  # every qkwh report folder has one


@dataclass(frozen=True)
class DemoPlan:
    """Where the demo writes, checked: see :func:`prepare`."""

    warehouse: Path
    report_dir: Path
    other_models: tuple[str, ...]  # models already in the warehouse that the demo leaves alone
    refreshes_sample: bool  # a sample model is already there (same files): refreshed in place
    replaces_report: bool  # report_dir holds an earlier qkwh report that will be replaced


def prepare(warehouse: str | Path | None = None, out: str | Path | None = None) -> DemoPlan:
    """Resolve the demo's warehouse and report folder and refuse what would lose data.

    Defaults are :func:`default_warehouse` and :data:`~qkwh.paths.DEMO_REPORT` in the working
    directory; ``$QKWH_WAREHOUSE`` is deliberately not used.  Raises :class:`InputError`
    (exit 2) when the warehouse is some other DuckDB database, when it holds a model with a
    sample's id but other files, or when the report folder is not empty and not a qkwh report.
    """
    wh = Path(warehouse).expanduser().resolve() if warehouse else default_warehouse()
    report_dir = Path(out or DEMO_REPORT).expanduser().resolve()
    replaces = check_report_dir(report_dir)
    others, refreshes = _check_warehouse(wh) if wh.exists() else ((), False)
    return DemoPlan(wh, report_dir, others, refreshes, replaces)


def default_warehouse() -> Path:
    """./qkwh.duckdb (what every command opens by default) when it does not exist or holds no model
    but the samples; else ./qkwh-demo.duckdb, so that the demo never adds to someone's own data."""
    main = DEFAULT_WAREHOUSE.expanduser().resolve()
    if not main.exists():
        return main
    try:
        con = store.connect(main, read_only=True)
    except (QkwhError, duckdb.Error):  # locked, or not a DuckDB file: leave it alone
        return DEMO_WAREHOUSE.expanduser().resolve()
    try:
        tables = set(store.table_names(con))
        models = (
            [r[0] for r in con.execute("SELECT model_id FROM models").fetchall()]
            if "models" in tables
            else None
        )
    finally:
        con.close()
    if not tables or (models is not None and set(models) <= set(SAMPLE_MODEL_IDS)):
        return main
    return DEMO_WAREHOUSE.expanduser().resolve()


def demo_analyses() -> tuple[str, ...]:
    """What the demo computes: every registered analysis, the opt-in ones included (the RoPE
    bands and the document-group jackknife cost more than the rule for the default set allows,
    but on 24 sample heads they take seconds)."""
    from qkwh.analyses import registry

    return registry.names()


@dataclass(frozen=True)
class DemoResult:
    """What :func:`run` did: where it wrote, the per-model summary, the report."""

    plan: DemoPlan
    model_ids: tuple[str, ...]
    summary_columns: tuple[str, ...]
    summary: list[tuple]  # one row per sample model (demo_summary.sql)
    report: Any  # qkwh.reports.render's result (index, figures, skipped)
    seconds: float


def run(
    warehouse: str | Path | None = None,
    out: str | Path | None = None,
    *,
    on_step: Callable[[str, str], None] | None = None,
) -> DemoResult:
    """The whole pipeline on the embedded samples: :func:`prepare` (which refuses before anything
    is written), ingest of each sample, compute of their heads (:func:`demo_analyses`), the dbt
    build and the report.  ``on_step(step, line)`` hears each step as it ends (``"plan"``,
    ``"ingest"``, ``"compute"``, ``"build"``, ``"report"``).  QkwhError when a head fails."""
    import time

    from qkwh.build import build as run_build
    from qkwh.compute.runner import compute as run_compute
    from qkwh.ingest import ingest as run_ingest
    from qkwh.reports.render import render

    def say(step: str, line: str) -> None:
        if on_step is not None:
            on_step(step, line)

    plan = prepare(warehouse, out)
    wh = plan.warehouse
    if plan.other_models:
        say(
            "plan",
            f"{wh} holds {len(plan.other_models)} other model(s) ({', '.join(plan.other_models)}); "
            f"the demo adds or refreshes only {', '.join(SAMPLE_MODEL_IDS)}",
        )
    t0 = time.perf_counter()
    ids = []
    for sample in SAMPLE_DIRS:
        rep = run_ingest(str(sample), warehouse=wh)
        say("ingest", rep.summary())
        ids.append(rep.model_id)
    # the four default analyses plus the two opt-in ones (the RoPE bands and the document
    # jackknife, uncertainty.document_groups at its default): the demo shows everything
    analyses = demo_analyses()
    crep = run_compute(wh, models=ids, analyses=analyses)
    say(
        "compute",
        f"{crep.n_written} head(s) computed ({', '.join(analyses)}), "
        f"{crep.n_skipped} unchanged, {len(crep.failures)} failed",
    )
    if crep.failures:
        raise QkwhError(f"compute failed on {crep.failures[0][0]}: {crep.failures[0][1]}")
    res = run_build(wh)
    say("build", res.summary)
    if plan.replaces_report:
        say("report", f"replacing the earlier report in {plan.report_dir}")
    rr = render(wh, out=plan.report_dir, models=ids)
    con = store.connect(wh, read_only=True)
    try:
        cur = con.execute(store.load_sql("demo_summary"), [ids])
        columns = tuple(d[0] for d in cur.description)
        rows = cur.fetchall()
    finally:
        con.close()
    return DemoResult(plan, tuple(ids), columns, rows, rr, time.perf_counter() - t0)


def next_steps(wh: Path) -> list[str]:
    """The commands the demo suggests, written so that they work as printed in the working
    directory: ``-w`` (and a path for ``qkwh.open``) only when ``wh`` is not what the commands
    open by default."""
    import os

    try:
        shown = str(wh.relative_to(Path.cwd().resolve()))
    except ValueError:
        shown = str(wh)
    default = wh == store.resolve_warehouse(None)
    w = "" if default else f" -w {shown}"
    where = "" if default else repr(shown)
    envnote = (
        []
        if default or not os.environ.get("QKWH_WAREHOUSE")
        else [f"# (-w because $QKWH_WAREHOUSE names {os.environ['QKWH_WAREHOUSE']})"]
    )
    first, second = SAMPLE_MODEL_IDS
    qkwh = qkwh_command()
    return [
        *envnote,
        f"{qkwh} models{w}",
        f'{qkwh} sql{w} "SELECT model_id, n_heads, ap_overall, ap_drop FROM model_summary '
        f'ORDER BY model_id"',
        f"{qkwh} compare {first} {second}{w}",
        f'{qkwh} sql{w} "SELECT model_a, model_b, metric, difference, ci_low, ci_high, interval, '
        f"distinguishable FROM dataset_comparisons WHERE metric LIKE 'ap_%' ORDER BY ALL\"",
        f"{_python()} -c \"import qkwh; print(qkwh.open({where}).table('model_summary').to_pylist())\"",
        f"{qkwh} compute{w} -p plasticity.empirical=true && {qkwh} build{w} && {qkwh} report{w}",
    ]


def qkwh_command() -> str:
    """``qkwh`` when that name finds this installation's command on $PATH; else the full path of
    the ``qkwh`` beside this Python (a virtualenv that is not active, say), else ``PYTHON -m
    qkwh``: a printed command works as printed."""
    import shutil
    import sys

    beside = Path(sys.executable).parent / "qkwh"
    found = shutil.which("qkwh")
    if found and (not beside.exists() or Path(found).resolve() == beside.resolve()):
        return "qkwh"
    if beside.exists():
        return _quoted(str(beside))
    return f"{_quoted(sys.executable)} -m qkwh"


def _quoted(path: str) -> str:
    import shlex

    return shlex.quote(path)


def _python() -> str:
    """``python`` when that is the interpreter qkwh runs in, else its full path (pipx, say),
    quoted for the shell where it needs it (a space in the path)."""
    import shutil
    import sys

    found = shutil.which("python")
    return (
        "python"
        if found and Path(found).resolve() == Path(sys.executable).resolve()
        else _quoted(sys.executable)
    )


def check_report_dir(report_dir: Path) -> bool:
    """True when ``report_dir`` holds an earlier qkwh report (to be replaced), False when it is
    new or empty; :class:`InputError` when it is a file or a non-empty folder of something else."""
    if not report_dir.exists():
        return False
    if not report_dir.is_dir():
        raise InputError(f"{report_dir} is a file, not a report folder; pass --out DIR")
    if not any(report_dir.iterdir()):
        return False
    if (report_dir / REPORT_INDEX).is_file():
        return True
    raise InputError(
        f"{report_dir} is not empty and holds no qkwh report ({REPORT_INDEX} missing); "
        "qkwh does not write there: pass --out with another folder"
    )


def _check_warehouse(wh: Path) -> tuple[tuple[str, ...], bool]:
    try:
        con = store.connect(wh, read_only=True)
    except NotAWarehouseError as exc:  # an empty DuckDB file becomes the demo's warehouse
        if exc.empty:
            return (), False
        raise
    try:
        tables = set(store.table_names(con))
        if not tables:
            return (), False
        if not {"models", "files"} <= tables:
            raise InputError(
                f"{wh} is a DuckDB database without qkwh's tables; the demo does not "
                "write into other databases: pass --warehouse with another file"
            )
        models = [r[0] for r in con.execute("SELECT model_id FROM models ORDER BY 1").fetchall()]
        held = {
            d.name: dict(
                con.execute(
                    "SELECT config_name, fingerprint FROM files WHERE model_id = ?", [d.name]
                ).fetchall()
            )
            for d in SAMPLE_DIRS
            if d.name in models
        }
    finally:
        con.close()
    others = tuple(m for m in models if m not in SAMPLE_MODEL_IDS)
    for d in SAMPLE_DIRS:
        if d.name in held and held[d.name] != sample_fingerprints(d):
            raise InputError(
                f"{wh} already holds a model {d.name!r} that is not the embedded "
                "sample (its files differ); the demo leaves it alone: pass --warehouse with "
                f"another file, or `qkwh remove {d.name}` first"
            )
    return others, bool(held)


def sample_fingerprints(sample_dir: Path = SAMPLE_DIR) -> dict[str, str]:
    """``config_name -> content fingerprint`` of an embedded sample's files (as ingest stores)."""
    from qkwh.sniffed.layout import scan
    from qkwh.sniffed.validate import scan_files

    return {s.file.config_name: s.fingerprint for s in scan_files(scan(sample_dir))}
