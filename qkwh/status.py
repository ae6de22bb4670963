"""What the warehouse holds, per model: ingested, computed (per parameter set), built.

The marts are a snapshot, judged by what each table holds, never by timestamps.  ``qkwh build``
records the build it runs in ``mart_builds``: for each model, a hash of what the marts read (the
model's catalog row, with its source fingerprint, and the config_id, head count and last write of
each current parameter set; ``qkwh/sql/mart_inputs.sql``).  Every table dbt writes records, in the
transaction that writes it, the build it came from (``mart_relations``; the dbt project's
``macros/mart_provenance.sql``).  :func:`staleness` compares the build of every table with the
warehouse today: a table whose build read another state for a model (computed, re-ingested,
relabelled, switched to another set with ``qkwh runs use``, removed), or that no build recorded
(an interrupted or failed build, a dbt run outside qkwh, an older qkwh), makes the marts stale,
even when the state today is the one the last full build read.  ``qkwh status``, ``qkwh report``
and ``qkwh sql`` (on marts) use this one judgement.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from dataclasses import dataclass, field

import duckdb

from qkwh import store
from qkwh.analyses import registry
from qkwh.paths import DBT_PROJECT_DIR
from qkwh.runs import ParamSet, list_sets


@dataclass(frozen=True)
class Staleness:
    """Models whose marts do not match the warehouse, and when the marts were last built."""

    built_at: dt.datetime | None  # latest `qkwh build` a table still comes from (None: none)
    changed: tuple[str, ...] = ()  # computed, re-ingested or switched set since a table was built
    not_built: tuple[str, ...] = ()  # ingested after a table was built
    removed: tuple[str, ...] = ()  # in a table's build but no longer in the warehouse
    has_marts: bool = False
    unknown: tuple[
        str, ...
    ] = ()  # tables no finished `qkwh build` recorded (interrupted, outside qkwh)

    @property
    def stale(self) -> bool:
        return bool(self.changed or self.not_built or self.removed or self.unknown) or (
            self.has_marts and self.built_at is None
        )

    def message(self) -> str:
        """One line for a warning (empty when the marts are up to date)."""
        if not self.stale:
            return ""
        if not self.has_marts and self.built_at is None:
            return "no marts yet: run `qkwh build`"
        when = f"built {self.built_at:%Y-%m-%d %H:%M:%S} UTC" if self.built_at else "of unknown age"
        parts = []
        if self.changed:
            parts.append(f"results or catalog changed since for {', '.join(self.changed)}")
        if self.not_built:
            parts.append(f"not in them: {', '.join(self.not_built)}")
        if self.removed:
            parts.append(f"still holding removed {', '.join(self.removed)}")
        if self.unknown:
            shown = ", ".join(self.unknown[:3]) + (
                f" and {len(self.unknown) - 3} more" if len(self.unknown) > 3 else ""
            )
            parts.append(
                f"{len(self.unknown)} table(s) not written by a finished `qkwh build` ({shown}: an "
                "interrupted or failed build, or dbt run outside qkwh)"
            )
        detail = "; ".join(parts) or "no build recorded"
        return f"the marts are stale ({when}; {detail}): run `qkwh build`"


def _has_marts(con: duckdb.DuckDBPyConnection) -> bool:
    return "model_summary" in store.table_names(con)


def project_tables() -> set[str]:
    """The tables the dbt project writes (models of its table folders; staging models are views)."""
    models = DBT_PROJECT_DIR / "models"
    return {
        p.stem
        for folder in ("intermediate", "uncertainty", "marts")
        for p in (models / folder).glob("*")
        if p.suffix in (".sql", ".py")
    }


def _builds(con: duckdb.DuckDBPyConnection) -> tuple[dict[str, set], dict[str, tuple]]:
    """(table -> build ids recorded for it, build id -> (built_at, inputs or None))."""
    try:
        rels = con.execute("SELECT relation, build_id FROM mart_relations").fetchall()
        # a build still marked running is one a kill interrupted (dbt holds the file while it
        # runs): the tables it wrote hold what it read
        rows = con.execute(
            "SELECT build_id, built_at, inputs_json FROM mart_builds WHERE build_id IS NOT NULL"
        ).fetchall()
    except duckdb.Error:  # a warehouse no qkwh with mart_relations has written to
        return {}, {}
    recorded: dict[str, set] = {}
    for rel, bid in rels:
        recorded.setdefault(rel, set()).add(bid)
    return recorded, {bid: (at, json.loads(inputs)) for bid, at, inputs in rows}


def staleness(con: duckdb.DuckDBPyConnection, models: list[str] | None = None) -> Staleness:
    """Compare what each table dbt wrote was built from with the warehouse today (``models``:
    only these models)."""
    now = input_states(con)
    if models:
        now = {m: s for m, s in now.items() if m in models}
    has_marts = _has_marts(con)
    tables = snapshot_relations(con) & project_tables()
    if not tables:
        return Staleness(None, not_built=tuple(sorted(now)), has_marts=has_marts)
    recorded, builds = _builds(con)
    unknown, used = [], set()
    for table in sorted(tables):
        ids = recorded.get(table, set())
        bid = next(iter(ids)) if len(ids) == 1 else None
        if bid is None or bid not in builds or builds[bid][1] is None:
            unknown.append(table)
        else:
            used.add(bid)
    changed, not_built, removed = set(), set(), set()
    for bid in used:
        built = builds[bid][1]
        if models:
            built = {m: s for m, s in built.items() if m in models}
        changed |= {m for m in now if m in built and built[m] != now[m]}
        not_built |= {m for m in now if m not in built}
        removed |= {m for m in built if m not in now}
    return Staleness(
        max((builds[b][0] for b in used), default=None),
        changed=tuple(sorted(changed)),
        not_built=tuple(sorted(not_built)),
        removed=tuple(sorted(removed)),
        has_marts=has_marts,
        unknown=tuple(unknown),
    )


_PRUNE = (
    "DELETE FROM mart_builds WHERE NOT running AND (build_id IS NULL OR build_id NOT IN "
    "(SELECT build_id FROM mart_relations WHERE build_id IS NOT NULL))"
)


def start_build(con: duckdb.DuckDBPyConnection) -> str:
    """Record a build about to run: what the marts will read, marked running (the tables dbt
    writes record its id).  Builds an interrupted qkwh left running are closed first, and builds
    no table comes from any more are forgotten.  Returns the build id."""
    build_id = uuid.uuid4().hex
    started = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    states = input_states(con)
    with store.transaction(con):
        con.execute("UPDATE mart_builds SET running = false WHERE running")
        con.execute(_PRUNE)
        con.execute(
            "INSERT INTO mart_builds (build_id, built_at, inputs_json, running) VALUES (?, ?, ?, true)",
            [build_id, started, json.dumps(states, sort_keys=True)],
        )
    return build_id


def finish_build(con: duckdb.DuckDBPyConnection, build_id: str) -> None:
    """Close a build (whatever its outcome).  When the warehouse no longer holds the state the
    build recorded at its start (another process wrote before dbt took the file), its tables
    may hold either state: the build's inputs become unknown, so its tables count as stale."""
    states = input_states(con)
    with store.transaction(con):
        row = con.execute(
            "SELECT inputs_json FROM mart_builds WHERE build_id = ?", [build_id]
        ).fetchone()
        if row and json.loads(row[0]) != states:
            con.execute(
                "UPDATE mart_builds SET inputs_json = 'null' WHERE build_id = ?", [build_id]
            )
        con.execute("UPDATE mart_builds SET running = false WHERE build_id = ?", [build_id])
        con.execute(_PRUNE)


