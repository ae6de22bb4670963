-- docs/metrics/aggregation.md: a model decile is the unweighted mean over the model's heads with a value for it
-- (both estimators: model_summary against head_metrics).
{%- set checks = [] %}
{%- for e in plasticity_estimators() %}
{%- for k in range(10) %}
{%- do checks.append('decile_' ~ k ~ e.suffix) %}
{%- endfor %}
{%- do checks.append('ap_overall' ~ e.suffix) %}
{%- endfor %}
{%- for c in checks %}
select m.model_id, '{{ c }}' as metric, m.{{ c }} as model_value, avg(h.{{ c }}) as head_mean
from {{ ref('model_summary') }} as m
join {{ ref('head_metrics') }} as h using (model_id)
group by m.model_id, m.{{ c }}
having (m.{{ c }} is null) <> (avg(h.{{ c }}) is null)
    or abs(m.{{ c }} - avg(h.{{ c }})) > 1e-12
{{ 'union all' if not loop.last }}
{%- endfor %}
