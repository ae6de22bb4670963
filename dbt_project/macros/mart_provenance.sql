{#- Which build wrote each table (read by qkwh/status.py to tell stale marts).

    Every table model of this project (intermediate, uncertainty, marts) runs
    qkwh_forget_relation() before it is rebuilt (its own committed statement) and
    qkwh_record_relation() after, in the transaction that writes the table (SQL models).  A build
    interrupted between the two, or a failing model, leaves the table without a record: stale
    until rebuilt.  The build recorded is the one `qkwh build` marked running in mart_builds
    (NULL when dbt runs outside qkwh). -#}

{% macro qkwh_forget_relation() -%}
delete from mart_relations where relation = '{{ this.identifier }}'
{%- endmacro %}

{% macro qkwh_record_relation() -%}
insert into mart_relations (relation, build_id)
select '{{ this.identifier }}', (select max(build_id) from mart_builds where running)
{%- endmacro %}
