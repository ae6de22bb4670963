{#
  The combination of `columns` is unique across rows.  NULLs compare equal (a model-level row
  with layer NULL and a second one with layer NULL are duplicates), unlike SQL's `unique`.
#}
{% test unique_combination(model, columns) %}
select {{ columns | join(', ') }}, count(*) as n_rows
from {{ model }}
group by all
having count(*) > 1
{% endtest %}
