-- The per-head result table of an analysis, generated from its declaration in the analysis
-- registry (qkwh.analyses.registry; docs/tables.md lists every column).  qkwh.store.analysis_table_ddl
-- fills in the quoted table name, the "name TYPE" list of its columns (key columns NOT NULL) and
-- the key columns that follow the head key (none: one row per head).
-- The key is not a PRIMARY KEY index: an index costs more to maintain than the insert itself, and
-- the writer guarantees the key (a head's rows of a parameter set are deleted and written in one
-- transaction with its head_runs row); the dbt sources test every key at `qkwh build`.
CREATE TABLE IF NOT EXISTS {table} (
    model_id VARCHAR NOT NULL, layer INTEGER NOT NULL, q_head INTEGER NOT NULL, k_head INTEGER NOT NULL,
    {columns},
    config_id VARCHAR NOT NULL
    -- key: (model_id, layer, q_head, config_id{key})
);
