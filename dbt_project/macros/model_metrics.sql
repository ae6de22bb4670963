{#
  The catalogue of model-level metrics that are aggregates over a model's heads
  (docs/metrics/aggregation.md: the model value is the mean over its analysed heads unless
  stated).  The metrics are declared with their analysis (ModelMetric in qkwh/analyses/declared/)
  and generated into declared_metrics() (macros/declared_metrics.sql, `python -m qkwh.generate`);
  the macros below only select from it.  int_head_metric_values evaluates the head-level
  expressions; int_model_metric_replicates aggregates them once per bootstrap replicate
  (replicate 0 = every layer once = the point estimate), so the model values of model_summary
  and their intervals come from one implementation.

  agg: mean (skips NULL heads; 0/1 indicators make fractions), median, max, derived.
#}

{# Every declared metric, the per-taxonomy-class ones expanded over var('taxonomy_classes'). #}
{% macro model_metric_catalogue() -%}
    {%- set out = [] -%}
    {%- for e in declared_metrics() -%}
        {%- if e.per_taxonomy_class -%}
            {%- for t in taxonomy_class_names() -%}
                {%- set d = {} -%}
                {%- do d.update(e) -%}
                {%- do d.update({'metric': e.metric.replace('{class}', t), 'expr': e.expr.replace('{class}', t)}) -%}
                {%- do out.append(d) -%}
            {%- endfor -%}
        {%- else -%}
            {%- do out.append(e) -%}
        {%- endif -%}
    {%- endfor -%}
    {%- do return(out) -%}
{%- endmacro %}

{# The metrics read from head_metrics (one column expression per head, evaluated side by side). #}
{% macro head_metric_catalogue() -%}
    {%- set m = [] -%}
    {%- for e in model_metric_catalogue() if e.source == 'head_metrics' and e.agg != 'derived' -%}
        {%- do m.append(e) -%}
    {%- endfor -%}
    {%- do return(m) -%}
{%- endmacro %}

{#
  The metrics read from any other relation with one row (or one row per `where`) per head:
  the per-component PCA means, the RoPE band energy shares and the metrics of analyses of your
  own (their staging views).  The RoPE band plasticity has its own path (rope_head_metrics).
#}
{% macro relation_metric_catalogue() -%}
    {%- set m = [] -%}
    {%- for e in model_metric_catalogue() if e.agg != 'derived' and e.source not in ('head_metrics', 'int_rope_band_head_plasticity') -%}
        {%- do m.append(e) -%}
    {%- endfor -%}
    {%- do return(m) -%}
{%- endmacro %}

{#
  Model metrics derived from other model metrics of the same replicate (docs/metrics/aggregation.md#model-plasticity-profile,
  both estimators): quintiles, first / last 20 %, drop and the NoPE-study decile means for
  each estimator, the Gaussian-minus-empirical gaps, and bias_strength x L_ctx (rules
  plasticity_profile, gauss_gap, bias_strength_ctx).  name -> group; the expressions are in
  int_model_metric_replicates.
#}
{% macro derived_metric_groups() -%}
    {%- set m = {} -%}
    {%- for e in model_metric_catalogue() if e.agg == 'derived' and e.rule != 'rope_profile' -%}
        {%- do m.update({e.metric: e.grp}) -%}
    {%- endfor -%}
    {%- do return(m) -%}
{%- endmacro %}

{# The metrics compared between models and datasets: var('comparison_metrics') or the declared ones. #}
{% macro comparison_metrics() -%}
    {%- do return(var('comparison_metrics', declared_comparison_metrics())) -%}
{%- endmacro %}


{# Every metric with an interval: name -> group (the accepted values of model_metric_ci.metric). #}
{% macro model_metric_groups() -%}
    {%- set m = {} -%}
    {%- for e in head_metric_catalogue() + relation_metric_catalogue() -%}
        {%- do m.update({e.metric: e.grp}) -%}
    {%- endfor -%}
    {%- do m.update(derived_metric_groups()) -%}
    {%- for e in model_metric_catalogue() if e.metric not in m -%}
        {%- do m.update({e.metric: e.grp}) -%}
    {%- endfor -%}
    {%- do return(m) -%}
{%- endmacro %}

{# The catalogue as a relation (metric, agg, metric_group) for joins. #}
{% macro metric_catalogue_values() -%}
    (values
    {%- for e in model_metric_catalogue() if e.agg != 'derived' %}
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
    max(case when {{ alias }}.metric = '{{ m }}' then {{ alias }}.value end) as {{ m }}{{ ',' if not loop.last }}
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
