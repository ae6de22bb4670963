"""What the warehouse holds, per model: ingested, computed (per parameter set), built.

The marts are a snapshot: ``qkwh build`` records in ``mart_builds``, for each model, a hash of
what it read (the model's catalog row and the per-head results of its current parameter sets,
``qkwh/sql/mart_inputs.sql``).  :func:`stale_models` compares it with today's: a model computed,
re-ingested, relabelled, switched to another set (``qkwh runs use``) or removed since the last
full build has stale marts.  ``qkwh report`` and ``qkwh sql`` (on marts) warn about them.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field

import duckdb

from qkwh import store
from qkwh.analyses import registry
from qkwh.paths import DBT_PROJECT_DIR
from qkwh.runs import ParamSet, list_sets


@dataclass(frozen=True)
class Staleness:
    """Models whose marts do not match the warehouse, and when the marts were last built."""

    built_at: dt.datetime | None  # last full `qkwh build` (None: never, or by an older qkwh)
    changed: tuple[str, ...] = ()  # computed, re-ingested or switched set since the build
    not_built: tuple[str, ...] = ()  # ingested after the build
    removed: tuple[str, ...] = ()  # in the marts but no longer in the warehouse
    has_marts: bool = False

    @property
    def stale(self) -> bool:
        return bool(self.changed or self.not_built or self.removed) or (self.has_marts and self.built_at is None)

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
        detail = "; ".join(parts) or "no build recorded"
        return f"the marts are stale ({when}; {detail}): run `qkwh build`"


def _has_marts(con: duckdb.DuckDBPyConnection) -> bool:
    return "model_summary" in store.table_names(con)


def staleness(con: duckdb.DuckDBPyConnection, models: list[str] | None = None) -> Staleness:
    """Compare what the marts were built from with the warehouse today (``models``: only these)."""
    now = {m: s for m, s, _, _ in con.execute(store.load_sql("mart_inputs")).fetchall()}
    try:
        last = con.execute("SELECT built_at, inputs_json FROM mart_builds ORDER BY built_at DESC LIMIT 1").fetchone()
    except duckdb.CatalogException:  # a warehouse no qkwh with mart_builds has written to
        last = None
    built = {m: (s, last[0]) for m, s in json.loads(last[1]).items()} if last else {}
    if models:
        now = {m: s for m, s in now.items() if m in models}
        built = {m: v for m, v in built.items() if m in models}
    built_at = max((t for _, t in built.values()), default=None)
    has_marts = _has_marts(con)
    if not has_marts and not built:
        return Staleness(None, not_built=tuple(sorted(now)), has_marts=False)
    return Staleness(
        built_at,
        changed=tuple(sorted(m for m in now if m in built and built[m][0] != now[m])),
        not_built=tuple(sorted(m for m in now if m not in built)) if built else (),
        removed=tuple(sorted(m for m in built if m not in now)),
        has_marts=has_marts,
    )


def record_build(con: duckdb.DuckDBPyConnection, started_at: dt.datetime, states: dict[str, str]) -> None:
    """Replace mart_builds with the inputs the build read (``states``, taken before it ran)."""
    with store.transaction(con):
        con.execute("DELETE FROM mart_builds")
        con.execute("INSERT INTO mart_builds VALUES (?, ?)", [started_at, json.dumps(states, sort_keys=True)])


def input_states(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    return {m: s for m, s, _, _ in con.execute(store.load_sql("mart_inputs")).fetchall()}


# -- which relations are dbt-built snapshots (the marts and intermediate tables) -------------------


_BOOKKEEPING = {"run_config", "current_config", "mart_builds", "vectors"}


def snapshot_relations(con: duckdb.DuckDBPyConnection) -> set[str]:
    """Tables dbt wrote (marts and int_* tables; not seeds, not the stg_* views, which read the
    warehouse live)."""
    seeds = {p.stem for p in (DBT_PROJECT_DIR / "seeds").glob("*.csv")}
    rows = con.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
                       "AND table_type = 'BASE TABLE'").fetchall()
    own = set(store.CATALOG_TABLES + store.compute_tables()) | _BOOKKEEPING
    return {r[0] for r in rows} - own - seeds


def relations_in(query: str, names: set[str]) -> list[str]:
    """The names of ``names`` that ``query`` mentions (as whole identifiers)."""
    words = {w.lower() for w in re.findall(r'[A-Za-z_][A-Za-z0-9_]*', query)}
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


def status(con: duckdb.DuckDBPyConnection) -> tuple[list[ModelStatus], Staleness]:
    st = staleness(con)
    sets = list_sets(con)
    out = []
    for m, n_files, n_heads, n_analysable, ingested_at in con.execute(store.load_sql("status_models")).fetchall():
        if m in st.changed:
            built = "stale"
        elif m in st.not_built or not st.has_marts:
            built = "not built"
        elif st.built_at is None:
            built = "unknown age"
        else:
            built = "up to date"
        out.append(ModelStatus(m, n_files, n_heads, n_analysable, ingested_at,
                               [s for s in sets if s.model_id == m], built))
    return out, st


# -- the tables of `qkwh models` and `qkwh status`: one column per registered analysis ----------


def models_overview(con: duckdb.DuckDBPyConnection) -> tuple[list[str], list[tuple]]:
    """Columns and rows of `qkwh models`: the catalog counts, then per registered analysis the
    heads its current parameter set covers, then the warnings."""
    cur = con.execute(store.load_sql("models_overview"))
    cols = [d[0] for d in cur.description]
    rows = cur.fetchall()
    done = {(m, a): n for m, a, n in con.execute(store.load_sql("models_computed")).fetchall()}
    names = registry.names()
    at = cols.index("warnings")
    out = [(*r[:at], *(done.get((r[0], a), 0) for a in names), *r[at:]) for r in rows]
    return [*cols[:at], *names, *cols[at:]], out


def _sets_cell(sets: list[ParamSet]) -> str:
    cur = next((s for s in sets if s.is_current), None)
    text = f"{cur.label}: {cur.n_heads}/{cur.n_analysable}" + (" PARTIAL" if cur.partial else "") if cur else "-"
    others = len(sets) - (1 if cur else 0)
    return text + (f" (+{others} other set{'s' if others > 1 else ''})" if others else "")


def status_table(models: list[ModelStatus]) -> tuple[list[str], list[list[str]]]:
    """Columns and rows of `qkwh status`: per registered analysis, its current parameter set's
    heads of the analysable heads (and how many other sets are held)."""
    names = registry.names()
    rows = [[m.model_id, f"{m.ingested_at:%Y-%m-%d %H:%M}" if m.ingested_at else "",
             f"{m.n_heads} ({m.n_analysable})",
             *(_sets_cell([s for s in m.sets if s.analysis == a]) for a in names), m.built]
            for m in models]
    return ["model_id", "ingested (UTC)", "heads (analysable)", *names, "marts"], rows
