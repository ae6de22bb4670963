{#
  Every value of the column is the group of a declared model-level metric (the metric groups of
  model_metric_catalogue(): each analysis's name unless its metrics name another group, e.g.
  taxonomy, gauss_gap).
#}
{% test declared_metric_group(model, column_name) %}
{%- set groups = [] %}
{%- for g in model_metric_groups().values() if g not in groups %}{% do groups.append(g) %}{% endfor %}
select {{ column_name }}
from {{ model }}
where {{ column_name }} is not null
  and {{ column_name }} not in ({% for g in groups %}'{{ g }}'{{ ', ' if not loop.last }}{% endfor %})
{% endtest %}
