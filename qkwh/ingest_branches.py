"""Ingest several sources at once, or every branch of Hub datasets (``qkwh ingest`` with more
than one source or ``--all-branches``): each source in its own transaction through
:func:`qkwh.ingest.ingest`, a branch already cataloged at its current commit skipped unread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import duckdb

from qkwh import store
from qkwh.errors import InputError, QkwhError
from qkwh.ingest import IngestReport, ingest
from qkwh.models_csv import ModelEntry, load_registry


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
