"""Parameter sets: list, choose, compare and drop the sets of per-head results a warehouse keeps.

Every per-head row carries the ``config_id`` of its parameter set (one per analysis: the
analysis' parameters plus the code version), and config_id is part of every per-head key, so a
sweep keeps its sets side by side.  ``current_config`` names, for each (model, analysis), the
set the marts report; ``qkwh compute`` makes the set it computes current (unless
``--keep-current``), :func:`use` makes any held set current.  A set is referred to by its name
(``qkwh compute --name``), its config_id, or a unique prefix of it (at least 4 characters).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from qkwh import store
from qkwh.analyses import registry
from qkwh.errors import InputError, NotFoundError, QkwhError, unknown_names
from qkwh.params import RunConfig


@dataclass(frozen=True)
class ParamSet:
    """One parameter set of one model and analysis, as `qkwh runs` lists it."""

    model_id: str
    analysis: str
    config_id: str
    name: str | None
    n_heads: int  # heads with rows of this set
    n_analysable: int  # heads of the model with a q and a k file
    partial: bool  # fewer heads than analysable (an interrupted or restricted compute)
    is_current: bool  # the set the marts report
    created_at: dt.datetime | None
    last_computed_at: dt.datetime | None
    code_version: str | None
    params: dict

    @property
    def label(self) -> str:
        return self.name or self.config_id


def list_sets(con: duckdb.DuckDBPyConnection, models: list[str] | None = None) -> list[ParamSet]:
    try:
        rows = con.execute(store.load_sql("runs_list"), [models or None]).fetchall()
    except duckdb.BinderException:  # run_config without `name`: opened read-only, never migrated
        raise QkwhError(
            "this warehouse was written by an older qkwh: open it once for writing (e.g. "
            "`qkwh build`, or `qkwh compute`) to migrate it, then retry"
        ) from None
    return [ParamSet(*r[:-1], params=json.loads(r[-1]) if r[-1] else {}) for r in rows]  # type: ignore[misc]


def _existing(warehouse: str | Path | None) -> Path:
    """The warehouse file, which must exist (commands on parameter sets never create one)."""
    wh = store.resolve_warehouse(warehouse)
    if not wh.is_file():
        raise NotFoundError(
            f"no warehouse at {wh}: run `qkwh ingest SOURCE` first, or pass --warehouse "
            "(or set $QKWH_WAREHOUSE)"
        )
    return wh


def resolve(con: duckdb.DuckDBPyConnection, ref: str) -> dict[str, str]:
    """analysis -> config_id of the set ``ref`` (a name, a config_id or a unique prefix of one).

    Resolution order: a name; then an exact config_id; then a unique config_id prefix of at
    least 4 characters.  Names never look like config_ids (:func:`check_name`); a hex-looking
    name an older qkwh accepted is tried last, so ``ref`` hex digits always mean a config_id.

    Raises :class:`NotFoundError` naming the known sets when nothing matches, and
    :class:`InputError` when a prefix is ambiguous.
    """
    named = con.execute(
        "SELECT analysis, config_id FROM run_config WHERE name = ?", [ref]
    ).fetchall()
    if named and not looks_like_config_id(ref):
        return dict(named)
    exact = con.execute(
        "SELECT analysis, config_id FROM run_config WHERE config_id = ?", [ref]
    ).fetchall()
    if exact:
        return dict(exact)
    if len(ref) >= 4:
        hits = con.execute(
            "SELECT analysis, config_id FROM run_config WHERE starts_with(config_id, ?)", [ref]
        ).fetchall()
        if len(hits) == 1:
            return dict(hits)
        if len(hits) > 1:
            raise InputError(
                f"parameter set {ref!r} is ambiguous: {', '.join(sorted(c for _, c in hits))}"
            )
    if named:  # a hex-looking name given before such names were refused, and no config_id matches
        return dict(named)
    known = [
        k
        for (k,) in con.execute(
            "SELECT coalesce(name, config_id) FROM run_config ORDER BY created_at"
        ).fetchall()
    ]
    raise NotFoundError(unknown_names("parameter set", [ref], known) + "; see `qkwh runs`")


def config_of(con: duckdb.DuckDBPyConnection, ref: str) -> RunConfig:
    """The RunConfig a set was computed with (to compute more heads of it: `compute --name`)."""
    ids = resolve(con, ref)
    merged: dict = {}
    for (params,) in con.execute(
        "SELECT params_json FROM run_config WHERE list_contains(?, config_id)", [list(ids.values())]
    ).fetchall():
        for key, value in json.loads(params).items():
            merged[key] = value
    return RunConfig.from_dict(merged)


def _models_with(
    con: duckdb.DuckDBPyConnection, ids: dict[str, str], models: list[str] | None
) -> list[tuple[str, str, str]]:
    rows = con.execute(
        "SELECT DISTINCT model_id, analysis, config_id FROM head_runs "
        "WHERE list_contains(?, config_id) AND (? IS NULL OR list_contains(?, model_id)) "
        "ORDER BY 1, 2",
        [list(ids.values()), models or None, models or None],
    ).fetchall()
    return [tuple(r) for r in rows]


def use(
    warehouse: str | Path | None,
    ref: str,
    models: list[str] | None = None,
    analyses: list[str] | None = None,
) -> list[tuple[str, str, str]]:
    """Make the set ``ref`` current (the one the marts report) for every model holding rows of it
    (or only ``models``), for its analyses (or only ``analyses``).  Run `qkwh build` afterwards.

    Returns the (model_id, analysis, config_id) made current.  A model asked for that holds no
    row of the set raises :class:`NotFoundError`; nothing is changed then (and a missing
    warehouse file is not created).
    """
    con = store.connect(_existing(warehouse))
    try:
        ids = resolve(con, ref)
        if analyses:
            ids = {a: c for a, c in ids.items() if a in analyses}
            if not ids:
                raise NotFoundError(f"parameter set {ref!r} has no {'/'.join(analyses)} results")
        hits = _models_with(con, ids, models)
        missing = sorted(set(models or []) - {m for m, _, _ in hits})
        if missing or not hits:
            raise NotFoundError(
                f"no heads of parameter set {ref!r} in "
                f"{', '.join(missing) if missing else 'the warehouse'}"
            )
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        with store.transaction(con):
            con.executemany(
                store.load_sql("set_current_config"), [[m, a, c, now] for m, a, c in hits]
            )
        return hits
    finally:
        con.close()


def drop_plan(
    con: duckdb.DuckDBPyConnection, ref: str, models: list[str] | None = None
) -> dict[str, int]:
    """Rows that dropping ``ref`` (in ``models``, default all) would delete, per table.

    Raises :class:`QkwhError` when the set is current for a model in scope: the marts would
    lose that model's results, so another set must be made current first.
    """
    ids = resolve(con, ref)
    current = con.execute(
        "SELECT model_id, analysis FROM current_config WHERE list_contains(?, config_id) "
        "AND (? IS NULL OR list_contains(?, model_id)) ORDER BY 1, 2",
        [list(ids.values()), models or None, models or None],
    ).fetchall()
    if current:
        where = ", ".join(f"{m} ({a})" for m, a in current)
        raise InputError(
            f"parameter set {ref!r} is the current set of {where}: the marts read it. Make another "
            "set current first (`qkwh runs use OTHER`), then drop this one"
        )
    counts: dict[str, int] = {}
    for analysis, cid in ids.items():
        for table in (*registry.get(analysis).table_names, "head_runs"):
            n = con.execute(
                f"SELECT count(*) FROM {store.quote_ident(table)} WHERE config_id = ? "  # type: ignore[index]
                "AND (? IS NULL OR list_contains(?, model_id))",
                [cid, models or None, models or None],
            ).fetchone()[0]
            counts[table] = counts.get(table, 0) + n
    return counts


def drop(warehouse: str | Path | None, ref: str, models: list[str] | None = None) -> dict[str, int]:
    """Delete the rows of the set ``ref`` (in ``models``, default every model), in one transaction.

    The set's run_config rows go too once no model holds rows of it.  Refuses (see
    :func:`drop_plan`) a set that is current anywhere in scope.  Returns rows deleted per table.
    """
    con = store.connect(_existing(warehouse))
    try:
        counts = drop_plan(con, ref, models)
        ids = resolve(con, ref)
        if not sum(counts.values()) and models:
            raise NotFoundError(f"no heads of parameter set {ref!r} in {', '.join(models)}")
        with store.transaction(con):
            for analysis, cid in ids.items():
                for table in (*registry.get(analysis).table_names, "head_runs"):
                    con.execute(
                        f"DELETE FROM {store.quote_ident(table)} WHERE config_id = ? "
                        "AND (? IS NULL OR list_contains(?, model_id))",
                        [cid, models or None, models or None],
                    )
                con.execute(
                    "DELETE FROM run_config WHERE config_id = ? AND NOT EXISTS "
                    "(SELECT 1 FROM head_runs WHERE config_id = ?) AND NOT EXISTS "
                    "(SELECT 1 FROM current_config WHERE config_id = ?)",
                    [cid, cid, cid],
                )
        return counts
    finally:
        con.close()


def _flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


@dataclass(frozen=True)
class SetDiff:
    analysis: str
    config_a: str | None
    config_b: str | None
    params: list[tuple[str, object, object]]  # (parameter, value in A, value in B) that differ
    code_a: str | None
    code_b: str | None
    # an analysis only one set covers: that set's parameters of the analysis (name -> value)
    only_params: dict[str, object] = field(default_factory=dict)


def diff(con: duckdb.DuckDBPyConnection, ref_a: str, ref_b: str) -> list[SetDiff]:
    """Per analysis, the parameters (and code version) in which sets ``ref_a`` and ``ref_b`` differ."""
    a, b = resolve(con, ref_a), resolve(con, ref_b)
    info = {
        cid: (code, json.loads(p))
        for cid, code, p in con.execute(
            "SELECT config_id, code_version, params_json FROM run_config WHERE list_contains(?, config_id)",
            [list(a.values()) + list(b.values())],
        ).fetchall()
    }
    out = []
    for analysis in sorted(set(a) | set(b)):
        ca, cb = a.get(analysis), b.get(analysis)
        pa_ = _flatten(info[ca][1]) if ca else {}
        pb_ = _flatten(info[cb][1]) if cb else {}
        changed = [
            (k, pa_.get(k), pb_.get(k))
            for k in sorted(set(pa_) | set(pb_))
            if pa_.get(k) != pb_.get(k)
        ]
        only = (
            {}
            if ca and cb
            else {k: v for k, v in sorted((pa_ or pb_).items()) if k.startswith(f"{analysis}.")}
        )
        out.append(
            SetDiff(
                analysis,
                ca,
                cb,
                changed,
                info[ca][0] if ca else None,
                info[cb][0] if cb else None,
                only,
            )
        )
    return out


def looks_like_config_id(ref: str) -> bool:
    """Whether ``ref`` could be a config_id or a prefix :func:`resolve` accepts (4 or more hex
    digits)."""
    return re.fullmatch(r"[0-9a-fA-F]{4,}", ref or "") is not None


def check_name(name: str) -> str:
    """A set name is an identifier: letters, digits, '.', '_', '-' (at most 64 characters), and
    never something that reads as a config_id or a prefix of one (4 or more hex digits, e.g.
    ``d717`` or ``2024``), so a name can never hide a config_id."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", name or ""):
        raise InputError(
            f"parameter-set name {name!r}: use letters, digits, '.', '_' and '-' "
            "(starting with a letter or digit, at most 64 characters)"
        )
    if looks_like_config_id(name):
        raise InputError(
            f"parameter-set name {name!r} reads as a config_id prefix (only hex digits): "
            "choose a name with another letter, e.g. 'run-" + name + "'"
        )
    return name


