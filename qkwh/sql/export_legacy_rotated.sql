-- Legacy rotated.csv (older planar-rotation tools): one row per head with the planar-rotation
-- metrics; `head` is the query head.  $1 = model id, or NULL for every model.
-- Only the parameter set the marts report (current_config) is written: the filter is the dbt
-- macro is_current_config (dbt_project/macros/current_config.sql), which qkwh.export renders in.
SELECT
    model_id AS model,
    layer,
    q_head AS head,
    q_head,
    k_head,
    n_q,
    n_k,
    d,
    degenerate,
    position_r,
    r_q_a,
    r_k_a,
    alpha_q,
    alpha_k,
    mu_q_a,
    mu_k_a,
    mu_q_b,
    mu_k_b,
    bias_strength,
    bias_strength_ctx,
    slope_ratio_kq,
    separation_strength,
    var_frac_a,
    var_frac_b,
    plane_var_fraction,
    content_var_b,
    content_var_b_frac,
    residual_pos_r,
    omega,
    omega_r_squared,
    n_active_pairs,
    active_var_frac,
    intercept_q_a,
    intercept_k_a,
    cos_b_bc,
    b_mode,
    pairing,
    config_id
FROM rotation_heads AS t
WHERE ($1 IS NULL OR model_id = $1)
  AND {{ is_current_config('t', 'rotation') }}
ORDER BY model_id, layer, q_head
