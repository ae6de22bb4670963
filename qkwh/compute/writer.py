"""Write computed heads: every table of every analysis they ran, in one transaction.

The unit of writing is a unit of work (the heads sharing a k file): its heads are written
together, each head whole, so an interrupted run never leaves part of a head.  Rows of a table
are inserted with one statement per batch, and old rows are deleted only for heads that had
results before (a fresh run deletes nothing).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping

import duckdb
import numpy as np

from qkwh import store
from qkwh.compute import registry
from qkwh.compute.work import HeadOutcome
from qkwh.params import RunConfig



def __getattr__(name: str):
    """``ANALYSIS_TABLES``: analysis -> its output tables, read from the analysis registry."""
    if name == "ANALYSIS_TABLES":
        return registry.analysis_tables()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


HeadAnalysis = tuple[str, int, int, str]  # (model_id, layer, q_head, analysis)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def record_configs(con: duckdb.DuckDBPyConnection, config: RunConfig, config_ids: dict[str, str],
                   code_version: str | Mapping[str, str]) -> None:
    """Insert the run_config rows of this run (once per config_id); ``code_version`` is one
    string or one per analysis."""
    for analysis, cid in config_ids.items():
        if con.execute("SELECT 1 FROM run_config WHERE config_id = ?", [cid]).fetchone():
            continue
        cv = code_version if isinstance(code_version, str) else code_version[analysis]
        con.execute("INSERT INTO run_config VALUES (?, ?, ?, ?, ?)",
                    [cid, analysis, cv, json.dumps(config.analysis_params(analysis), sort_keys=True), _now()])


def _concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for name in parts[0]:
        arrays = [p[name] for p in parts]
        out[name] = np.concatenate(arrays) if arrays[0].ndim == 1 else np.vstack(arrays)
    return out


def write_heads(con: duckdb.DuckDBPyConnection, outcomes: Iterable[HeadOutcome], config_ids: dict[str, str],
                previous: set[HeadAnalysis]) -> int:
    """Replace the rows of every (head, analysis) in ``outcomes`` and mark them in head_runs.

    ``previous`` holds the (head, analysis) pairs that already have rows (their old rows are
    deleted first); it is updated with what was written.  Returns the number of heads written.
    """
    outcomes = [o for o in outcomes if o.results]
    if not outcomes:
        return 0
    rows: dict[str, list[dict[str, np.ndarray]]] = {}
    stale = [(o.unit.key, a) for o in outcomes for a in o.results if (*o.unit.key, a) in previous]
    runs: dict[str, list] = {k: [] for k in ("model_id", "layer", "q_head", "analysis", "config_id",
                                              "input_fingerprint", "computed_at", "seconds")}
    now = _now()
    for o in outcomes:
        u = o.unit
        fp = u.input_fingerprint()
        for analysis, result in o.results.items():
            expected = registry.get(analysis).table_names
            unknown = set(result.tables) - set(expected)
            if unknown:
                raise ValueError(f"{analysis} produced unknown table(s) {sorted(unknown)}")
            for table in expected:
                cols = result.tables.get(table)
                if not cols:
                    continue
                n = len(next(iter(cols.values())))
                key = {"model_id": np.full(n, u.model_id, dtype=object), "layer": np.full(n, u.layer),
                       "q_head": np.full(n, u.q_head), "k_head": np.full(n, u.k_head),
                       "config_id": np.full(n, config_ids[analysis], dtype=object)}
                rows.setdefault(table, []).append({**key, **cols})
            for name, value in zip(runs, (u.model_id, u.layer, u.q_head, analysis, config_ids[analysis], fp,
                                          now, o.seconds)):
                runs[name].append(value)
    with store.transaction(con):
        for key, analysis in stale:
            for table in registry.get(analysis).table_names:
                con.execute(f"DELETE FROM {store.quote_ident(table)} WHERE model_id = ? AND layer = ? AND q_head = ?",
                            list(key))
            con.execute("DELETE FROM head_runs WHERE model_id = ? AND layer = ? AND q_head = ? AND analysis = ?",
                        [*key, analysis])
        for table, parts in rows.items():
            store.insert_columns(con, table, _concat(parts))
        store.insert_columns(con, "head_runs", runs)
        # the marts report each (model, analysis) under exactly one parameter set
        current = sorted({(o.unit.model_id, a) for o in outcomes for a in o.results})
        con.executemany(store.load_sql("set_current_config"),
                        [[m, a, config_ids[a], now] for m, a in current])
    for o in outcomes:
        previous.update((*o.unit.key, a) for a in o.results)
    return len(outcomes)
