"""Register a sniffed dataset in the warehouse (the input format: docs/input-format.md).

Everything is read and checked before the warehouse is touched; the catalog of the model is then
replaced in one transaction.  The same source twice changes nothing.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import duckdb

from qkwh import reach_inputs, rope_sources, store
from qkwh.errors import InputError, QkwhError, WriteFailedError, write_failure
from qkwh.ids import case_collision, check_model_id
from qkwh.models_csv import ModelEntry, load_registry, match
from qkwh.sniffed.layout import Layout, scan
from qkwh.sniffed.metadata import DatasetMetadata, read_metadata
from qkwh.sniffed.validate import FileStats, Finding, check_dataset, infer_bucket_size, scan_files


@dataclass(frozen=True)
class ModelFacts:
    """What the warehouse records of a model (columns of ``models``)."""

    model_id: str
    hf_model: str | None
    family: str | None
    label: str | None
    dataset: str | None
    params_b: float | None
    num_layers: int | None
    num_q_heads: int
    num_kv_heads: int
    gqa_ratio: int
    head_dim: int
    context_length: int
    context_length_rule: str
    bucket_size: int
    sampling_strategy: str
    rope_theta: float | None
    rope_scaling: str | None
    nope_layers: str | None
    cross_attention_layers: str | None
    checkpoint_phase: str | None
    checkpoint_step: int | None
    checkpoint_order: int | None
    study: str | None
    dataset_branch: str | None
    in_registry: bool


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


def resolve_facts(
    *,
    model_id: str | None,
    names: list[str],
    meta: DatasetMetadata,
    stats: list[FileStats],
    registry: dict[str, ModelEntry],
    source: str,
    family: str | None = None,
    label: str | None = None,
    dataset: str | None = None,
) -> tuple[ModelFacts, list[Finding]]:
    """Combine --model-id, the registry and the dataset metadata (docs/input-format.md#which-model-and-its-facts).

    ``family`` and ``label`` (``--family`` / ``--label``) name the model in reports; given, they
    win over the registry (a different registry family is recorded as a warning).  ``dataset``
    (``--dataset``) names the text the capture ran on; else the capture metadata's
    (:func:`metadata_dataset`).
    """
    findings: list[Finding] = []
    family = (family or "").strip() or None
    label = (label or "").strip() or None
    dataset = (dataset or "").strip() or None
    entry = (
        registry.get(model_id)
        if model_id
        else match(
            registry,
            candidates=[*names, meta.get_str("dataset_branch") or ""],
            hf_model=meta.model_name,
        )
    )
    if model_id is None:
        if entry is None:
            same = sorted(
                m for m, e in registry.items() if meta.model_name and e.hf_model == meta.model_name
            )
            raise InputError(
                f"{source}: unknown model (not in configs/models.csv by branch, folder name or "
                f"model name {meta.model_name!r}"
                + (f", which fits several entries: {', '.join(same)}" if len(same) > 1 else "")
                + "); pass --model-id ID"
            )
        model_id = entry.model_id

    # head counts: metadata first, then the registry
    n_q = meta.get_int("head_sampling_num_query_heads", "num_attention_heads")
    n_kv = meta.get_int("head_sampling_num_key_heads", "num_key_value_heads")
    if entry is not None:
        for name, ours, theirs in (
            ("num_q_heads", n_q, entry.num_q_heads),
            ("num_kv_heads", n_kv, entry.num_kv_heads),
        ):
            if ours is not None and theirs is not None and ours != theirs:
                findings.append(
                    Finding(
                        "warning",
                        None,
                        "registry_mismatch",
                        f"{name}: dataset metadata says {ours}, registry says {theirs}; using metadata",
                    )
                )
        n_q = n_q if n_q is not None else entry.num_q_heads
        n_kv = n_kv if n_kv is not None else entry.num_kv_heads
    if n_q is None or n_kv is None:
        raise InputError(
            f"{source}: cannot tell the number of query and key heads (no _saver_state.json "
            f"head_sampling_num_query_heads/_key_heads and no registry entry for {model_id!r})"
        )
    if n_kv <= 0 or n_q % n_kv:
        raise InputError(f"{source}: {n_q} query heads are not a multiple of {n_kv} key heads")
    ratio = n_q // n_kv
    d = stats[0].d

    strategy = meta.sampling_strategy()
    if entry is not None and entry.bucket_size:
        bucket_size, bucket_rule = entry.bucket_size, "registry"
        meta_m = meta.get_int("sampling_bucket_size", "sampling_min_bucket_size")
        if meta_m is not None and meta_m != entry.bucket_size:
            findings.append(
                Finding(
                    "warning",
                    None,
                    "registry_mismatch",
                    f"bucket size: metadata says {meta_m}, registry says {entry.bucket_size}; using registry",
                )
            )
    else:
        bucket_size = meta.get_int("sampling_bucket_size", "sampling_min_bucket_size")  # type: ignore[assignment]
        bucket_rule = "metadata"
        if bucket_size is None:
            bucket_size, bucket_rule = infer_bucket_size(stats), "data"
            if bucket_size is None:
                raise InputError(
                    f"{source}: cannot tell the bucket size (no metadata, no registry entry, "
                    "and the bucket ids fit no uniform bucket size)"
                )
    if bucket_rule != "registry":
        findings.append(
            Finding("info", None, "bucket_size", f"bucket size {bucket_size} from {bucket_rule}")
        )

    max_pos = max((s.max_position for s in stats if s.max_position is not None), default=0)
    max_bucket = max((s.max_bucket for s in stats if s.max_bucket is not None), default=0)
    if entry is not None and entry.context_length:
        l_ctx, rule = entry.context_length, "registry"
    elif meta.get_int("tokenizer_max_length", "max_length"):
        l_ctx, rule = meta.get_int("tokenizer_max_length", "max_length"), "metadata"  # type: ignore[assignment]
    elif bucket_rule == "metadata" and strategy != "log_uniform":
        l_ctx, rule = (max_bucket + 1) * bucket_size, "metadata_buckets"
    else:
        l_ctx, rule = max_pos + 1, "max_position"

    e = entry
    facts = ModelFacts(
        model_id=model_id,
        hf_model=meta.model_name or (e.hf_model if e else None),
        family=family or (e.family if e else None),
        label=label,
        dataset=dataset or metadata_dataset(meta),
        params_b=e.params_b if e else None,
        num_layers=(e.num_layers if e else None)
        or meta.get_int("num_hidden_layers", "head_sampling_num_layers"),
        num_q_heads=n_q,
        num_kv_heads=n_kv,
        gqa_ratio=ratio,
        head_dim=d,
        context_length=int(l_ctx),
        context_length_rule=rule,
        bucket_size=int(bucket_size),
        sampling_strategy=strategy,
        rope_theta=(e.rope_theta if e else None) or _float(meta.metadata.get("rope_theta")),
        rope_scaling=e.rope_scaling if e else meta.get_str("rope_type"),
        nope_layers=e.nope_layers if e else None,
        cross_attention_layers=e.cross_attention_layers if e else None,
        checkpoint_phase=e.checkpoint_phase if e else None,
        checkpoint_step=e.checkpoint_step if e else None,
        checkpoint_order=e.checkpoint_order if e else None,
        study=e.study if e else None,
        dataset_branch=(e.dataset_branch if e else None) or meta.get_str("dataset_branch"),
        in_registry=e is not None,
    )
    if e is not None and family and e.family and family != e.family:
        findings.append(
            Finding(
                "warning",
                None,
                "registry_mismatch",
                f"family: --family says {family}, registry says {e.family}; using --family",
            )
        )
    if e is not None and e.head_dim and e.head_dim != d:
        findings.append(
            Finding(
                "warning",
                None,
                "registry_mismatch",
                f"head_dim: files have {d}, registry says {e.head_dim}",
            )
        )
    return facts, findings


def metadata_dataset(meta: DatasetMetadata) -> str | None:
    """The text a capture ran on, as its metadata records it: ``dataset`` when given, else
    ``source_dataset`` (what `qkwh capture` writes: a Hub dataset id, a file name, or a label)
    with ``/dataset_name`` (the Hub subset) when there is one; None when neither is recorded."""
    explicit = meta.get_str("dataset")
    if explicit:
        return explicit.strip() or None
    source = (meta.get_str("source_dataset") or "").strip()
    if not source:
        return None
    subset = (meta.get_str("dataset_name") or "").strip()
    return f"{source}/{subset}" if subset else source


def _float(v) -> float | None:
    try:
        return float(v) if v not in (None, "") else None
    except (TypeError, ValueError):
        return None


def source_fingerprint(stats: list[FileStats], facts: ModelFacts, rope: dict | None = None) -> str:
    """Hash of the files, the facts and the resolved RoPE frequency rows (a frequency source that
    appears later, e.g. a config.json now cached, makes the same files ingest again)."""
    h = hashlib.sha256()
    for s in sorted(stats, key=lambda s: s.file.config_name):
        h.update(f"{s.file.config_name}:{s.fingerprint}:{s.file.path}\n".encode())
    h.update(json.dumps(asdict(facts), sort_keys=True, default=str).encode())
    h.update(json.dumps(rope, sort_keys=True, default=repr).encode())
    return h.hexdigest()[:32]


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


@dataclass
class BranchOutcome:
    """What happened to one source of :func:`ingest_many`."""

    source: str
    report: IngestReport | None = None  # None when skipped or failed
    error: QkwhError | None = None
    skipped: bool = False  # its Hub commit is the one already cataloged


def expand_sources(
    sources: list[str], *, all_branches: bool = False
) -> list[tuple[str, str | None]]:
    """(source, its branch's current commit or None) for every source; ``all_branches`` turns each
    ``hf://datasets/OWNER/NAME`` into all its branches (one Hub call per repo, branches by name)."""
    from qkwh.sniffed.hub import parse_hub_source
    from qkwh.sniffed.remote import branch_uri, list_branches

    out: list[tuple[str, str | None]] = []
    refs: dict[str, dict[str, str]] = {}
    for source in sources:
        hub = parse_hub_source(source)
        if hub is None:
            if all_branches:
                raise InputError(
                    f"{source}: --all-branches needs a Hub dataset, hf://datasets/OWNER/NAME"
                )
            out.append((source, None))
            continue
        if all_branches and "@" in source:
            raise InputError(f"{source}: --all-branches takes the repo without @BRANCH")
        if hub.repo_id not in refs:
            refs[hub.repo_id] = list_branches(hub)
        if all_branches:
            out += [
                (branch_uri(replace(hub, revision=name)), commit)
                for name, commit in refs[hub.repo_id].items()
            ]
        else:
            out.append((source, refs[hub.repo_id].get(hub.revision)))
    return out


def _cataloged_commit(con: duckdb.DuckDBPyConnection, source: str, *, remote: bool) -> str | None:
    """The Hub commit a branch was cataloged at, as the same kind of source (else None)."""
    from qkwh.sniffed.hub import parse_hub_source

    hub = parse_hub_source(source)
    assert hub is not None  # an hf:// source
    row = con.execute(
        "SELECT root_path FROM models WHERE repo_id = ? AND revision = ? AND source_kind = ?",
        [hub.repo_id, hub.revision, "hub_remote" if remote else "hub"],
    ).fetchone()
    if row is None:
        return None
    # remote: hf://datasets/OWNER/NAME@COMMIT; downloaded: .../snapshots/COMMIT
    return row[0].rsplit("@", 1)[-1] if remote else Path(row[0]).name


def ingest_many(
    sources: list[str],
    *,
    all_branches: bool = False,
    remote: bool = False,
    warehouse: str | Path | None = None,
    cache_dir: Path | None = None,
    registry: dict[str, ModelEntry] | None = None,
    on_start: Callable[[int], None] | None = None,
    on_source: Callable[[str], None] | None = None,
    on_done: Callable[[BranchOutcome], None] | None = None,
    on_progress: Callable[[str], None] | None = None,
    confirm: Callable[[str], None] | None = None,
) -> list[BranchOutcome]:
    """Ingest several sources (or every branch of Hub datasets), each in its own transaction.

    A Hub branch whose commit is the one already cataloged (by the same kind of ingest) is
    skipped without reading it; a source that fails is reported and the others go on.  The model
    id of each branch comes from the registry (``--model-id`` names one model, so it is not taken).
    """
    registry = registry if registry is not None else load_registry()
    todo = expand_sources(sources, all_branches=all_branches)
    if on_start:
        on_start(len(todo))
    outcomes: list[BranchOutcome] = []
    for source, commit in todo:
        if on_source:
            on_source(source)
        outcome = BranchOutcome(source)
        try:
            if commit is not None:
                con = store.connect(warehouse)
                try:
                    outcome.skipped = _cataloged_commit(con, source, remote=remote) == commit
                finally:
                    con.close()
            if not outcome.skipped:
                outcome.report = ingest(
                    source,
                    warehouse=warehouse,
                    cache_dir=cache_dir,
                    registry=registry,
                    on_progress=on_progress,
                    remote=remote,
                    confirm=confirm,
                )
        except QkwhError as exc:
            outcome.error = exc
        outcomes.append(outcome)
        if on_done:
            on_done(outcome)
    return outcomes


def _rope_rows(
    meta: DatasetMetadata,
    stats: list[FileStats],
    facts: ModelFacts,
    registry: dict[str, ModelEntry],
    *,
    hub: bool,
) -> tuple[dict | None, list[Finding]]:
    """Rows of ``rope_frequencies`` for the captured layers (None when unknown) and the finding
    saying where they came from or what is missing (qkwh.rope_sources); never fails the ingest."""
    entry = registry.get(facts.model_id) if facts.in_registry else None
    resolved, findings = rope_sources.resolve(
        meta=meta,
        layers={s.file.layer for s in stats},
        head_dim=facts.head_dim,
        rope_theta=facts.rope_theta,
        rope_type=meta.get_str("rope_type") or facts.rope_scaling,
        nope_layers=facts.nope_layers,
        hf_model=facts.hf_model,
        hf_revision=entry.hf_revision if entry else None,
        allow_download=hub,
    )
    if resolved is None:
        return None, findings
    return resolved.rows(
        facts.model_id,
        head_dim=facts.head_dim,
        bucket_size=facts.bucket_size,
        context_length=facts.context_length,
    ), findings


def _metadata_findings(meta: DatasetMetadata, stats: list[FileStats]) -> list[Finding]:
    out: list[Finding] = []
    if not meta.sources:
        out.append(
            Finding(
                "info",
                None,
                "metadata",
                "no _saver_state.json or dataset card; facts from registry/data",
            )
        )
    n_q_files = sum(1 for s in stats if s.file.kind == "q")
    selected = meta.get_int("head_sampling_selected_query_heads")
    if selected is not None and selected != n_q_files:
        out.append(
            Finding(
                "info",
                None,
                "head_count",
                f"metadata selected {selected} query heads; the folder holds {n_q_files} q files",
            )
        )
    if meta.bucket_counts:
        total_meta = sum(meta.bucket_counts.values())
        total = sum(s.rows for s in stats)
        if total_meta != total:
            out.append(
                Finding(
                    "info",
                    None,
                    "bucket_counts",
                    f"metadata bucket_counts sum to {total_meta:,} rows; files hold {total:,}",
                )
            )
    return out


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
