-- qkwh warehouse schema (DuckDB).  Every table and column is described in docs/tables.md.
-- Applied idempotently by qkwh.store.connect(); every statement is CREATE ... IF NOT EXISTS.
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

------------------------------------------------------------------------------------------------
-- Compute bookkeeping (written by `qkwh compute`)
------------------------------------------------------------------------------------------------

CREATE TABLE IF NOT EXISTS run_config (
    config_id     VARCHAR PRIMARY KEY,           -- RunConfig.fingerprint(analysis, code_version)
    analysis      VARCHAR NOT NULL,              -- a registered analysis: pca | rotation | plasticity | ...
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
-- Per-head results (docs/metrics/).  Every table carries config_id -> run_config, and config_id
-- is part of every key: the rows of several parameter sets of one head are kept side by side.
-- The keys are declared as comments, not as PRIMARY KEY indexes: an index costs more to maintain
-- than the insert itself (the heatmap's seven-column key alone was ~1 ms per head, growing with
-- the table) and the writer guarantees the key (a head's rows of a set are deleted and written in
-- one transaction with its head_runs row, which keeps its PRIMARY KEY); the dbt sources test
-- every key at `qkwh build`.  (Warehouses created with indexed keys are migrated by
-- qkwh.store.connect, rows kept.)
------------------------------------------------------------------------------------------------

-- combined Q/K PCA: docs/metrics/pca.md
CREATE TABLE IF NOT EXISTS pca_components (
    model_id VARCHAR NOT NULL, layer INTEGER NOT NULL, q_head INTEGER NOT NULL, k_head INTEGER NOT NULL,
    pc INTEGER NOT NULL,
    explained_variance_ratio DOUBLE,
    r_q DOUBLE, r_k DOUBLE, p_q DOUBLE, p_k DOUBLE,
    sign_flipped BOOLEAN, anchor VARCHAR,
    mean_q DOUBLE, mean_k DOUBLE, var_q DOUBLE, var_k DOUBLE,
    config_id VARCHAR NOT NULL
    -- key: (model_id, layer, q_head, config_id, pc)
);

CREATE TABLE IF NOT EXISTS pca_heads (
    model_id VARCHAR NOT NULL, layer INTEGER NOT NULL, q_head INTEGER NOT NULL, k_head INTEGER NOT NULL,
    n_q INTEGER, n_k INTEGER, d INTEGER,
    ev0 DOUBLE, ev1 DOUBLE, r_q0 DOUBLE, r_k0 DOUBLE,      -- taxonomy: derived by dbt (head_metrics)
    pos_var_q_thesis DOUBLE, pos_var_k_thesis DOUBLE,
    pc0_share_pos_q DOUBLE, pc0_share_pos_k DOUBLE,
    pos_var_q_exact DOUBLE, pos_var_k_exact DOUBLE,
    qk_sep_pc0 DOUBLE, fisher_pc0 DOUBLE, qk_acc_pc01 DOUBLE,
    config_id VARCHAR NOT NULL
    -- key: (model_id, layer, q_head, config_id)
);

-- For plots: the canonicalised principal axes and the pooled mean of each head, kept
-- (like rotation_axes) so reports can draw Q/K in the PC0/PC1 plane: z_i = (x - mean)·pc_i.
CREATE TABLE IF NOT EXISTS pca_axes (
    model_id VARCHAR NOT NULL, layer INTEGER NOT NULL, q_head INTEGER NOT NULL, k_head INTEGER NOT NULL,
    axis VARCHAR NOT NULL,                       -- 'mean' | 'pc0' .. 'pc9'
    vec FLOAT[],
    config_id VARCHAR NOT NULL
    -- key: (model_id, layer, q_head, config_id, axis)
);

-- planar rotation model: docs/metrics/rotation.md
CREATE TABLE IF NOT EXISTS rotation_heads (
    model_id VARCHAR NOT NULL, layer INTEGER NOT NULL, q_head INTEGER NOT NULL, k_head INTEGER NOT NULL,
    n_q INTEGER, n_k INTEGER, d INTEGER,
    degenerate BOOLEAN,
    b_mode VARCHAR, pairing VARCHAR,
    position_r DOUBLE, r_q_a DOUBLE, r_k_a DOUBLE,
    alpha_q DOUBLE, alpha_k DOUBLE, intercept_q_a DOUBLE, intercept_k_a DOUBLE,
    mu_q_a DOUBLE, mu_k_a DOUBLE, mu_q_b DOUBLE, mu_k_b DOUBLE,
    bias_strength DOUBLE, bias_strength_ctx DOUBLE, slope_ratio_kq DOUBLE,
    separation_strength DOUBLE,
    var_frac_a DOUBLE, var_frac_b DOUBLE, plane_var_fraction DOUBLE,
    content_var_b DOUBLE, content_var_b_frac DOUBLE,
    residual_pos_r DOUBLE,
    omega DOUBLE, omega_r_squared DOUBLE,
    n_active_pairs INTEGER, active_var_frac DOUBLE,
    cos_b_bc DOUBLE,
    config_id VARCHAR NOT NULL
    -- key: (model_id, layer, q_head, config_id)
);

CREATE TABLE IF NOT EXISTS rotation_pairs (
    model_id VARCHAR NOT NULL, layer INTEGER NOT NULL, q_head INTEGER NOT NULL, k_head INTEGER NOT NULL,
    pair INTEGER NOT NULL,
    sv_var_share DOUBLE, angle_r DOUBLE, angle_r_circ DOUBLE, omega_pair DOUBLE,
    angle_r_circ_pm DOUBLE, omega_pair_pm DOUBLE, qk_acc DOUBLE, active BOOLEAN,
    config_id VARCHAR NOT NULL
    -- key: (model_id, layer, q_head, config_id, pair)
);

-- vec is FLOAT[] (a list) rather than FLOAT[d]: one table holds models with different d.
-- Besides the axes a, b, b_centroid: 'mean' (pooled mean) and the complement directions
-- 'w0' .. 'w{2n-1}' (pair i = w_{2i}, w_{2i+1}), for the complement-pair collage.
CREATE TABLE IF NOT EXISTS rotation_axes (
    model_id VARCHAR NOT NULL, layer INTEGER NOT NULL, q_head INTEGER NOT NULL, k_head INTEGER NOT NULL,
    axis VARCHAR NOT NULL,                       -- 'a' | 'b' | 'b_centroid' | 'mean' | 'w0' ..
    vec FLOAT[],
    config_id VARCHAR NOT NULL
    -- key: (model_id, layer, q_head, config_id, axis)
);

-- attention plasticity: docs/metrics/plasticity.md
CREATE TABLE IF NOT EXISTS plasticity_heads (
    model_id VARCHAR NOT NULL, layer INTEGER NOT NULL, q_head INTEGER NOT NULL, k_head INTEGER NOT NULL,
    n_q INTEGER, n_k INTEGER, d INTEGER,
    q_R2_pos DOUBLE, q_beta_norm DOUBLE,
    q_R2_scalar DOUBLE, q_mae_baseline DOUBLE, q_mae_proj DOUBLE, q_mae_ratio DOUBLE,
    q_resid0_skew DOUBLE, q_resid0_kurt DOUBLE, q_resid0_ks_p DOUBLE,
    q_noise_med_abs_skew DOUBLE, q_noise_med_abs_kurt DOUBLE,
    q_noise_med_ks_p DOUBLE, q_noise_frac_ks_p_lt_alpha DOUBLE,
    -- ap_overall, deciles, first/last 20 % and ap_drop are derived from plasticity_buckets by
    -- dbt (head_metrics), the one place they are computed
    alpha_pos DOUBLE, beta_pos DOUBLE, sigma2_pos DOUBLE, seed_used BIGINT,
    context_length INTEGER,
    cov_mode VARCHAR, eligibility VARCHAR, pairs VARCHAR, empirical BOOLEAN,
    config_id VARCHAR NOT NULL
    -- key: (model_id, layer, q_head, config_id)
);

CREATE TABLE IF NOT EXISTS plasticity_buckets (
    model_id VARCHAR NOT NULL, layer INTEGER NOT NULL, q_head INTEGER NOT NULL, k_head INTEGER NOT NULL,
    q_bucket INTEGER NOT NULL,
    bucket_position DOUBLE,                      -- tau_j: mean query position of the bucket
    bucket_midpoint DOUBLE,                      -- (j + 0.5) * bucket_size
    bucket_frac DOUBLE,                          -- tau_j / L_ctx
    n_queries INTEGER,
    n_eligible_keys BIGINT, n_admissible_pairs BIGINT,
    n_pairs INTEGER,                             -- pairs evaluated (all admissible when exhaustive)
    ap_bucket DOUBLE,
    ap_bucket_se DOUBLE,                         -- standard error of the sampled estimator
    mean_abs_z DOUBLE,
    ap_bucket_empirical DOUBLE,                  -- same pairs, counted with the bucket's real queries
    ap_bucket_empirical_se DOUBLE,               -- its standard error (as ap_bucket_se)
    gauss_gap_se DOUBLE,                         -- SE of ap_bucket - ap_bucket_empirical (paired)
    mode VARCHAR,                                -- '<pairs>/<cov_mode>/<eligibility>'
    config_id VARCHAR NOT NULL
    -- key: (model_id, layer, q_head, config_id, q_bucket)
);

CREATE TABLE IF NOT EXISTS plasticity_heatmap (
    model_id VARCHAR NOT NULL, layer INTEGER NOT NULL, q_head INTEGER NOT NULL, k_head INTEGER NOT NULL,
    q_bucket INTEGER NOT NULL,
    dx_bin INTEGER NOT NULL,                     -- floor(|s1 - s2| / W), W = bucket size
    dm_bin INTEGER NOT NULL,                     -- floor((tau_j - (s1 + s2)/2) / W)
    n BIGINT, sum_pp DOUBLE, sum_pp2 DOUBLE,
    config_id VARCHAR NOT NULL
    -- key: (model_id, layer, q_head, config_id, q_bucket, dx_bin, dm_bin)
);

CREATE TABLE IF NOT EXISTS plasticity_components (
    model_id VARCHAR NOT NULL, layer INTEGER NOT NULL, q_head INTEGER NOT NULL, k_head INTEGER NOT NULL,
    component INTEGER NOT NULL,
    component_r2 DOUBLE, component_weight DOUBLE,
    config_id VARCHAR NOT NULL
    -- key: (model_id, layer, q_head, config_id, component)
);
