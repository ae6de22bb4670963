-- One row per head with softmax reach results (docs/metrics/reach.md): the head metrics of
-- reach_heads, their exact counterparts, and (where the head has plasticity results) its
-- ap_overall, ap_drop and the globality_gap flag of int_reach_head_plasticity.
select
    r.model_id,
    r.layer,
    r.q_head,
    r.head_label,
    r.reach,
    r.reach_first_20pct,
    r.reach_last_20pct,
    r.reach_drop,
    r.local_mass,
    r.far_mass,
    r.sink_mass,
    r.mean_ess,
    r.n_queries_used,
    r.n_queries_skipped,
    r.scaling_source,
    r.reach_exact,
    r.sink_mass_exact,
    r.entropy_exact,
    p.ap_overall,
    p.ap_drop,
    p.globality_gap
from {{ ref('stg_reach_heads') }} as r
left join {{ ref('int_reach_head_plasticity') }} as p
    on p.model_id = r.model_id and p.layer = r.layer and p.q_head = r.q_head
order by r.model_id, r.layer, r.q_head
