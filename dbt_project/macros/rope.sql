{#
  RoPE frequency bands (docs/metrics/rope.md): the band and variant names, and the model-level
  metrics of band plasticity that get layer-cluster bootstrap intervals (model_metric_ci,
  model_comparisons).  A metric is named rope_<base>_<band>_<variant><estimator suffix>, e.g.
  rope_ap_drop_low_only or rope_ap_overall_high_without_empirical; this macro is the only place
  that spells the names.
#}
{% macro rope_bands() -%}
    {%- do return(['high', 'mid', 'low', 'unrotated']) -%}
{%- endmacro %}

{% macro rope_variants() -%}
    {%- do return(['only', 'without']) -%}
{%- endmacro %}

{#
  Every rope band-plasticity metric (declared by the analysis rope): metric, base (the plasticity
  column it is made of), band, variant, estimator, agg ('mean' over heads for ap_overall and the
  deciles, 'derived' from the model deciles of the same replicate for quintiles, first / last
  20 % and drop), support_metric (the head-level metric whose heads and layers it rests on).
#}
{% macro rope_metric_catalogue() -%}
    {%- set out = [] -%}
    {%- for e in model_metric_catalogue() if e.grp == 'rope' and e.base is defined -%}
        {%- do out.append(e) -%}
    {%- endfor -%}
    {%- do return(out) -%}
{%- endmacro %}

{# The rope metrics with agg = 'mean' (head-level values in int_head_metric_values). #}
{% macro rope_head_metrics() -%}
    {%- set out = [] -%}
    {%- for e in rope_metric_catalogue() -%}
        {%- if e.agg == 'mean' %}{% do out.append(e) %}{% endif -%}
    {%- endfor -%}
    {%- do return(out) -%}
{%- endmacro %}

{#
  The energy metrics: rope_q_energy_share_<band> and rope_k_energy_share_<band>, the mean over
  heads of the band's share of the query (key) energy (int_rope_band_head_energy, 0 for a head
  without the band).  Means over heads like the band plasticity, so they get the same
  layer-cluster intervals; `column` is the head-level column they are made of.
#}
{% macro rope_energy_metrics() -%}
    {%- set out = [] -%}
    {%- for e in model_metric_catalogue() if e.grp == 'rope' and e.column is defined -%}
        {%- do out.append(e) -%}
    {%- endfor -%}
    {%- do return(out) -%}
{%- endmacro %}

{# The catalogue as a relation (metric, base, band, variant, estimator, agg, support_metric). #}
{% macro rope_metric_values() -%}
    (values
    {%- for e in rope_metric_catalogue() %}
        ('{{ e.metric }}', '{{ e.base }}', '{{ e.band }}', '{{ e.variant }}', '{{ e.estimator }}',
         '{{ e.agg }}', '{{ e.support_metric }}'){{ ',' if not loop.last }}
    {%- endfor %}
    ) as rope_catalogue(metric, base, band, variant, estimator, agg, support_metric)
{%- endmacro %}

{# Display order of a band (high, mid, low, unrotated) for ORDER BY. #}
{% macro rope_band_order(band) -%}
    case {{ band }}
    {%- for b in rope_bands() %} when '{{ b }}' then {{ loop.index0 }}{% endfor %} end
{%- endmacro %}
