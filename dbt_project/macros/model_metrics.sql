{#
  The catalogue of model-level metrics that are aggregates over a model's heads (docs/metrics/aggregation.md: the
  model value is the mean over its analysed heads unless stated).  Each entry names the metric,
  the head-level expression over head_metrics, the aggregation over heads and the metric group.
  int_head_metric_values evaluates the expressions; int_model_metric_replicates aggregates them
  once per bootstrap replicate (replicate 0 = every layer once = the point estimate), so the
  model values of model_summary and their intervals come from one implementation.

  agg: mean (skips NULL heads; 0/1 indicators make fractions), median, max.
#}
{% macro head_metric_catalogue() -%}
    {%- set m = [] -%}
    {#- PCA head-level means (the per-pc means come from pca_components, see pc_metric_catalogue) -#}
    {%- for c in ['pos_var_q_thesis', 'pos_var_k_thesis', 'pc0_share_pos_q', 'pc0_share_pos_k',
                  'pos_var_q_exact', 'pos_var_k_exact', 'qk_sep_pc0', 'fisher_pc0', 'qk_acc_pc01'] -%}
        {%- do m.append({'metric': c, 'expr': c, 'agg': 'mean', 'grp': 'pca'}) -%}
    {%- endfor -%}
    {#- taxonomy fractions: share of heads with a class (docs/metrics/aggregation.md#taxonomy) -#}
    {%- for t in taxonomy_class_names() -%}
        {%- do m.append({'metric': 'frac_' ~ t, 'agg': 'mean', 'grp': 'taxonomy',
                         'expr': "case when taxonomy = '" ~ t ~ "' then 1.0 when taxonomy is not null then 0.0 end"}) -%}
    {%- endfor -%}
    {#- rotation (docs/metrics/aggregation.md#rotation-and-pca-summaries; degenerate heads carry NULL metrics and drop out) -#}
    {%- for c in ['position_r', 'abs_r_q_a', 'abs_r_k_a', 'abs_alpha_q', 'abs_alpha_k', 'alpha_q',
                  'alpha_k', 'mu_q_a', 'mu_k_a', 'bias_strength', 'separation_strength',
                  'var_frac_a', 'var_frac_b', 'plane_var_fraction', 'content_var_b',
                  'content_var_b_frac', 'n_active_pairs', 'active_var_frac'] -%}
        {%- do m.append({'metric': c, 'expr': c, 'agg': 'mean', 'grp': 'rotation'}) -%}
    {%- endfor -%}
    {%- do m.append({'metric': 'frac_bias_positive', 'agg': 'mean', 'grp': 'rotation',
                     'expr': 'case when bias_strength > 0 then 1.0 when bias_strength is not null then 0.0 end'}) -%}
    {%- do m.append({'metric': 'frac_mu_q_a_positive', 'agg': 'mean', 'grp': 'rotation',
                     'expr': 'case when mu_q_a > 0 then 1.0 when mu_q_a is not null then 0.0 end'}) -%}
    {%- do m.append({'metric': 'frac_var_b_gt_a', 'agg': 'mean', 'grp': 'rotation',
                     'expr': 'case when var_frac_b > var_frac_a then 1.0 when var_frac_b is not null and var_frac_a is not null then 0.0 end'}) -%}
    {%- do m.append({'metric': 'bias_strength_median', 'expr': 'bias_strength', 'agg': 'median', 'grp': 'rotation'}) -%}
    {%- do m.append({'metric': 'slope_ratio_kq_median', 'expr': 'slope_ratio_kq', 'agg': 'median', 'grp': 'rotation'}) -%}
    {%- do m.append({'metric': 'max_residual_pos_r', 'expr': 'residual_pos_r', 'agg': 'max', 'grp': 'rotation'}) -%}
    {#- plasticity (docs/metrics/aggregation.md#model-plasticity-profile): model decile_k = mean over heads with a value for it -#}
    {%- for e in plasticity_estimators() -%}
        {%- do m.append({'metric': 'ap_overall' ~ e.suffix, 'expr': 'ap_overall' ~ e.suffix, 'agg': 'mean', 'grp': 'plasticity'}) -%}
        {%- for k in range(10) -%}
            {%- do m.append({'metric': 'decile_' ~ k ~ e.suffix, 'expr': 'decile_' ~ k ~ e.suffix, 'agg': 'mean', 'grp': 'plasticity'}) -%}
        {%- endfor -%}
    {%- endfor -%}
    {%- do m.append({'metric': 'q_beta_norm', 'expr': 'q_beta_norm', 'agg': 'mean', 'grp': 'plasticity'}) -%}
    {%- do m.append({'metric': 'q_R2_pos', 'expr': 'q_R2_pos', 'agg': 'mean', 'grp': 'plasticity'}) -%}
    {%- do return(m) -%}
{%- endmacro %}

{# Per-principal-component means over heads (stg_pca_components): ev_k, r_q_k, r_k_k, abs_r_k_0. #}
{% macro pc_metric_catalogue() -%}
    {%- set m = [] -%}
    {%- for k in range(10) -%}
        {%- do m.append({'metric': 'ev_' ~ k, 'expr': 'explained_variance_ratio', 'pc': k, 'agg': 'mean', 'grp': 'pca'}) -%}
        {%- do m.append({'metric': 'r_q_' ~ k, 'expr': 'r_q', 'pc': k, 'agg': 'mean', 'grp': 'pca'}) -%}
        {%- do m.append({'metric': 'r_k_' ~ k, 'expr': 'r_k', 'pc': k, 'agg': 'mean', 'grp': 'pca'}) -%}
    {%- endfor -%}
    {%- do m.append({'metric': 'abs_r_k_0', 'expr': 'abs(r_k)', 'pc': 0, 'agg': 'mean', 'grp': 'pca'}) -%}
    {%- do return(m) -%}
{%- endmacro %}

{#
  Model metrics derived from other model metrics of the same replicate (docs/metrics/aggregation.md#model-plasticity-profile,
  both estimators): quintiles, first / last 20 %, drop and the NoPE-study decile means for
  each estimator, the Gaussian-minus-empirical gaps, and bias_strength x L_ctx.
  name -> group; the expressions are in int_model_metric_replicates.
#}
{% macro derived_metric_groups() -%}
    {%- set m = {} -%}
    {%- for e in plasticity_estimators() -%}
        {%- for c in ['quintile_0', 'quintile_1', 'quintile_2', 'quintile_3', 'quintile_4',
                      'ap_first_20pct', 'ap_last_20pct', 'ap_drop', 'decile_4_5_mean',
                      'decile_6_7_mean', 'mid_context_recovery'] -%}
            {%- do m.update({c ~ e.suffix: 'plasticity'}) -%}
        {%- endfor -%}
    {%- endfor -%}
    {%- do m.update({'gauss_gap': 'gauss_gap', 'gauss_gap_drop': 'gauss_gap', 'bias_strength_ctx': 'rotation'}) -%}
    {%- do return(m) -%}
{%- endmacro %}

{# Every metric with an interval: name -> group (the accepted values of model_metric_ci.metric). #}
{% macro model_metric_groups() -%}
    {%- set m = {} -%}
    {%- for e in head_metric_catalogue() + pc_metric_catalogue() -%}
        {%- do m.update({e.metric: e.grp}) -%}
    {%- endfor -%}
    {%- do m.update(derived_metric_groups()) -%}
    {%- for e in rope_metric_catalogue() + rope_energy_metrics() -%}
        {%- do m.update({e.metric: e.grp}) -%}
    {%- endfor -%}
    {%- do return(m) -%}
{%- endmacro %}

{# The catalogue as a relation (metric, agg, metric_group) for joins. #}
{% macro metric_catalogue_values() -%}
    (values
    {%- for e in head_metric_catalogue() + pc_metric_catalogue() + rope_head_metrics() + rope_energy_metrics() %}
        ('{{ e.metric }}', '{{ e.agg }}', '{{ e.grp }}'){{ ',' if not loop.last }}
    {%- endfor %}
    ) as catalogue(metric, agg, metric_group)
{%- endmacro %}

{#
  Select items "value of metric m in replicate 0 as m" for a relation of
  int_model_metric_replicates rows grouped by model_id: the point estimates.
#}
{% macro point_columns(metrics, alias='r') -%}
    {%- for m in metrics %}
    max({{ alias }}.value) filter (where {{ alias }}.metric = '{{ m }}') as {{ m }}{{ ',' if not loop.last }}
    {%- endfor %}
{%- endmacro %}

{# One row per model with the point estimates (replicate 0) of ``metrics`` as columns. #}
{% macro point_estimates(metrics) -%}
    select
        r.model_id,
        {{ point_columns(metrics) }}
    from {{ ref('int_model_metric_replicates') }} as r
    where r.replicate = 0
    group by r.model_id
{%- endmacro %}

{# Metric names of the catalogue (and derived metrics) that belong to one group. #}
{% macro metrics_of_group(group) -%}
    {%- set out = [] -%}
    {%- for name, grp in model_metric_groups().items() -%}
        {%- if grp == group %}{% do out.append(name) %}{% endif -%}
    {%- endfor -%}
    {%- do return(out) -%}
{%- endmacro %}
