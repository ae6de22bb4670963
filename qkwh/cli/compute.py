"""Compute commands: compute, and the parameter sets (runs list/use/drop/diff)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from qkwh.analyses import registry as analysis_registry
from qkwh.cli.common import (
    Command,
    Group,
    ModelsOpt,
    WarehouseOpt,
    existing_warehouse,
    friendly,
    split,
)
from qkwh.cli.output import err, out, tagged
from qkwh.errors import QkwhError


class ComputeCommand(Command):
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


@friendly
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
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    from qkwh import store
    from qkwh.cli.output import lazy_progress
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
        _check_documents(documents, param)
        param = [*(param or []), f"uncertainty.document_groups={documents}"]
    wh = existing_warehouse(warehouse)
    cfg, covered = (
        _named_config(name, wh)
        if name is not None and config is None and not param
        else (None, None)
    )
    cfg = cfg or load_run_config(config, param)
    names = (
        tuple(split([analyses]) or []) if analyses is not None else covered
    )  # a named set: its analyses
    if documents is not None:
        base = names if names is not None else analysis_registry.default_names()
        names = tuple(dict.fromkeys((*base, "uncertainty")))
    if "uncertainty" in (names or ()):
        _check_documents(cfg.params_of("uncertainty").document_groups, None)
    scope, gone = _models_with_files(wh, split(model))
    if force:
        _say_force(wh, scope, names, cfg)
    with lazy_progress(
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
        err.print(tagged("warning:", "yellow", why), highlight=False, soft_wrap=True)
    for why in dict.fromkeys(why for _, _, why in report.left_out):  # one line per reason
        err.print(tagged("warning:", "yellow", why), highlight=False, soft_wrap=True)
    for why in report.notes:
        err.print(tagged("warning:", "yellow", why), highlight=False, soft_wrap=True)
    if report.failures:
        for label, error in report.failures[:10]:
            err.print(tagged("failed", "red", f"{label}: {error}"), highlight=False)
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


#: the most document groups the jackknife takes: every group is one more pass over each head's
#: rows and one more row per head and bucket, so far more groups than any capture has documents
#: (the groups beyond are empty) neither finish nor fit in memory
MAX_DOCUMENT_GROUPS = 10_000


def _check_documents(groups: int, params: list[str] | None) -> None:
    """Refuse (exit 2) a number of document groups that cannot fit, and ``--documents G`` beside
    a ``-p uncertainty.document_groups`` that says otherwise."""
    from qkwh.errors import InputError

    for p in params or []:
        key, _, value = p.partition("=")
        if key.strip() == "uncertainty.document_groups" and value.strip() != str(groups):
            raise InputError(
                f"--documents {groups} contradicts -p {p.strip()}: give the number of document "
                "groups once"
            )
    if groups > MAX_DOCUMENT_GROUPS:
        raise InputError(
            f"document groups {groups:,} cannot fit: at most {MAX_DOCUMENT_GROUPS:,} (each group "
            "is one more pass over every head; more groups than documents stay empty)"
        )


def _models_with_files(wh: Path, models: list[str] | None):
    """(models to compute, MissingFilesError or None).  A model with a missing key file (its
    folder moved or deleted, say) is left out: a key file is shared by several heads, and the
    others go on; the error names it and the fix.  A missing query file fails its head only."""
    from qkwh import store
    from qkwh.errors import MissingFilesError
    from qkwh.status import model_ids

    con = store.connect(wh, read_only=True)
    try:
        missing_k = store.missing_vector_files(con, models, kind="k")
        if not missing_k:
            return models, None
        missing = store.missing_vector_files(con, sorted(missing_k))
        known = model_ids(con)
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
    from qkwh.runs import heads_with_configs

    config_ids = [
        cfg.fingerprint(a, code_version(a)) for a in (analyses or registry.default_names())
    ]
    con = store.connect(wh, read_only=True)
    try:
        n = heads_with_configs(con, models, config_ids)
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
    from qkwh.runs import config_of, has_set, resolve

    wh = store.resolve_warehouse(warehouse)
    if not wh.exists():
        return None, None
    con = store.connect(wh, read_only=True)
    try:
        if not has_set(con, name):
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
    cls=Group,
)


def _param_summary(s) -> str:
    """The parameters of a set that differ from the defaults, e.g. `seed=1 plasticity.cov_mode=diag`."""
    from qkwh.params import RunConfig
    from qkwh.runs import _flatten

    default = _flatten(RunConfig().analysis_params(s.analysis))
    mine = _flatten(s.params)
    changed = [f"{k}={v}" for k, v in sorted(mine.items()) if default.get(k) != v]
    return " ".join(changed) or "defaults"


@runs_app.callback(invoke_without_command=True)
@friendly
def runs(ctx: typer.Context, model: ModelsOpt = None, warehouse: WarehouseOpt = None) -> None:
    """List the parameter sets per model and analysis (same as `qkwh runs list`)."""
    if ctx.invoked_subcommand is None:
        _runs_list(model, warehouse)


@runs_app.command("list")
@friendly
def runs_list(model: ModelsOpt = None, warehouse: WarehouseOpt = None) -> None:
    """List the parameter sets per model and analysis: name, config_id, parameters that differ
    from the defaults, heads covered of the analysable heads, created, and which is current."""
    _runs_list(model, warehouse)


def _runs_list(model, warehouse) -> None:
    from qkwh import store
    from qkwh.runs import list_sets

    con = store.connect(existing_warehouse(warehouse), read_only=True)
    try:
        sets = list_sets(con, split(model))
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
@friendly
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
    from qkwh.runs import set_names, use

    done = use(warehouse, ref, split(model), split(analysis))
    con = store.connect(warehouse, read_only=True)
    try:
        names = set_names(con)
    finally:
        con.close()
    for m, a, c in done:
        out.print(f"{m} {a}: current set is now {names.get(c, c)}", highlight=False)
    out.print("run `qkwh build` to rebuild the marts from it")


@runs_app.command("drop")
@friendly
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

    models = split(model)
    con = store.connect(existing_warehouse(warehouse), read_only=True)
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
@friendly
def runs_diff(
    ref_a: Annotated[str, typer.Argument(help="First set (name or config_id).")],
    ref_b: Annotated[str, typer.Argument(help="Second set (name or config_id).")],
    warehouse: WarehouseOpt = None,
) -> None:
    """Compare two sets: per analysis, the parameters and code version in which they differ."""
    from qkwh import store
    from qkwh.params import RunConfig
    from qkwh.runs import _flatten, diff

    con = store.connect(existing_warehouse(warehouse), read_only=True)
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
