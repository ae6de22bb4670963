{#
  The two-sided standard-normal quantile z for a confidence level (0.95 -> 1.959964): the
  half-width of a normal interval in standard errors, estimate -/+ z * se.  Used where
  independent error terms are combined (se = sqrt of the sum of their squares), which a
  percentile interval cannot do: model_metric_ci's combined interval, dataset_comparisons.
#}
{% macro normal_z(level) -%}
    {%- set table = {0.8: 1.2815515655446004, 0.9: 1.6448536269514722, 0.95: 1.959963984540054,
                     0.98: 2.3263478740408408, 0.99: 2.5758293035489004} -%}
    {%- set key = (level | float) -%}
    {%- if key not in table -%}
        {{ exceptions.raise_compiler_error("ci_level " ~ level ~ ": the normal intervals know the levels " ~ (table.keys() | list | sort | join(', '))) }}
    {%- endif -%}
    {{ table[key] }}
{%- endmacro %}
