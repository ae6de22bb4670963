-- Legacy head_metrics.csv (attention-plasticity analyze.py, spec I-24): one row per head, the
-- AP columns under their old names (n_q_tokens, n_k_tokens, d_model) followed by the warehouse
-- extras.  $1 = model id, or NULL for every model.
SELECT
    model_id AS model,
    layer,
    q_head,
    k_head,
    n_q AS n_q_tokens,
    n_k AS n_k_tokens,
    d AS d_model,
    q_R2_pos,
    q_beta_norm,
    q_R2_scalar,
    q_mae_baseline,
    q_mae_proj,
    q_mae_ratio,
    q_resid0_skew,
    q_resid0_kurt,
    q_resid0_ks_p,
    q_noise_med_abs_skew,
    q_noise_med_abs_kurt,
    q_noise_med_ks_p,
    q_noise_frac_ks_p_lt_alpha,
    ap_overall,
    n_buckets_valid,
    alpha_pos,
    beta_pos,
    sigma2_pos,
    seed_used,
    context_length,
    decile_0, decile_1, decile_2, decile_3, decile_4,
    decile_5, decile_6, decile_7, decile_8, decile_9,
    ap_first_20pct,
    ap_last_20pct,
    ap_drop,
    cov_mode,
    eligibility,
    pairs,
    config_id
FROM plasticity_heads
WHERE $1 IS NULL OR model_id = $1
ORDER BY model_id, layer, q_head
