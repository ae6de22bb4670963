{#
  A boolean SQL expression over the model's columns holds on every row (NULL counts as a pass,
  so optional columns can be checked without a separate `where`).
#}
{% test expression_is_true(model, expression) %}
select *
from {{ model }}
where not coalesce(({{ expression }}), true)
{% endtest %}
