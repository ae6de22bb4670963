-- Legacy head_metrics.csv (older attention-plasticity tools): one row per head, the
-- AP columns under their old names (n_q_tokens, n_k_tokens, d_model) followed by the warehouse
-- extras.  Head aggregates come from the plasticity_profile mart (`qkwh build` first).
-- $1 = model id, or NULL for every model.
SELECT
    h.model_id AS model,
    h.layer,
    h.q_head,
    h.k_head,
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
    p.ap_overall,
    (SELECT count(*) FROM plasticity_buckets AS b
      WHERE b.model_id = h.model_id AND b.layer = h.layer AND b.q_head = h.q_head
        AND b.config_id = h.config_id AND isfinite(b.ap_bucket)) AS n_buckets_valid,
    alpha_pos,
    beta_pos,
    sigma2_pos,
    seed_used,
    h.context_length,
    p.decile_0, p.decile_1, p.decile_2, p.decile_3, p.decile_4,
    p.decile_5, p.decile_6, p.decile_7, p.decile_8, p.decile_9,
    p.ap_first_20pct,
    p.ap_last_20pct,
    p.ap_drop,
    cov_mode,
    eligibility,
    pairs,
    h.config_id
FROM plasticity_heads AS h
LEFT JOIN plasticity_profile AS p ON p.scope = 'head' AND p.model_id = h.model_id AND p.layer = h.layer
                                 AND p.q_head = h.q_head
WHERE $1 IS NULL OR h.model_id = $1
ORDER BY h.model_id, h.layer, h.q_head
