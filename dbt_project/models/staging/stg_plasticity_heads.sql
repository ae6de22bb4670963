-- Attention plasticity per head (query diagnostics and the positional model); non-finite
-- doubles -> NULL.  Head aggregates of the buckets are derived in int_head_plasticity.
{%- set doubles = ['q_R2_pos', 'q_beta_norm', 'q_R2_scalar', 'q_mae_baseline', 'q_mae_proj',
                   'q_mae_ratio', 'q_resid0_skew', 'q_resid0_kurt', 'q_resid0_ks_p',
                   'q_noise_med_abs_skew', 'q_noise_med_abs_kurt', 'q_noise_med_ks_p',
                   'q_noise_frac_ks_p_lt_alpha', 'alpha_pos', 'beta_pos',
                   'sigma2_pos'] %}
select
    model_id,
    layer,
    q_head,
    k_head,
    {{ head_label('layer', 'q_head') }} as head_label,
    n_q,
    n_k,
    d,
    {%- for c in doubles %}
    {{ finite(c) }} as {{ c }},
    {%- endfor %}
    seed_used,
    context_length,
    cov_mode,
    eligibility,
    pairs,
    empirical,
    config_id
from {{ source('qkwh', 'plasticity_heads') }} as t
where {{ is_current_config('t', 'plasticity') }}
