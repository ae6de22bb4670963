"""The warehouse tables of ``qkwh ablate``, declared with the analysis declaration classes.

Pure data plus their DDL: nothing here imports torch, the store or the CLI (the store imports
this module to create the tables in every warehouse, so the mart ``ablation_effects`` always
has its sources).
"""

from __future__ import annotations

from typing import Any

from qkwh.analyses.declaration import Column, Table

ABLATION_RUNS = Table(
    name="ablation_runs",
    key=("run_id",),
    grain="one row per ablation run (model, metric, order, method, task and every parameter)",
    description="Ablation runs of `qkwh ablate` (docs/ablation.md).",
    columns=(
        Column("run_id", "VARCHAR", "", "hash of everything that defines the run"),
        Column("model_id", "VARCHAR", "", "the ingested model whose heads were ranked"),
        Column("model_source", "VARCHAR", "", "the MODEL argument: folder, Hub id or .gguf file"),
        Column("model_kind", "VARCHAR", "", "folder, hub or gguf"),
        Column("model_revision", "VARCHAR", "", "Hub commit, or sha256 of the GGUF / config"),
        Column("model_type", "VARCHAR", "", "architecture (the config's model_type)"),
        Column("metric", "VARCHAR", "", "the head_metrics column the heads were ranked by"),
        Column("rank_order", "VARCHAR", "", "lowest or highest: which end of the metric"),
        Column("method", "VARCHAR", "", "zero or mean: what replaces a head's slice"),
        Column("task", "VARCHAR", "", "the retrieval task (passkey)"),
        Column("ks", "INTEGER[]", "heads", "numbers of heads ablated"),
        Column("random_seeds", "INTEGER[]", "", "seeds of the random control selections"),
        Column("lengths", "INTEGER[]", "tokens", "prompt lengths (answer included)"),
        Column("depths", "DOUBLE[]", "1", "where the key sits in the filler (0 start, 1 end)"),
        Column("trials", "INTEGER", "", "prompts per (length, depth)"),
        Column("seed", "INTEGER", "", "seed of the prompts (keys and filler offsets)"),
        Column("dtype", "VARCHAR", "", "weights and activations (float32 or bfloat16)"),
        Column("n_heads_computed", "INTEGER", "heads", "heads of the model with the metric"),
        Column("metric_configs", "VARCHAR", "", "JSON: head_metrics' config_id_* values"),
        Column("params_json", "VARCHAR", "", "every parameter of the run as JSON"),
        Column("code_version", "VARCHAR", "", "qkwh version plus a hash of the ablation code"),
        Column("started_at", "TIMESTAMP", "", "when the run was first started"),
        Column("finished_at", "TIMESTAMP", "", "when its last trial was written (NULL: not yet)"),
    ),
)

ABLATION_PROMPTS = Table(
    name="ablation_prompts",
    key=("run_id", "length", "depth", "trial"),
    grain="one row per prompt of a run (length, depth, trial)",
    description="The prompts of each ablation run, so any trial can be recomputed outside qkwh.",
    columns=(
        Column("run_id", "VARCHAR", "", "the run (ablation_runs)"),
        Column("length", "INTEGER", "tokens", "tokens of input_ids (prompt and key)"),
        Column("depth", "DOUBLE", "1", "requested position of the key in the filler"),
        Column("trial", "INTEGER", "", "index of the prompt at this length and depth"),
        Column("prompt", "VARCHAR", "", "the prompt text (input_ids before answer_start, decoded)"),
        Column("passkey", "VARCHAR", "", "the 5-digit key"),
        Column("input_ids", "INTEGER[]", "", "prompt tokens then the key's tokens"),
        Column("answer_start", "INTEGER", "tokens", "index in input_ids of the first key token"),
        Column(
            "key_position", "INTEGER", "tokens", "index in input_ids where the key sentence starts"
        ),
    ),
)

ABLATION_TRIALS = Table(
    name="ablation_trials",
    key=("run_id", "selection", "k", "length", "depth", "trial"),
    grain="one row per (run, selection, k, prompt)",
    description="Log-probability of the key and greedy exact match, per prompt and selection.",
    columns=(
        Column("run_id", "VARCHAR", "", "the run (ablation_runs)"),
        Column("selection", "VARCHAR", "", "none, the metric's name, or random:<seed>"),
        Column("k", "INTEGER", "heads", "heads ablated (0 for none)"),
        Column(
            "heads", "STRUCT(layer INTEGER, q_head INTEGER)[]", "", "the ablated heads, in order"
        ),
        Column("length", "INTEGER", "tokens", "the prompt's length (ablation_prompts)"),
        Column("depth", "DOUBLE", "1", "the prompt's key depth (ablation_prompts)"),
        Column("trial", "INTEGER", "", "the prompt's index (ablation_prompts)"),
        Column("logprob", "DOUBLE", "nats", "sum of log p(key token | everything before)"),
        Column("correct", "BOOLEAN", "", "greedy decoding reproduces every key token"),
    ),
)

TABLES: tuple[Table, ...] = (ABLATION_RUNS, ABLATION_PROMPTS, ABLATION_TRIALS)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def table_ddl(table: Table) -> str:
    """``CREATE TABLE IF NOT EXISTS`` of one ablation table (key columns NOT NULL, primary key)."""
    cols = ",\n    ".join(
        f"{_ident(c.name)} {c.type}{' NOT NULL' if c.name in table.key else ''}"
        for c in table.columns
    )
    key = ", ".join(_ident(k) for k in table.key)
    return f"CREATE TABLE IF NOT EXISTS {_ident(table.name)} (\n    {cols},\n    PRIMARY KEY ({key})\n);"


#: the names of the ablation tables (the store checks a warehouse has them)
ABLATION_TABLE_NAMES: tuple[str, ...] = tuple(t.name for t in TABLES)


def ablation_table_ddls() -> list[str]:
    """The DDL of every ablation table (part of the store's schema stamp)."""
    return [table_ddl(t) for t in TABLES]


def create_ablation_tables(con: Any) -> None:
    """Create the ablation tables (idempotent); ``con`` is a writable DuckDB connection."""
    for table in TABLES:
        con.execute(table_ddl(table))


#: the ablation tables keyed by run_id (no model_id column): a model's rows are those of its runs
RUN_KEYED_TABLES: tuple[str, ...] = (ABLATION_PROMPTS.name, ABLATION_TRIALS.name)

_OF_MODEL = f"run_id IN (SELECT run_id FROM {ABLATION_RUNS.name} WHERE model_id = ?)"


def count_model_run_rows(con: Any, model_id: str) -> dict[str, int]:
    """Rows of ``model_id``'s ablation runs in the run-keyed tables (ablation_prompts, trials)."""
    return {
        t: con.execute(
            f"SELECT count(*) FROM {_ident(t)} WHERE {_OF_MODEL}", [model_id]
        ).fetchone()[0]
        for t in RUN_KEYED_TABLES
    }


def delete_model_run_rows(con: Any, model_id: str) -> dict[str, int]:
    """Delete the rows of ``model_id``'s ablation runs from the run-keyed tables; returns the
    rows deleted per table.  Call it inside the caller's transaction, before the model's
    ablation_runs rows go (they name the runs)."""
    return {
        t: con.execute(f"DELETE FROM {_ident(t)} WHERE {_OF_MODEL}", [model_id]).fetchone()[0]
        for t in RUN_KEYED_TABLES
    }