def input_states(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """model_id -> hash of what the marts read for it today (``qkwh/sql/mart_inputs.sql``)."""
    return {m: s for m, s, _, _ in con.execute(store.load_sql("mart_inputs")).fetchall()}


# -- which relations are dbt-built snapshots (the marts and intermediate tables) -------------------


_BOOKKEEPING = {"run_config", "current_config", "mart_builds", "mart_relations", "vectors"}


def snapshot_relations(con: duckdb.DuckDBPyConnection) -> set[str]:
    """Tables dbt wrote (marts and int_* tables; not seeds, not the stg_* views, which read the
    warehouse live)."""
    seeds = {p.stem for p in (DBT_PROJECT_DIR / "seeds").glob("*.csv")}
    rows = con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
        "AND table_type = 'BASE TABLE'"
    ).fetchall()
    own = set(store.CATALOG_TABLES + store.compute_tables()) | _BOOKKEEPING
    return {r[0] for r in rows} - own - seeds


def relations_in(query: str, names: set[str]) -> list[str]:
    """The names of ``names`` that ``query`` mentions (as whole identifiers)."""
    words = {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", query)}
    return sorted(n for n in names if n.lower() in words)


@dataclass
class ModelStatus:
    model_id: str
    n_files: int
    n_heads: int
    n_analysable: int
    ingested_at: dt.datetime | None
    sets: list[ParamSet] = field(default_factory=list)
    built: str = ""  # 'up to date' | 'stale' | 'not built'
    dataset: str | None = None  # the text the capture ran on (models.dataset)


def status(con: duckdb.DuckDBPyConnection) -> tuple[list[ModelStatus], Staleness]:
    st = staleness(con)
    sets = list_sets(con)
    out = []
    for m, n_files, n_heads, n_analysable, ingested_at, dataset in con.execute(
        _catalog_sql(con, "status_models")
    ).fetchall():
        if m in st.changed:
            built = "stale"
        elif m in st.not_built or not st.has_marts:
            built = "not built"
        elif st.unknown or st.built_at is None:
            built = "stale"
        else:
            built = "up to date"
        out.append(
            ModelStatus(
                m,
                n_files,
                n_heads,
                n_analysable,
                ingested_at,
                [s for s in sets if s.model_id == m],
                built,
                dataset,
            )
        )
    return out, st


# -- the tables of `qkwh models` and `qkwh status`: one column per registered analysis ----------


def _catalog_sql(con: duckdb.DuckDBPyConnection, name: str) -> str:
    """qkwh/sql/<name>.sql; on a warehouse created before ``models.dataset`` existed and opened
    read-only (so not migrated yet), the column reads as NULL."""
    con.execute("SET python_enable_replacements = false")  # a table name never finds a variable
    sql = store.load_sql(name)
    has = con.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'main' "
        "AND table_name = 'models' AND column_name = 'dataset'"
    ).fetchall()[0][0]
    return sql if has else sql.replace("m.dataset", "CAST(NULL AS VARCHAR) AS dataset")


