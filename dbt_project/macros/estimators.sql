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

{#
  model_plasticity_derived: the model-level derived plasticity and gauss_gap columns from metric
  values in long form.  `relation` holds one row per (keys..., metric) with the value in column
  `value`; the macro pivots ap_overall and decile_0..9 of both estimators to wide columns, applies
  plasticity_derived (quintiles, first / last 20 %, drop, recovery) per estimator and the two
  gauss_gap columns.  `carry` lists further metrics pivoted alongside and passed through as
  columns of the same name (e.g. bias_strength).  Yields one select statement (use it as a CTE
  body or subquery) with the key columns, ap_overall[_empirical], the carried columns, the derived
  columns and gauss_gap / gauss_gap_drop.  Shared by the replicate, document-jackknife and
  dataset-pair models of models/intervals/.
#}
{% macro model_plasticity_derived(relation, keys, value='value', carry=[]) -%}
    select
        *,
        {{ gauss_gap('ap_overall', 'ap_overall_empirical') }} as gauss_gap,
        {{ gauss_gap('ap_drop', 'ap_drop_empirical') }} as gauss_gap_drop
    from (
        select
            {%- for k in keys %}
            w.{{ k }},
            {%- endfor %}
            w.ap_overall,
            w.ap_overall_empirical,
            {%- for c in carry %}
            w.{{ c }},
            {%- endfor %}
            {%- for e in plasticity_estimators() %}
            {{ plasticity_derived(prefix='w.', suffix=e.suffix, recovery=true) }}{{ ',' if not loop.last }}
            {%- endfor %}
        from (
            select
                {%- for k in keys %}
                {{ k }},
                {%- endfor %}
                {%- for c in carry %}
                max(case when metric = '{{ c }}' then {{ value }} end) as {{ c }},
                {%- endfor %}
                {%- for e in plasticity_estimators() %}
                max(case when metric = 'ap_overall{{ e.suffix }}' then {{ value }} end) as ap_overall{{ e.suffix }},
                {%- for k in range(10) %}
                max(case when metric = 'decile_{{ k }}{{ e.suffix }}' then {{ value }} end) as decile_{{ k }}{{ e.suffix }}{{ ',' if not (loop.last and e.suffix) }}
                {%- endfor %}
                {%- endfor %}
            from {{ relation }}
            group by {{ keys | join(', ') }}
        ) as w
    ) as derived_plasticity
{%- endmacro %}
