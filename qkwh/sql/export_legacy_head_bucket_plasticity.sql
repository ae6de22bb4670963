-- Legacy head_bucket_plasticity.csv (older attention-plasticity tools): one row per head and query
-- bucket; `bucket` and `plasticity` are the old names of q_bucket and ap_bucket, n_pairs is
-- the number of pairs evaluated.  $1 = model id, or NULL for every model.
-- Only the parameter set the marts report (current_config) is written: the filter is the dbt
-- macro is_current_config (dbt_project/macros/current_config.sql), which qkwh.export renders in.
SELECT
    model_id AS model,
    layer,
    q_head,
    k_head,
    q_bucket AS bucket,
    q_bucket,
    ap_bucket AS plasticity,
    ap_bucket,
    n_pairs,
    ap_bucket_se,
    bucket_position,
    bucket_midpoint,
    bucket_frac,
    n_queries,
    n_eligible_keys,
    n_admissible_pairs,
    mean_abs_z,
    mode,
    config_id
FROM plasticity_buckets AS t
WHERE ($1 IS NULL OR model_id = $1)
  AND {{ is_current_config('t', 'plasticity') }}
ORDER BY model_id, layer, q_head, q_bucket
