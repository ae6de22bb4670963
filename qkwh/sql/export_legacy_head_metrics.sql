-- Legacy head_metrics.csv (older attention-plasticity tools): one row per head, the
-- AP columns under their old names (n_q_tokens, n_k_tokens, d_model) followed by the warehouse
-- extras.  Head aggregates come from the head_metrics mart (`qkwh build` first); rows are
-- those of the parameter set the marts report (current_config): the filter is the dbt macro
-- is_current_config (dbt_project/macros/current_config.sql), which qkwh.export renders in.
-- $1 = model id, or NULL for every model.
SELECT
    h.model_id AS model,
    h.layer,
    h.q_head,
    h.k_head,
    h.n_q AS n_q_tokens,
    h.n_k AS n_k_tokens,
    h.d AS d_model,
    h.q_R2_pos,
    h.q_beta_norm,
    h.q_R2_scalar,
    h.q_mae_baseline,
    h.q_mae_proj,
    h.q_mae_ratio,
    h.q_resid0_skew,
    h.q_resid0_kurt,
    h.q_resid0_ks_p,
    h.q_noise_med_abs_skew,
    h.q_noise_med_abs_kurt,
    h.q_noise_med_ks_p,
    h.q_noise_frac_ks_p_lt_alpha,
    p.ap_overall,
    p.n_buckets_valid,
    h.alpha_pos,
    h.beta_pos,
    h.sigma2_pos,
    h.seed_used,
    h.context_length,
    p.decile_0, p.decile_1, p.decile_2, p.decile_3, p.decile_4,
    p.decile_5, p.decile_6, p.decile_7, p.decile_8, p.decile_9,
    p.ap_first_20pct,
    p.ap_last_20pct,
    p.ap_drop,
    h.cov_mode,
    h.eligibility,
    h.pairs,
    h.config_id
FROM plasticity_heads AS h
LEFT JOIN head_metrics AS p ON p.model_id = h.model_id AND p.layer = h.layer AND p.q_head = h.q_head
WHERE ($1 IS NULL OR h.model_id = $1)
  AND {{ is_current_config('h', 'plasticity') }}
ORDER BY h.model_id, h.layer, h.q_head
