"""Register a sniffed dataset in the warehouse (the input format: docs/input-format.md).

Everything is read and checked before the warehouse is touched; the catalog of the model is then
replaced in one transaction.  The same source twice changes nothing.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import duckdb

from qkwh import reach_inputs, store
from qkwh.errors import InputError, WriteFailedError, write_failure
from qkwh.ids import case_collision, check_model_id
from qkwh.ingest_facts import (
    ModelFacts,
    _metadata_findings,
    _rope_rows,
    resolve_facts,
    source_fingerprint,
)
from qkwh.models_csv import ModelEntry, load_registry
from qkwh.sniffed.layout import Layout, scan
from qkwh.sniffed.metadata import DatasetMetadata, read_metadata
from qkwh.sniffed.validate import FileStats, Finding, check_dataset, scan_files


@dataclass
class IngestReport:
    model_id: str
    status: str  # 'ingested' | 'replaced' | 'unchanged'
    root: Path
    n_files: int
    n_rows: int
    n_heads: int
    n_heads_with_k: int
    findings: list[Finding] = field(default_factory=list)

    def summary(self) -> str:
        warn = sum(1 for f in self.findings if f.severity != "info")
        return (
            f"{self.model_id}: {self.status}; {self.n_files} files, {self.n_rows:,} rows, "
            f"{self.n_heads} heads ({self.n_heads_with_k} with a k file), {warn} warning(s)"
        )


def resolve_source(source: str, *, cache_dir: Path | None = None) -> tuple[Path, dict]:
    """A local folder, or a Hub branch downloaded into the Hugging Face cache."""
    if not str(source).startswith("hf://"):
        root = Path(source).expanduser()
        return root, {"source_kind": "local", "names": [root.resolve().name]}
    from qkwh.sniffed.hub import download, parse_hub_source

    hub = parse_hub_source(source)
    assert hub is not None  # an hf:// source
    root = download(hub, cache_dir=cache_dir)
    return Path(root), {
        "source_kind": "hub",
        "repo_id": hub.repo_id,
        "revision": hub.revision,
        "names": [hub.revision],
    }


def _remote_branch(source: str):
    from qkwh.sniffed.hub import parse_hub_source
    from qkwh.sniffed.remote import open_branch

    hub = parse_hub_source(source)
    if hub is None:
        raise InputError(
            f"{source}: --remote reads a Hub branch in place; give hf://datasets/OWNER/NAME@BRANCH"
        )
    return open_branch(hub)


def ingest(
    source: str,
    *,
    warehouse: str | Path | None = None,
    model_id: str | None = None,
    cache_dir: Path | None = None,
    registry: dict[str, ModelEntry] | None = None,
    on_progress: Callable[[str], None] | None = None,
    remote: bool = False,
    family: str | None = None,
    label: str | None = None,
    dataset: str | None = None,
    confirm: Callable[[str], None] | None = None,
) -> IngestReport:
    """Validate ``source`` and (re)place its model's catalog in the warehouse.

    Re-ingesting a changed source deletes the computed results of the heads whose files changed
    (all of the model's results when its context length or bucket size changed).  ``confirm``,
    when given, is called first with one line saying what will be deleted; it raises to refuse,
    and then nothing is written.

    ``remote``: catalog a Hub branch in place (footers and integer columns read over the network,
    ``hf://`` URIs stored) instead of downloading it.  ``family`` / ``label`` set the model's
    family and display name (they win over the registry); None keeps those stored by the last
    ingest of the model, blank clears them.  ``dataset`` names the text the capture ran on (else
    the capture metadata's); None keeps the stored one, blank clears it (then the metadata's).

    An explicit ``model_id`` that is not an identifier (:mod:`qkwh.ids`) is refused before
    anything is read or opened; an id found in the registry is checked before anything is written.
    An id that differs only in case from one already in the warehouse is refused (exit 2).
    """
    if model_id is not None:
        check_model_id(model_id, origin="--model-id")
    say = on_progress or (lambda _m: None)
    registry = registry if registry is not None else load_registry()
    if remote:
        branch = _remote_branch(source)
        layout: Layout = branch.layout()
        meta = branch.metadata()
        read_all: Callable[[Layout], list[FileStats]] = lambda _layout: branch.scan_files()  # noqa: E731
        origin = {
            "source_kind": "hub_remote",
            "repo_id": branch.source.repo_id,
            "revision": branch.source.revision,
            "names": [branch.source.revision],
            "root": branch.commit_uri,
        }
    else:
        root, origin = resolve_source(source, cache_dir=cache_dir)
        layout = scan(root)
        meta = read_metadata(layout.root)  # type: ignore[arg-type]  # a local layout's root is a Path
        read_all = scan_files
    wh = store.resolve_warehouse(warehouse)
    existed = wh.exists()
    try:
        return _ingest_into(
            warehouse,
            source=source,
            model_id=model_id,
            remote=remote,
            layout=layout,
            meta=meta,
            read_all=read_all,
            origin=origin,
            registry=registry,
            family=family,
            label=label,
            dataset=dataset,
            confirm=confirm,
            say=say,
        )
    except (duckdb.Error, OSError) as exc:
        failed = write_failure(exc)
        if failed is None:
            raise
        where = failed[0] or str(wh)
        if not existed:  # the warehouse this ingest began to create: nothing of it is kept
            for part in (wh, wh.with_name(wh.name + ".wal")):
                part.unlink(missing_ok=True)
        raise WriteFailedError(
            f"{where}: cannot write ({failed[1]}); nothing of {source} was ingested and the "
            "warehouse is as it was"
        ) from None


def _ingest_into(
    warehouse: str | Path | None,
    *,
    source: str,
    model_id: str | None,
    remote: bool,
    layout: Layout,
    meta: DatasetMetadata,
    read_all: Callable[[Layout], list[FileStats]],
    origin: dict,
    registry: dict[str, ModelEntry],
    family: str | None,
    label: str | None,
    dataset: str | None,
    confirm: Callable[[str], None] | None,
    say: Callable[[str], None],
) -> IngestReport:
    """The part of :func:`ingest` that opens and writes the warehouse (one transaction)."""
    con = store.connect(warehouse)  # fails fast when another process holds the warehouse
    try:
        if (
            model_id is not None
        ):  # before reading anything; an id from the registry is checked below
            _refuse_case_collision(con, model_id, source)
        if remote:  # the vectors view reads the new hf:// files
            from qkwh.sniffed.hubfs import register

            register(con)
        say(f"reading {len(layout.files)} files under {layout.root}")
        stats = read_all(layout)
        facts, findings = resolve_facts(
            model_id=model_id,
            names=origin["names"],
            meta=meta,
            stats=stats,
            registry=registry,
            source=source,
            family=family,
            label=label,
            dataset=dataset,
        )
        check_model_id(facts.model_id, origin=f"{source}: registry model id")
        _refuse_case_collision(con, facts.model_id, source)
        facts, findings = _keep_names(
            con, facts, findings, family=family, label=label, dataset=dataset, registry=registry
        )
        if remote:
            findings.append(
                Finding(
                    "info",
                    None,
                    "remote",
                    "read in place on the Hub: footers and integer "
                    "columns only; NaN, all-zero and identical vectors are not checked at ingest",
                )
            )
        findings += check_dataset(
            stats,
            layout=layout,
            bucket_size=facts.bucket_size,
            strategy=facts.sampling_strategy,
            context_length=facts.context_length,
            gqa_ratio=facts.gqa_ratio,
        )
        findings += _metadata_findings(meta, stats)
        findings += reach_inputs.ingest_findings(
            meta.metadata, strategy=facts.sampling_strategy, bucket_size=facts.bucket_size
        )
        rope_rows, rope_findings = _rope_rows(
            meta, stats, facts, registry, hub=origin["source_kind"] in ("hub", "hub_remote")
        )
        findings += rope_findings
        fp = source_fingerprint(stats, facts, rope_rows)
        return _write(
            con,
            source=source,
            origin=origin,
            layout=layout,
            meta=meta,
            stats=stats,
            facts=facts,
            findings=findings,
            fingerprint=fp,
            confirm=confirm,
            rope_rows=rope_rows,
        )
    finally:
        con.close()


def _keep_names(
    con: duckdb.DuckDBPyConnection,
    facts: ModelFacts,
    findings: list[Finding],
    *,
    family: str | None,
    label: str | None,
    dataset: str | None = None,
    registry: dict[str, ModelEntry],
) -> tuple[ModelFacts, list[Finding]]:
    """Keep the stored family, label and dataset of a model already in the warehouse when
    ``--family`` / ``--label`` / ``--dataset`` are not given (None); given blank, they are
    cleared (the family falls back to the registry's, the dataset to the capture metadata's)."""
    if family is not None and label is not None and dataset is not None:
        return facts, findings
    row = con.execute(
        "SELECT family, label, dataset FROM models WHERE model_id = ?", [facts.model_id]
    ).fetchall()
    if not row:
        return facts, findings
    stored_family, stored_label, stored_dataset = row[0]
    if dataset is None and stored_dataset is not None:
        facts = replace(facts, dataset=stored_dataset)
    if family is None:
        facts = replace(facts, family=stored_family)
        entry = registry.get(facts.model_id) if facts.in_registry else None
        if entry is not None and stored_family and entry.family and stored_family != entry.family:
            findings = [
                *findings,
                Finding(
                    "warning",
                    None,
                    "registry_mismatch",
                    f"family: kept {stored_family} from the last ingest, registry says "
                    f"{entry.family}; `--family ''` takes the registry's",
                ),
            ]
    if label is None:
        facts = replace(facts, label=stored_label)
    return facts, findings


def _refuse_case_collision(con: duckdb.DuckDBPyConnection, model_id: str, source: str) -> None:
    """Raise :class:`InputError` when the warehouse holds an id that differs from ``model_id``
    only in case (:mod:`qkwh.ids`: they would share the per-model vectors view)."""
    other = case_collision(
        model_id, [r[0] for r in con.execute("SELECT model_id FROM models").fetchall()]
    )
    if other is not None:
        raise InputError(
            f"{source}: model id {model_id!r} differs only in case from {other!r}, already in the "
            f"warehouse (model ids are compared ignoring case); pass another --model-id, or "
            f"re-ingest as --model-id {other}"
        )


def _write(
    con: duckdb.DuckDBPyConnection,
    *,
    source,
    origin,
    layout,
    meta,
    stats,
    facts: ModelFacts,
    findings,
    fingerprint,
    confirm: Callable[[str], None] | None = None,
    rope_rows: dict | None = None,
) -> IngestReport:
    heads = _heads(stats, facts.gqa_ratio)
    report = IngestReport(
        model_id=facts.model_id,
        status="ingested",
        root=layout.root,
        n_files=len(stats),
        n_rows=sum(s.rows for s in stats),
        n_heads=len(heads["q_head"]),
        n_heads_with_k=int(sum(heads["has_k_file"])),
        findings=findings,
    )
    found = con.execute(
        "SELECT source_fingerprint FROM models WHERE model_id = ?", [facts.model_id]
    ).fetchall()
    old = (
        found[0] if found else None
    )  # fetchall: DuckDB refuses register() while a result is pending
    if old is not None and old[0] == fingerprint:
        report.status = "unchanged"
        return report
    if old is not None:
        report.status = "replaced"

    files_cols = {
        "model_id": [facts.model_id] * len(stats),
        "path": [str(s.file.path) for s in stats],
        "config_name": [s.file.config_name for s in stats],
        "layer": [s.file.layer for s in stats],
        "head": [s.file.head for s in stats],
        "kind": [s.file.kind for s in stats],
        "rows": [s.rows for s in stats],
        "d": [s.d for s in stats],
        "bytes": [s.bytes for s in stats],
        "fingerprint": [s.fingerprint for s in stats],
        "n_examples": [s.n_examples for s in stats],
        "min_position": [s.min_position for s in stats],
        "max_position": [s.max_position for s in stats],
        "max_bucket": [s.max_bucket for s in stats],
        "has_pos0": [s.has_pos0 for s in stats],
        "sliding_window": [s.sliding_window for s in stats],
        "vector_type": [s.vector_type for s in stats],
    }
    model_row = {**asdict(facts)}
    model_row.update(
        source=source,
        source_kind=origin["source_kind"],
        root_path=origin.get("root") or str(layout.root),
        repo_id=origin.get("repo_id"),
        revision=origin.get("revision"),
        source_fingerprint=fingerprint,
        n_files=len(stats),
        n_rows=report.n_rows,
        metadata_json=json.dumps(meta.metadata, sort_keys=True, default=str)
        if meta.metadata
        else None,
        ingested_at=dt.datetime.now(dt.UTC).replace(tzinfo=None),
    )
    import pyarrow as pa

    new_files = pa.table({k: files_cols[k] for k in ("layer", "head", "kind", "fingerprint")})
    drop_all, stale = False, []
    if old is not None:
        con.register("new_files", new_files)
        try:
            stale = con.execute(store.load_sql("stale_heads"), [facts.model_id]).fetchall()
        finally:
            con.unregister("new_files")
        old_ctx = con.execute(
            "SELECT context_length, bucket_size FROM models WHERE model_id = ?", [facts.model_id]
        ).fetchall()[0]
        drop_all = tuple(old_ctx) != (facts.context_length, facts.bucket_size)
        if confirm is not None:
            what = _results_to_drop(con, facts.model_id, None if drop_all else stale)
            if what:
                reason = (
                    "its context length or bucket size changed"
                    if drop_all
                    else f"the files of {len(stale)} head(s) changed or are gone"
                )
                confirm(f"re-ingesting {facts.model_id} drops computed results ({reason}): {what}")
    with store.transaction(con):
        if old is not None:
            if drop_all:
                store.delete_model(
                    con, facts.model_id, tables=[*store.COMPUTE_TABLES, "current_config"]
                )
            else:
                for layer, q_head in stale:
                    for table in store.COMPUTE_TABLES:
                        con.execute(
                            f"DELETE FROM {store.quote_ident(table)} WHERE model_id = ? AND layer = ? AND q_head = ?",
                            [facts.model_id, layer, q_head],
                        )
            store.delete_model(con, facts.model_id, tables=list(store.CATALOG_TABLES))
        store.insert_columns(con, "models", {k: [v] for k, v in model_row.items()})
        store.insert_columns(con, "files", files_cols)
        store.insert_columns(
            con, "heads", {"model_id": [facts.model_id] * len(heads["q_head"]), **heads}
        )
        store.insert_columns(
            con,
            "ingest_findings",
            {
                "model_id": [facts.model_id] * len(findings),
                "severity": [f.severity for f in findings],
                "file": [f.file for f in findings],
                "check": [f.check for f in findings],
                "detail": [f.detail for f in findings],
            },
        )
        if rope_rows:
            store.insert_columns(con, "rope_frequencies", rope_rows)
        store.rebuild_vectors_view(con)
    return report


def _results_to_drop(
    con: duckdb.DuckDBPyConnection, model_id: str, heads: list[tuple[int, int]] | None
) -> str:
    """What deleting the computed results of ``heads`` (None: all the model's heads) removes, in
    one line ("N head(s) computed; rows: table n, ..."), or "" when nothing is computed there."""
    import pyarrow as pa

    con.register(
        "_qkwh_drop_heads",
        pa.table(
            {
                "layer": pa.array([h[0] for h in heads or []], pa.int64()),
                "q_head": pa.array([h[1] for h in heads or []], pa.int64()),
            }
        ),
    )
    try:
        scope = (
            ""
            if heads is None
            else (
                " AND EXISTS (SELECT 1 FROM _qkwh_drop_heads AS d "
                "WHERE d.layer = t.layer AND d.q_head = t.q_head)"
            )
        )
        counts = {
            name: con.execute(
                f"SELECT count(*) FROM {store.quote_ident(name)} AS t WHERE model_id = ?{scope}",
                [model_id],
            ).fetchall()[0][0]
            for name in store.COMPUTE_TABLES
        }
        n_heads = con.execute(
            "SELECT count(*) FROM (SELECT DISTINCT layer, q_head FROM head_runs AS t "
            f"WHERE model_id = ?{scope})",
            [model_id],
        ).fetchall()[0][0]
    finally:
        con.unregister("_qkwh_drop_heads")
    if not sum(counts.values()):
        return ""
    rows = ", ".join(f"{t} {n:,}" for t, n in counts.items() if n)
    return f"{n_heads} computed head(s); rows: {rows}"


def _heads(stats: list[FileStats], ratio: int) -> dict[str, list]:
    by_key = {(s.file.layer, s.file.head, s.file.kind): s for s in stats}
    out: dict[str, list] = {
        "layer": [],
        "q_head": [],
        "k_head": [],
        "has_k_file": [],
        "n_q": [],
        "n_k": [],
    }
    for s in sorted(
        (s for s in stats if s.file.kind == "q"), key=lambda s: (s.file.layer, s.file.head)
    ):
        k_head = s.file.head // ratio
        k = by_key.get((s.file.layer, k_head, "k"))
        out["layer"].append(s.file.layer)
        out["q_head"].append(s.file.head)
        out["k_head"].append(k_head)
        out["has_k_file"].append(k is not None)
        out["n_q"].append(s.rows)
        out["n_k"].append(k.rows if k is not None else None)
    return out


@dataclass(frozen=True)
class RemovalPlan:
    """What ``remove`` deletes: rows per table (tables with rows only) and computed heads."""

    model_id: str
    rows: dict[str, int]
    heads_computed: int

    def summary(self) -> str:
        return (
            f"removing {self.model_id} deletes {sum(self.rows.values()):,} rows from {len(self.rows)} "
            f"table(s), {self.heads_computed} computed head(s) among them"
        )


def remove(
    model_id: str,
    *,
    warehouse: str | Path | None = None,
    confirm: Callable[[RemovalPlan], None] | None = None,
) -> dict[str, int]:
    """Remove a model and everything derived from it (every table with a model_id column).

    ``confirm``, when given, is called with the :class:`RemovalPlan` before anything is deleted;
    it raises to refuse, and then nothing is deleted.
    """
    from qkwh.errors import NotFoundError, unknown_names

    con = store.connect(warehouse)
    try:
        if con.execute("SELECT 1 FROM models WHERE model_id = ?", [model_id]).fetchone() is None:
            known = [r[0] for r in con.execute("SELECT model_id FROM models ORDER BY 1").fetchall()]
            raise NotFoundError(unknown_names("model", [model_id], known, " in the warehouse"))
        # every table with a model_id column (catalog, compute, dbt marts) except reference data:
        # the dbt seeds describe models whether or not they are ingested
        from qkwh.ablate.tables import count_model_run_rows, delete_model_run_rows
        from qkwh.paths import DBT_PROJECT_DIR

        seeds = {p.stem for p in (DBT_PROJECT_DIR / "seeds").glob("*.csv")}
        tables = [t for t in store.tables_with_column(con, "model_id") if t not in seeds]
        if confirm is not None:
            rows = {
                t: con.execute(
                    f"SELECT count(*) FROM {store.quote_ident(t)} WHERE model_id = ?",  # type: ignore[index]
                    [model_id],
                ).fetchone()[0]
                for t in tables
            }
            heads = con.execute(
                "SELECT count(*) FROM (SELECT DISTINCT layer, q_head FROM head_runs "  # type: ignore[index]
                "WHERE model_id = ?)",
                [model_id],
            ).fetchone()[0]
            rows.update(count_model_run_rows(con, model_id))
            confirm(RemovalPlan(model_id, {t: n for t, n in rows.items() if n}, heads))
        with store.transaction(con):
            # the ablation tables keyed by run_id first: ablation_runs names the model's runs
            counts = delete_model_run_rows(con, model_id)
            counts.update(store.delete_model(con, model_id, tables=tables))
            store.rebuild_vectors_view(con)
        return counts
    finally:
        con.close()