__all__ = [
    "ParamSet",
    "SetDiff",
    "check_name",
    "config_of",
    "diff",
    "drop",
    "drop_plan",
    "list_sets",
    "resolve",
    "use",
    "QkwhError",
]


def set_names(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """config_id -> name of every named parameter set."""
    return dict(con.execute(store.load_sql("run_config_names")).fetchall())


def has_set(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Whether a parameter set is called ``name``."""
    return con.execute(store.load_sql("run_config_named"), [name]).fetchone() is not None


def heads_with_configs(
    con: duckdb.DuckDBPyConnection, models: list[str] | None, config_ids: list[str]
) -> int:
    """Heads of ``models`` (None: all) holding rows of any of ``config_ids``."""
    row = con.execute(store.load_sql("heads_with_configs"), [models or None, config_ids]).fetchone()
    return int(row[0]) if row else 0


def most_documents(con: duckdb.DuckDBPyConnection, models: list[str] | None) -> int | None:
    """The most documents (examples) any one file of ``models`` (None: all) holds, or None when
    there is no file: the document-group jackknife cannot use more groups than this."""
    counts = [
        n for _, n in con.execute(store.load_sql("models_examples"), [models or None]).fetchall()
    ]
    return max((int(n) for n in counts if n is not None), default=None)
