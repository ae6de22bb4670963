-- Model-level planar-rotation summary (spec §4, §5.3): means over heads (|x| columns are means
-- of per-head absolute values), bias medians/fractions, and median + IQR of the four quantities
-- the SmolLM3 trajectory figure shows.  Degenerate heads carry NULL metrics and drop out.
with heads as (
    select * from {{ ref('int_head_metrics') }} where has_rotation
)

select
    model_id,
    count(*) as n_heads_rotation,
    count(*) filter (where degenerate) as n_degenerate,
    avg(position_r) as position_r,
    avg(abs_r_q_a) as abs_r_q_a,
    avg(abs_r_k_a) as abs_r_k_a,
    avg(abs_alpha_q) as abs_alpha_q,
    avg(abs_alpha_k) as abs_alpha_k,
    avg(alpha_q) as alpha_q,
    avg(alpha_k) as alpha_k,
    avg(mu_q_a) as mu_q_a,
    avg(mu_k_a) as mu_k_a,
    avg(bias_strength) as bias_strength,
    median(bias_strength) as bias_strength_median,
    avg(case when bias_strength > 0 then 1.0 when bias_strength is not null then 0.0 end)
        as frac_bias_positive,
    avg(case when mu_q_a > 0 then 1.0 when mu_q_a is not null then 0.0 end) as frac_mu_q_a_positive,
    avg(bias_strength_ctx) as bias_strength_ctx_mean,
    median(slope_ratio_kq) as slope_ratio_kq_median,
    avg(separation_strength) as separation_strength,
    avg(var_frac_a) as var_frac_a,
    avg(var_frac_b) as var_frac_b,
    avg(plane_var_fraction) as plane_var_fraction,
    avg(case when var_frac_b > var_frac_a then 1.0
             when var_frac_b is not null and var_frac_a is not null then 0.0 end) as frac_var_b_gt_a,
    avg(content_var_b) as content_var_b,
    avg(content_var_b_frac) as content_var_b_frac,
    max(residual_pos_r) as max_residual_pos_r,
    avg(n_active_pairs) as n_active_pairs,
    avg(active_var_frac) as active_var_frac,
    {%- for c in ['abs_r_k_a', 'separation_strength', 'bias_strength', 'plane_var_fraction'] %}
    quantile_cont({{ c }}, 0.25) as {{ c }}_q25,
    quantile_cont({{ c }}, 0.5) as {{ c }}_q50,
    quantile_cont({{ c }}, 0.75) as {{ c }}_q75{{ ',' if not loop.last }}
    {%- endfor %}
from heads
group by model_id
