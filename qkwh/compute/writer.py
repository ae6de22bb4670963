"""Write one head's results: every table of every analysis it ran, in one transaction."""

from __future__ import annotations

import datetime as dt
import json

import duckdb
import numpy as np

from qkwh import store
from qkwh.compute.units import HeadUnit
from qkwh.compute.work import HeadOutcome
from qkwh.params import RunConfig

ANALYSIS_TABLES: dict[str, tuple[str, ...]] = {
    "pca": ("pca_components", "pca_heads", "pca_axes"),
    "rotation": ("rotation_heads", "rotation_pairs", "rotation_axes"),
    "plasticity": ("plasticity_heads", "plasticity_buckets", "plasticity_heatmap", "plasticity_components"),
}


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def record_configs(con: duckdb.DuckDBPyConnection, config: RunConfig, config_ids: dict[str, str],
                   code_version: str) -> None:
    """Insert the run_config rows of this run (once per config_id)."""
    for analysis, cid in config_ids.items():
        if con.execute("SELECT 1 FROM run_config WHERE config_id = ?", [cid]).fetchone():
            continue
        con.execute("INSERT INTO run_config VALUES (?, ?, ?, ?, ?)",
                    [cid, analysis, code_version, json.dumps(config.analysis_params(analysis), sort_keys=True), _now()])


def _delete_head(con: duckdb.DuckDBPyConnection, table: str, unit: HeadUnit) -> None:
    con.execute(f"DELETE FROM {store.quote_ident(table)} WHERE model_id = ? AND layer = ? AND q_head = ?",
                [unit.model_id, unit.layer, unit.q_head])


def write_head(con: duckdb.DuckDBPyConnection, outcome: HeadOutcome, config_ids: dict[str, str]) -> None:
    """Replace the head's rows for each analysis in ``outcome`` and mark them in head_runs."""
    u = outcome.unit
    fp = u.input_fingerprint()
    with store.transaction(con):
        for analysis, result in outcome.results.items():
            expected = ANALYSIS_TABLES[analysis]
            unknown = set(result.tables) - set(expected)
            if unknown:
                raise ValueError(f"{analysis} produced unknown table(s) {sorted(unknown)}")
            for table in expected:
                _delete_head(con, table, u)
                cols = result.tables.get(table)
                if not cols:
                    continue
                n = len(next(iter(cols.values())))
                key = {"model_id": np.full(n, u.model_id, dtype=object), "layer": np.full(n, u.layer),
                       "q_head": np.full(n, u.q_head), "k_head": np.full(n, u.k_head),
                       "config_id": np.full(n, config_ids[analysis], dtype=object)}
                store.insert_columns(con, table, {**key, **cols})
            con.execute("DELETE FROM head_runs WHERE model_id = ? AND layer = ? AND q_head = ? AND analysis = ?",
                        [u.model_id, u.layer, u.q_head, analysis])
            con.execute("INSERT INTO head_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [u.model_id, u.layer, u.q_head, analysis, config_ids[analysis], fp, _now(),
                         outcome.seconds])
