{#
  Distinct metric names of the plasticity_bins seed, in (bin set, bin index) order, read at
  execution time so model_summary gets one column per bin metric without hard-coding the bins.
  Returns [] at parse time and when the seed is not loaded yet (e.g. `dbt compile` on a fresh
  warehouse).
#}
{% macro plasticity_bin_metric_names() %}
    {%- if not execute -%}
        {%- do return([]) -%}
    {%- endif -%}
    {%- set seed_rel = ref('plasticity_bins') -%}
    {%- set existing = adapter.get_relation(database=seed_rel.database, schema=seed_rel.schema,
                                            identifier=seed_rel.identifier) -%}
    {%- if existing is none -%}
        {%- do return([]) -%}
    {%- endif -%}
    {%- set sql -%}
        select metric_name
        from {{ seed_rel }}
        group by metric_name
        order by min(case bin_set when 'lbp' then 0 when 'ruler' then 1 else 2 end),
                 min(lo_tokens), min(hi_tokens), metric_name
    {%- endset -%}
    {%- set result = run_query(sql) -%}
    {%- set names = [] -%}
    {%- for row in result.rows -%}
        {%- if modules.re.match('^[a-z][a-z0-9_]*$', row[0]) -%}
            {%- do names.append(row[0]) -%}
        {%- else -%}
            {%- do exceptions.raise_compiler_error('plasticity_bins.metric_name must be a lower-case identifier: ' ~ row[0]) -%}
        {%- endif -%}
    {%- endfor -%}
    {%- do return(names) -%}
{% endmacro %}
