-- Every model-level metric as (model_id, metric, value), named as in the published tables:
-- plasticity, rotation and PCA summaries plus the preferred length-bin values.  Feeds
-- published_comparison and benchmark_joins.
{%- set plasticity_cols = ['ap_overall', 'ap_first_20pct', 'ap_last_20pct', 'ap_drop',
      'decile_0', 'decile_1', 'decile_2', 'decile_3', 'decile_4', 'decile_5', 'decile_6',
      'decile_7', 'decile_8', 'decile_9', 'quintile_0', 'quintile_1', 'quintile_2', 'quintile_3',
      'quintile_4', 'decile_4_5_mean', 'decile_6_7_mean', 'mid_context_recovery', 'q_beta_norm',
      'q_R2_pos'] %}
{%- set rotation_cols = ['position_r', 'abs_r_q_a', 'abs_r_k_a', 'abs_alpha_q', 'abs_alpha_k',
      'alpha_k', 'mu_q_a', 'bias_strength', 'bias_strength_median', 'frac_bias_positive',
      'frac_mu_q_a_positive', 'slope_ratio_kq_median', 'separation_strength', 'var_frac_a',
      'var_frac_b', 'plane_var_fraction', 'frac_var_b_gt_a', 'content_var_b', 'max_residual_pos_r',
      'n_active_pairs', 'active_var_frac'] %}
{%- set pca_cols = ['ev_0', 'ev_1', 'r_q_0', 'r_k_0', 'r_q_1', 'r_k_1', 'abs_r_k_0',
      'pos_var_q_thesis', 'pos_var_k_thesis', 'pc0_share_pos_q', 'pc0_share_pos_k',
      'qk_sep_pc0', 'fisher_pc0', 'qk_acc_pc01', 'frac_position_dominated', 'frac_q_positional',
      'frac_k_positional', 'frac_content_focused', 'frac_mixed'] %}
{%- set groups = [('int_model_plasticity', plasticity_cols), ('int_model_rotation', rotation_cols),
                  ('int_model_pca', pca_cols)] %}
{%- for model_name, cols in groups %}
select model_id, metric, value
from (
    select
        model_id,
        {%- for c in cols %}
        cast({{ c }} as double) as {{ c }}{{ ',' if not loop.last }}
        {%- endfor %}
    from {{ ref(model_name) }}
) unpivot include nulls (value for metric in ({{ cols | join(', ') }}))
union all
{%- endfor %}
select model_id, metric_name as metric, ap as value
from {{ ref('int_model_length_bins') }}
where is_preferred_metric
union all
select model_id, 'len_bin_total_drop' as metric, change_from_first_bin as value
from {{ ref('int_model_length_bins') }}
where bin_set = 'lbp'
  and bin_index = (select max(bin_index) from {{ ref('plasticity_bins') }} where bin_set = 'lbp')
