-- spec §2.3.8: a model decile is the unweighted mean over the model's heads with a value for it.
{%- for k in range(10) %}
select m.model_id, {{ k }} as decile, m.decile_{{ k }} as model_value, avg(h.decile_{{ k }}) as head_mean
from {{ ref('plasticity_profile') }} as m
join {{ ref('plasticity_profile') }} as h
    on h.model_id = m.model_id and h.scope = 'head'
where m.scope = 'model'
group by m.model_id, m.decile_{{ k }}
having (m.decile_{{ k }} is null) <> (avg(h.decile_{{ k }}) is null)
    or abs(m.decile_{{ k }} - avg(h.decile_{{ k }})) > 1e-12
{{ 'union all' if not loop.last }}
{%- endfor %}
