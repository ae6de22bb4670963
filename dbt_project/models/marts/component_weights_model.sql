-- Positional component weights per model (docs/metrics/aggregation.md#layers-families-components-heatmaps): mean over heads of component_weight
-- (and component_r2) per head-dimension index, separately per d.  rope_pair_index groups the
-- two dims of one RoPE frequency (HF rotate-half layout: i and i + d/2).
with comps as (
    select c.*, coalesce(p.d, m.head_dim) as d
    from {{ ref('stg_plasticity_components') }} as c
    join {{ ref('int_models') }} as m using (model_id)
    left join {{ ref('stg_plasticity_heads') }} as p using (model_id, layer, q_head)
)

select
    model_id,
    d,
    component,
    case when d > 1 then component % (d // 2) end as rope_pair_index,
    case when d > 1 then component // (d // 2) end as rotate_half,
    avg(component_weight) as component_weight,
    stddev_samp(component_weight) as component_weight_sd,
    avg(component_r2) as component_r2,
    count(component_weight) as n_heads
from comps
group by model_id, d, component
-- a stable row order for readers that select without ORDER BY
order by model_id, d, component
