{#
  Marts and seeds live in the warehouse's `main` schema, next to the source tables, so
  `SELECT * FROM model_summary` works from any client.  A model configured with a custom schema
  (dbt_project.yml: staging -> `staging`, intermediate and uncertainty -> `intermediate`) goes to
  a schema of exactly that name: dbt's default would make it `main_staging`.
#}
{% macro generate_schema_name(custom_schema_name, node) -%}
    {%- if custom_schema_name is none -%}
        {{ target.schema }}
    {%- else -%}
        {{ custom_schema_name | trim }}
    {%- endif -%}
{%- endmacro %}

{#
  on-run-start: builds made before staging and intermediate models had schemas of their own
  left them in the target schema (`main`).  Drop those leftovers: only relations named like a
  model of this project that now lives in another schema, and only as the type found
  (view or table).  Raw tables, marts, seeds and anything else in `main` are never touched.
#}
{% macro drop_relocated_models() -%}
    {%- if execute -%}
        {%- set moved = [] -%}
        {%- for node in graph.nodes.values() -%}
            {%- if node.resource_type == 'model' and node.schema != target.schema
                  and modules.re.match('^[a-z][a-z0-9_]*$', node.alias) -%}
                {%- do moved.append(node.alias) -%}
            {%- endif -%}
        {%- endfor -%}
        {%- if moved -%}
            {%- set found = run_query(
                "select table_name, table_type from information_schema.tables"
                ~ " where table_catalog = current_database() and table_schema = '" ~ target.schema ~ "'"
                ~ " and table_name in ('" ~ moved | join("', '") ~ "') order by table_name") -%}
            {%- for row in found.rows -%}
                {%- set kind = 'view' if row[1] == 'VIEW' else 'table' -%}
                {%- do run_query('drop ' ~ kind ~ ' if exists "' ~ target.schema ~ '"."' ~ row[0] ~ '"') -%}
                {%- do log('dropped the ' ~ kind ~ ' ' ~ target.schema ~ '.' ~ row[0] ~ ' of an earlier layout', info=true) -%}
            {%- endfor -%}
        {%- endif -%}
    {%- endif -%}
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
