-- A per-head result table declared with its columns by an analysis in the registry
-- (qkwh.compute.registry); the built-in analyses' tables are in warehouse/schema.sql.
-- qkwh.store.create_analysis_tables fills in the quoted table name, the "name TYPE" list of its
-- columns and the key columns that follow the head key (none: one row per head).
CREATE TABLE IF NOT EXISTS {table} (
    model_id VARCHAR NOT NULL, layer INTEGER NOT NULL, q_head INTEGER NOT NULL, k_head INTEGER NOT NULL,
    {columns},
    config_id VARCHAR NOT NULL
    -- key: (model_id, layer, q_head, config_id{key}), guaranteed by the writer (no index: see schema.sql)
);
