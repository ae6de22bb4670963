-- Planar rotation per head; non-finite doubles (degenerate heads: NaN) become NULL.
{%- set doubles = ['position_r', 'r_q_a', 'r_k_a', 'alpha_q', 'alpha_k', 'intercept_q_a',
                   'intercept_k_a', 'mu_q_a', 'mu_k_a', 'mu_q_b', 'mu_k_b', 'bias_strength',
                   'bias_strength_ctx', 'slope_ratio_kq', 'separation_strength', 'var_frac_a',
                   'var_frac_b', 'plane_var_fraction', 'content_var_b', 'content_var_b_frac',
                   'residual_pos_r', 'omega', 'omega_r_squared', 'active_var_frac', 'cos_b_bc'] %}
select
    model_id,
    layer,
    q_head,
    k_head,
    {{ head_label('layer', 'q_head') }} as head_label,
    n_q,
    n_k,
    d,
    coalesce(degenerate, false) as degenerate,
    b_mode,
    pairing,
    {%- for c in doubles %}
    {{ finite(c) }} as {{ c }},
    {%- endfor %}
    n_active_pairs,
    config_id
from {{ source('qkwh', 'rotation_heads') }} as t
where {{ is_current_config('t', 'rotation') }}
