{#
  `columns` form the table's key: no NULL in any of them and no two rows with the same
  combination (unique + not_null for a composite key, in one query).  Returns the offending
  key values with the number of rows carrying them.
#}
{% test primary_key(model, columns) %}
select {{ columns | join(', ') }}, count(*) as n_rows
from {{ model }}
group by all
having count(*) > 1
    {%- for c in columns %}
    or {{ c }} is null
    {%- endfor %}
{% endtest %}