def models_overview(con: duckdb.DuckDBPyConnection) -> tuple[list[str], list[tuple]]:
    """Columns and rows of `qkwh models`: the catalog counts, then per registered analysis the
    heads its current parameter set covers, then the warnings."""
    cur = con.execute(_catalog_sql(con, "models_overview"))
    cols = [d[0] for d in cur.description]
    rows = cur.fetchall()
    done = {(m, a): n for m, a, n in con.execute(store.load_sql("models_computed")).fetchall()}
    names = registry.names()
    at = cols.index("warnings")
    out = [(*r[:at], *(done.get((r[0], a), 0) for a in names), *r[at:]) for r in rows]
    return [*cols[:at], *names, *cols[at:]], out


def _sets_cell(sets: list[ParamSet]) -> str:
    cur = next((s for s in sets if s.is_current), None)
    text = (
        f"{cur.label}: {cur.n_heads}/{cur.n_analysable}" + (" PARTIAL" if cur.partial else "")
        if cur
        else "-"
    )
    others = len(sets) - (1 if cur else 0)
    return text + (f" (+{others} other set{'s' if others > 1 else ''})" if others else "")


def status_table(models: list[ModelStatus]) -> tuple[list[str], list[list[str]]]:
    """Columns and rows of `qkwh status`: per registered analysis, its current parameter set's
    heads of the analysable heads (and how many other sets are held)."""
    names = registry.names()
    rows = [
        [
            m.model_id,
            m.dataset or "",
            f"{m.ingested_at:%Y-%m-%d %H:%M}" if m.ingested_at else "",
            f"{m.n_heads} ({m.n_analysable})",
            *(_sets_cell([s for s in m.sets if s.analysis == a]) for a in names),
            m.built,
        ]
        for m in models
    ]
    return ["model_id", "dataset", "ingested (UTC)", "heads (analysable)", *names, "marts"], rows


def model_ids(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Every model id of the catalog, sorted."""
    return [m for (m,) in con.execute(store.load_sql("model_ids")).fetchall()]


def findings(
    con: duckdb.DuckDBPyConnection, model_id: str | None = None, include_info: bool = False
) -> list[tuple]:
    """The ingest findings (model_id, severity, check, file, detail) of ``model_id`` (None: every
    model), warnings and errors only unless ``include_info``; NotFoundError (exit 4) for a model
    the warehouse does not hold."""
    from qkwh.errors import NotFoundError, unknown_names

    known = model_ids(con)
    if model_id is not None and model_id not in known:
        raise NotFoundError(unknown_names("model", [model_id], known, " in the warehouse"))
    return con.execute(store.load_sql("findings"), [model_id, include_info]).fetchall()


@dataclass(frozen=True)
class IntervalContext:
    """What a model's intervals in ``model_metric_ci`` rest on (``qkwh compare`` explains a
    missing interval with it)."""

    model_id: str
    n_layers: int  # the most layers any metric has a value on
    documents: bool  # a document-group jackknife reaches its intervals


def interval_context(
    con: duckdb.DuckDBPyConnection, models: list[str]
) -> dict[str, IntervalContext]:
    """model_id -> :class:`IntervalContext` for the ``models`` found in ``model_metric_ci``."""
    rows = con.execute(store.load_sql("interval_context"), [models]).fetchall()
    return {m: IntervalContext(m, int(n or 0), bool(d)) for m, n, d in rows}


def min_layers() -> int:
    """The fewest layers the layer-cluster bootstrap draws from (the dbt var ``min_layers``)."""
    import yaml

    data = yaml.safe_load((DBT_PROJECT_DIR / "dbt_project.yml").read_text())
    return int(data["vars"]["min_layers"])
