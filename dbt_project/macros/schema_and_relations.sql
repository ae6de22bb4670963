{#
  Everything this project builds lives in the warehouse's `main` schema, next to the source
  tables, so `SELECT * FROM model_summary` works from any client.  dbt's default would turn a
  custom schema into `main_<custom>`; we ignore custom schemas altogether.
#}
{% macro generate_schema_name(custom_schema_name, node) -%}
    {{ target.schema }}
{%- endmacro %}

{#
  Render refs and sources without the database (catalog) part.  DuckDB names the catalog after
  the file stem, so a view created as "qkwh"."main"."stg_models" would break once the warehouse
  file is copied or renamed; "main"."stg_models" keeps every view portable.
#}
{% macro ref() %}
    {%- set rel = builtins.ref(*varargs, **kwargs) -%}
    {%- if rel is not none and rel.include is defined -%}
        {%- do return(rel.include(database=False)) -%}
    {%- endif -%}
    {%- do return(rel) -%}
{% endmacro %}

{% macro source() %}
    {%- set rel = builtins.source(*varargs, **kwargs) -%}
    {%- if rel is not none and rel.include is defined -%}
        {%- do return(rel.include(database=False)) -%}
    {%- endif -%}
    {%- do return(rel) -%}
{% endmacro %}
