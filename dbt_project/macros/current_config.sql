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

{#
  For an analysis that reads other analyses' parameters (its declaration's `uses`, e.g. the
  document jackknife: pca, rotation, plasticity): true for a row ALIAS whose parameter set was
  computed with the parameters those analyses currently report for the model.  The row's
  run_config records each used analysis's section (and seed, max_tokens_per_head); a section
  that differs from the one of the used analysis's current set means the row belongs to another
  parameter set (e.g. the jackknife of plasticity cov_mode=full after a recompute with
  cov_mode=diag), and the marts leave it out rather than pair it with the new set.  A section the
  row's run_config does not record (NULL), or a used analysis without a current set, is not
  compared.
#}
{% macro uses_are_current(alias, analysis, uses) -%}
    not exists (
        select 1
        from {{ source('qkwh', 'run_config') }} as own
        join {{ source('qkwh', 'current_config') }} as cu
            on cu.model_id = {{ alias }}.model_id
            and cu.analysis in ({% for u in uses %}'{{ u }}'{{ ', ' if not loop.last }}{% endfor %})
        join {{ source('qkwh', 'run_config') }} as ru on ru.config_id = cu.config_id
        where own.config_id = {{ alias }}.config_id
          and (
            {%- for key in ['seed', 'max_tokens_per_head'] %}
            json_extract(own.params_json, '$.{{ key }}') <> json_extract(ru.params_json, '$.{{ key }}') or
            {%- endfor %}
            json_extract(own.params_json, '$."' || cu.analysis || '"') <> json_extract(ru.params_json, '$."' || cu.analysis || '"')
          )
    )
{%- endmacro %}
