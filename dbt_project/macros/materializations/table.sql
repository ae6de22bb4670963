{#-
  The table materialization of this project's SQL models, in place of dbt-duckdb's.

  dbt-duckdb builds a table under a temporary name, looks up its indexes, renames the old table
  away, renames the new one in, commits and drops the old one: four statements besides the
  CREATE, and their Jinja, for every table, which together cost more than the SQL of most of the
  project's marts.  None of what they serve is used here (no indexes, foreign keys, grants,
  contracts or persisted docs), and DuckDB replaces a table atomically inside a transaction, so
  a table is one statement:

    pre-hooks (outside, then inside the transaction: `BEGIN`)
    create or replace table <model> as (<its SQL>)
    post-hooks inside the transaction, `COMMIT`, post-hooks outside

  A reader sees the old table or the new one, never neither.  A Python model writes its data
  frame into a new table, which replaces the old one in the same transaction.
-#}
{% materialization table, adapter="duckdb", supported_languages=['sql', 'python'] %}
  {%- set language = model['language'] -%}
  {%- set existing_relation = load_cached_relation(this) -%}
  {%- set target_relation = this.incorporate(type='table') -%}
  {#- what an interrupted build of dbt-duckdb's own materialization may have left behind -#}
  {%- for leftover in [make_intermediate_relation(target_relation), make_backup_relation(target_relation, 'table')] -%}
    {{ drop_relation_if_exists(load_cached_relation(leftover)) }}
  {%- endfor -%}
  {#- a view of the same name (an older layout) cannot be replaced by a table -#}
  {%- if existing_relation is not none and not existing_relation.is_table -%}
    {{ drop_relation_if_exists(existing_relation) }}
    {%- set existing_relation = none -%}
  {%- endif -%}

  {{ run_hooks(pre_hooks, inside_transaction=False) }}
  {{ run_hooks(pre_hooks, inside_transaction=True) }}

  {%- if language == 'sql' %}
  {% call statement('main') -%}
    create or replace table {{ target_relation }} as (
      {{ compiled_code }}
    )
  {%- endcall %}
  {%- else %}
  {#- a Python model writes its data frame into a new table, swapped in by name -#}
  {%- set intermediate_relation = make_intermediate_relation(target_relation) -%}
  {% call statement('main', language=language) -%}
    {{- create_table_as(False, intermediate_relation, compiled_code, language) }}
  {%- endcall %}
  {%- if existing_relation is not none %}
  {% do adapter.drop_relation(existing_relation) %}
  {%- endif %}
  {{ adapter.rename_relation(intermediate_relation, target_relation) }}
  {%- endif %}

  {{ run_hooks(post_hooks, inside_transaction=True) }}
  {{ adapter.commit() }}
  {{ run_hooks(post_hooks, inside_transaction=False) }}

  {% do adapter.cache_added(target_relation) %}
  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
