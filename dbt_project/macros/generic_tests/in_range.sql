{#
  Every non-null value of the column is finite and lies in [min_value, max_value] (inclusive, up
  to `tolerance` for floating-point rounding).  Used on fractions, probabilities (AP) and
  correlations.
#}
{% test in_range(model, column_name, min_value=none, max_value=none, tolerance=1e-12) %}
select {{ column_name }}
from {{ model }}
where {{ column_name }} is not null
  and (
        not isfinite({{ column_name }})
        {% if min_value is not none %} or {{ column_name }} < {{ min_value }} - {{ tolerance }} {% endif %}
        {% if max_value is not none %} or {{ column_name }} > {{ max_value }} + {{ tolerance }} {% endif %}
  )
{% endtest %}
