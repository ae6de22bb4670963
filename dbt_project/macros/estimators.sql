{#
  The two plasticity estimators of a query bucket, in one place: the Gaussian closed form
  (ap_bucket) and the count over the bucket's real queries (ap_bucket_empirical).  Every head and
  model aggregate of plasticity is computed once, in long form with an `estimator` column, and
  pivoted with estimator_suffix(): Gaussian columns keep their names, empirical ones end in
  `_empirical`.
#}
{% macro plasticity_estimators() -%}
    {%- do return([
        {'name': 'gaussian', 'ap': 'ap_bucket', 'se': 'ap_bucket_se', 'suffix': ''},
        {'name': 'empirical', 'ap': 'ap_bucket_empirical', 'se': 'ap_bucket_empirical_se', 'suffix': '_empirical'},
    ]) -%}
{%- endmacro %}

{#
  gauss_gap: the Gaussian estimate minus the empirical one (docs/metrics/plasticity.md); > 0 when
  the Gaussian shortcut overstates plasticity.  One definition for every grain: a bucket
  (ap_bucket), a head or a model (ap_overall -> gauss_gap, ap_drop -> gauss_gap_drop).
#}
{% macro gauss_gap(gaussian, empirical) -%}
    ({{ gaussian }}) - ({{ empirical }})
{%- endmacro %}

{# Plasticity head / model columns that exist once per estimator (before the suffix). #}
{% macro plasticity_profile_columns() -%}
    {%- set cols = ['ap_overall'] -%}
    {%- for k in range(10) %}{% do cols.append('decile_' ~ k) %}{% endfor -%}
    {%- for k in range(5) %}{% do cols.append('quintile_' ~ k) %}{% endfor -%}
    {%- do cols.extend(['ap_first_20pct', 'ap_last_20pct', 'ap_drop']) -%}
    {%- do return(cols) -%}
{%- endmacro %}

{#
  The derived plasticity quantities (docs/metrics/aggregation.md#head-plasticity-profile) from decile columns `<prefix>decile_k<suffix>`
  (a head row or a model row alike): quintiles, first / last 20 %, drop and the NoPE-study
  decile means.  Yields "expr as name" select items.
#}
{% macro plasticity_derived(prefix='', suffix='', recovery=false) -%}
    {%- set d = [] -%}
    {%- for k in range(10) %}{% do d.append(prefix ~ 'decile_' ~ k ~ suffix) %}{% endfor -%}
    {%- for k in range(5) %}
    {{ mean2(d[2 * k], d[2 * k + 1]) }} as quintile_{{ k }}{{ suffix }},
    {%- endfor %}
    {{ mean2(d[0], d[1]) }} as ap_first_20pct{{ suffix }},
    {{ mean2(d[8], d[9]) }} as ap_last_20pct{{ suffix }},
    {{ mean2(d[0], d[1]) }} - {{ mean2(d[8], d[9]) }} as ap_drop{{ suffix }}
    {%- if recovery %},
    {{ mean2(d[4], d[5]) }} as decile_4_5_mean{{ suffix }},
    {{ mean2(d[6], d[7]) }} as decile_6_7_mean{{ suffix }},
    {{ mean2(d[6], d[7]) }} - {{ mean2(d[4], d[5]) }} as mid_context_recovery{{ suffix }}
    {%- endif %}
{%- endmacro %}
