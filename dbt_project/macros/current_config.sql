{#
  The one definition of "the parameter set a (model, analysis) currently reports" (table
  current_config, kept by `qkwh compute` and `qkwh runs use`): true for a per-head result row
  ALIAS of ANALYSIS whose config_id is that set.  Every staging view over a per-head table
  filters with it, so no mart mixes two parameter sets of one model and analysis.

  The legacy exports (qkwh/sql/export_legacy_*.sql, run by Python, not dbt) use this same macro:
  qkwh.export renders them with Jinja after loading this file, with `source(...)` naming the
  warehouse table.  So keep this file self-contained: plain SQL, `source()` and the two
  arguments only.
#}
{% macro is_current_config(alias, analysis) -%}
    exists (
        select 1 from {{ source('qkwh', 'current_config') }} as cc
        where cc.model_id = {{ alias }}.model_id
          and cc.analysis = '{{ analysis }}'
          and cc.config_id = {{ alias }}.config_id
    )
{%- endmacro %}
