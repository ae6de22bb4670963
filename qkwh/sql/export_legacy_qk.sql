-- Legacy qk.csv (older combined Q/K PCA tools): one row per head and principal component
-- (10 per head), with the head's taxonomy (head_taxonomy mart: `qkwh build` first) beside it;
-- `head` is the query head.
-- $1 = model id, or NULL for every model.
-- Only the parameter set the marts report (current_config) is written: the filter is the dbt
-- macro is_current_config (dbt_project/macros/current_config.sql), which qkwh.export renders in.
SELECT
    c.model_id AS model,
    c.layer,
    c.q_head AS head,
    c.q_head,
    c.k_head,
    c.pc,
    c.explained_variance_ratio,
    c.r_q,
    c.r_k,
    c.p_q,
    c.p_k,
    c.sign_flipped,
    c.anchor,
    c.mean_q,
    c.mean_k,
    c.var_q,
    c.var_k,
    h.taxonomy,
    c.config_id
FROM pca_components AS c
LEFT JOIN head_taxonomy AS h USING (model_id, layer, q_head)
WHERE ($1 IS NULL OR c.model_id = $1)
  AND {{ is_current_config('c', 'pca') }}
ORDER BY c.model_id, c.layer, c.q_head, c.pc
