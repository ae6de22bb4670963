-- qkwh warehouse schema (DuckDB): the catalog and bookkeeping tables.  Every table and column is
-- described in docs/tables.md.  Applied idempotently by qkwh.store.connect(); every statement is
-- CREATE ... IF NOT EXISTS.
-- A head is (model_id, layer, q_head) with k_head beside it.

------------------------------------------------------------------------------------------------
-- Catalog (written by `qkwh ingest`)
------------------------------------------------------------------------------------------------

CREATE TABLE IF NOT EXISTS models (
    model_id              VARCHAR PRIMARY KEY,   -- branch prefix, e.g. qwen3-4b, smollm2-135m
    source                VARCHAR NOT NULL,      -- what the user passed to `qkwh ingest`
    source_kind           VARCHAR NOT NULL,      -- 'local' | 'hub' (downloaded) | 'hub_remote' (read in place)
    root_path             VARCHAR NOT NULL,      -- absolute folder holding l??h??[qk]/data.parquet (hf://...@COMMIT when read in place)
    repo_id               VARCHAR,               -- Hub dataset repo (hub sources)
    revision              VARCHAR,               -- Hub branch (hub sources)
    source_fingerprint    VARCHAR NOT NULL,      -- hash over every file fingerprint of the source
    hf_model              VARCHAR,               -- model captured (metadata / registry)
    family                VARCHAR,
    label                 VARCHAR,               -- display name in reports (ingest --label), else model_id
    dataset               VARCHAR,               -- text the capture ran on (ingest --dataset, else capture metadata)
    params_b              DOUBLE,
    num_layers            INTEGER,
    num_q_heads           INTEGER,               -- n_q: query heads per layer
    num_kv_heads          INTEGER,               -- n_kv: key/value heads per layer
    gqa_ratio             INTEGER,               -- n_q / n_kv; k_head = q_head // gqa_ratio
    head_dim              INTEGER,               -- d
    context_length        INTEGER NOT NULL,      -- L_ctx (docs/input-format.md)
    context_length_rule   VARCHAR NOT NULL,      -- 'registry' | 'metadata' | 'max_position'
    bucket_size           INTEGER NOT NULL,      -- m: capture min_bucket_size
    sampling_strategy     VARCHAR,               -- uniform | log_uniform | all
    rope_theta            DOUBLE,
    rope_scaling          VARCHAR,
    nope_layers           VARCHAR,               -- ';'-separated, 0-based
    cross_attention_layers VARCHAR,
    checkpoint_phase      VARCHAR,
    checkpoint_step       BIGINT,
    checkpoint_order      INTEGER,
    study                 VARCHAR,
    dataset_branch        VARCHAR,
    in_registry           BOOLEAN NOT NULL,      -- model_id found in configs/models.csv
    n_files               INTEGER NOT NULL,
    n_rows                BIGINT NOT NULL,
    metadata_json         VARCHAR,               -- _saver_state.json model_metadata, verbatim
    ingested_at           TIMESTAMP NOT NULL
);
-- warehouses created before the label column existed get it here (idempotent)
ALTER TABLE models ADD COLUMN IF NOT EXISTS label VARCHAR;
-- ... and before the dataset column existed
ALTER TABLE models ADD COLUMN IF NOT EXISTS dataset VARCHAR;

CREATE TABLE IF NOT EXISTS files (
    model_id        VARCHAR NOT NULL,
    path            VARCHAR NOT NULL,            -- absolute path of data.parquet
    config_name     VARCHAR NOT NULL,            -- l{LL}h{HH}{q|k}
    layer           INTEGER NOT NULL,
    head            INTEGER NOT NULL,            -- query head for kind 'q', KV head for kind 'k'
    kind            VARCHAR NOT NULL,            -- 'q' | 'k'
    "rows"          BIGINT NOT NULL,
    d               INTEGER NOT NULL,
    bytes           BIGINT NOT NULL,
    fingerprint     VARCHAR NOT NULL,            -- sha256 of the file content (first 32 hex chars)
    n_examples      INTEGER NOT NULL,
    min_position    INTEGER,
    max_position    INTEGER,
    max_bucket      INTEGER,
    has_pos0        BOOLEAN NOT NULL,
    sliding_window  INTEGER,                     -- the file's single value (NULL = full attention)
    vector_type     VARCHAR NOT NULL,            -- 'fixed_size_list' | 'list'
    PRIMARY KEY (model_id, layer, head, kind)
);

CREATE TABLE IF NOT EXISTS heads (
    model_id    VARCHAR NOT NULL,
    layer       INTEGER NOT NULL,
    q_head      INTEGER NOT NULL,
    k_head      INTEGER NOT NULL,                -- q_head // gqa_ratio
    has_k_file  BOOLEAN NOT NULL,
    n_q         BIGINT NOT NULL,                 -- rows in the q file
    n_k         BIGINT,                          -- rows in the k file (NULL without one)
    PRIMARY KEY (model_id, layer, q_head)
);

CREATE TABLE IF NOT EXISTS ingest_findings (
    model_id    VARCHAR NOT NULL,
    severity    VARCHAR NOT NULL,                -- 'info' | 'warning' | 'error'
    file        VARCHAR,                         -- path, or NULL for dataset-level findings
    "check"     VARCHAR NOT NULL,
    detail      VARCHAR NOT NULL
);

-- RoPE planes of every captured layer, from the model's own frequencies (docs/metrics/rope.md):
-- rotated planes first, then one plane of width 1 per unrotated dim (all dims of a NoPE layer).
-- No rows for a model whose frequencies are unknown (an ingest_findings 'rope_frequencies' warning
-- says which field is missing).  Warehouses created before this table get it here (empty until
-- their models are ingested again).
CREATE TABLE IF NOT EXISTS rope_frequencies (
    model_id           VARCHAR NOT NULL,
    layer              INTEGER NOT NULL,
    plane              INTEGER NOT NULL,         -- 0-based; rotated planes first
    dim_a              INTEGER NOT NULL,         -- first dim of the plane (the dim itself when unrotated)
    dim_b              INTEGER,                  -- second dim; NULL for an unrotated dim
    inv_freq           DOUBLE NOT NULL,          -- radians per token (0 when unrotated)
    wavelength         DOUBLE NOT NULL,          -- 2*pi / inv_freq tokens (+inf when unrotated)
    band               VARCHAR NOT NULL,         -- 'high' | 'mid' | 'low' | 'unrotated'
    attention_scaling  DOUBLE NOT NULL,          -- factor on cos/sin (yarn), else 1
    layout             VARCHAR NOT NULL,         -- 'half' | 'interleaved'
    source             VARCHAR NOT NULL,         -- 'capture' | 'config' | 'rope_theta'
    PRIMARY KEY (model_id, layer, plane)
);

------------------------------------------------------------------------------------------------
-- Compute bookkeeping (written by `qkwh compute`)
------------------------------------------------------------------------------------------------

CREATE TABLE IF NOT EXISTS run_config (
    config_id     VARCHAR PRIMARY KEY,           -- RunConfig.fingerprint(analysis, code_version)
    analysis      VARCHAR NOT NULL,              -- a registered analysis (qkwh.analyses.registry)
    code_version  VARCHAR NOT NULL,
    params_json   VARCHAR NOT NULL,              -- every parameter that influences the analysis
    created_at    TIMESTAMP NOT NULL,
    name          VARCHAR                        -- optional name of the parameter set (`qkwh compute --name`)
);
-- warehouses created before parameter sets had names get the column here (idempotent)
ALTER TABLE run_config ADD COLUMN IF NOT EXISTS name VARCHAR;

-- One row per head, analysis and parameter set computed: several sets of one head are kept side
-- by side (config_id is part of every per-head key; `qkwh runs` lists and drops them).
CREATE TABLE IF NOT EXISTS head_runs (
    model_id           VARCHAR NOT NULL,
    layer              INTEGER NOT NULL,
    q_head             INTEGER NOT NULL,
    analysis           VARCHAR NOT NULL,
    config_id          VARCHAR NOT NULL,
    input_fingerprint  VARCHAR NOT NULL,         -- q/k file fingerprints + model context
    computed_at        TIMESTAMP NOT NULL,
    seconds            DOUBLE,
    PRIMARY KEY (model_id, layer, q_head, analysis, config_id)
);

-- The parameter set each (model, analysis) currently reports: the marts read the per-head rows
-- of exactly this config_id.  `qkwh compute` makes its configuration current for the models it
-- computes.
CREATE TABLE IF NOT EXISTS current_config (
    model_id    VARCHAR NOT NULL,
    analysis    VARCHAR NOT NULL,
    config_id   VARCHAR NOT NULL,
    set_at      TIMESTAMP NOT NULL,
    PRIMARY KEY (model_id, analysis)
);

-- What each table dbt writes (marts, int_* and uncertainty tables) holds.  `qkwh build` records
-- the build it is about to run (mart_builds: for each model, a hash of what the marts read, i.e.
-- its catalog row and the per-head results of its current parameter sets), and the dbt project
-- records, for each table it writes, in the transaction that writes it, the build it came from
-- (mart_relations; dbt_project/macros/mart_provenance.sql).  A table whose build read another
-- state than today's, or that no finished write recorded (an interrupted build, a dbt run outside
-- qkwh), is stale (`qkwh status`, `qkwh report`, `qkwh sql` say so).
CREATE TABLE IF NOT EXISTS mart_builds (
    built_at      TIMESTAMP NOT NULL,
    inputs_json   VARCHAR NOT NULL               -- {model_id: hash of qkwh/sql/mart_inputs.sql} at build time
);
ALTER TABLE mart_builds ADD COLUMN IF NOT EXISTS build_id VARCHAR;       -- NULL: recorded by an older qkwh
ALTER TABLE mart_builds ADD COLUMN IF NOT EXISTS running BOOLEAN DEFAULT false;  -- the build dbt is running now
CREATE TABLE IF NOT EXISTS mart_relations (
    relation      VARCHAR NOT NULL,              -- a table dbt wrote
    build_id      VARCHAR                        -- the mart_builds row it was written in (NULL: not by `qkwh build`)
);

------------------------------------------------------------------------------------------------
-- Per-head results (docs/metrics/): one set of tables per analysis, generated from the analysis
-- declarations (qkwh.analyses.registry, DDL template qkwh/sql/analysis_table.sql) and created by
-- qkwh.store.connect right after this file.  Every such table starts with the head key
-- (model_id, layer, q_head, k_head), ends with config_id -> run_config, and config_id is part of
-- every key: the rows of several parameter sets of one head are kept side by side.
------------------------------------------------------------------------------------------------
