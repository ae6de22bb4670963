-- The estimate of model_metric_ci is the value model_summary reports (both are replicate 0 of
-- int_model_metric_replicates), and every interval holds its bounds in order.
{%- set cols = ['ap_overall', 'ap_drop', 'ap_first_20pct', 'decile_3', 'ap_overall_empirical',
                'ap_drop_empirical', 'gauss_gap', 'gauss_gap_drop', 'bias_strength',
                'bias_strength_median', 'bias_strength_ctx', 'abs_r_k_a', 'plane_var_fraction',
                'frac_bias_positive', 'ev_0', 'r_k_1', 'abs_r_k_0', 'frac_mixed', 'frac_q_positional',
                'qk_sep_pc0', 'max_residual_pos_r', 'q_R2_pos'] %}
select s.model_id, c.metric, c.estimate, c.ci_low, c.ci_high
from {{ ref('model_metric_ci') }} as c
join {{ ref('model_summary') }} as s using (model_id)
where (c.ci_low is not null and c.ci_low > c.ci_high)
   or (c.ci_low is null) <> (c.ci_high is null)
   or (c.ci_low is null) <> (c.se is null)
{%- for col in cols %}
   or (c.metric = '{{ col }}' and c.estimate is distinct from s.{{ col }})
{%- endfor %}
