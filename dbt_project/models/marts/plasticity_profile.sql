-- Plasticity profile (spec §2.3.8) per model (scope = 'model') and per head (scope = 'head'):
-- deciles, quintiles, ap_first_20pct, ap_last_20pct, ap_drop and ap_overall.
{%- set value_cols = ['ap_overall'] + ['decile_0', 'decile_1', 'decile_2', 'decile_3', 'decile_4',
      'decile_5', 'decile_6', 'decile_7', 'decile_8', 'decile_9', 'quintile_0', 'quintile_1',
      'quintile_2', 'quintile_3', 'quintile_4', 'ap_first_20pct', 'ap_last_20pct', 'ap_drop'] %}
with models as (
    select model_id, family, context_length from {{ ref('int_models') }}
)

select
    'model' as scope,
    p.model_id,
    m.family,
    m.context_length,
    cast(null as integer) as layer,
    cast(null as integer) as q_head,
    cast(null as integer) as k_head,
    cast(null as varchar) as head_label,
    p.n_heads_plasticity as n_heads,
    {%- for c in value_cols %}
    p.{{ c }}{{ ',' if not loop.last }}
    {%- endfor %}
from {{ ref('int_model_plasticity') }} as p
join models as m using (model_id)

union all

select
    'head' as scope,
    h.model_id,
    m.family,
    m.context_length,
    h.layer,
    h.q_head,
    h.k_head,
    h.head_label,
    1 as n_heads,
    {%- for c in value_cols %}
    h.{{ c }}{{ ',' if not loop.last }}
    {%- endfor %}
from {{ ref('int_head_plasticity') }} as h
join models as m using (model_id)
