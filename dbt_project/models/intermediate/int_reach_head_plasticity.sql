-- Softmax reach beside pairwise plasticity, one row per head with both (docs/metrics/reach.md):
-- the head's reach and reach_drop, its Gaussian-estimator ap_overall and ap_drop, the model's
-- medians of reach and ap_overall over these heads, and globality_gap = 1 for a head whose
-- pairwise plasticity is high (ap_overall >= the model's median) but whose softmax reach is low
-- (reach <= its median), else 0.
with joined as (
    select
        r.model_id,
        r.layer,
        r.q_head,
        r.head_label,
        r.reach,
        r.reach_drop,
        r.local_mass,
        r.far_mass,
        r.sink_mass,
        r.reach_exact,
        r.sink_mass_exact,
        p.ap_overall,
        p.ap_drop
    from {{ ref('stg_reach_heads') }} as r
    join {{ ref('int_head_plasticity') }} as p
        on p.model_id = r.model_id
       and p.layer = r.layer
       and p.q_head = r.q_head
       and p.estimator = 'gaussian'
    where r.reach is not null and p.ap_overall is not null
),

medians as (
    select
        *,
        median(reach) over (partition by model_id) as model_median_reach,
        median(ap_overall) over (partition by model_id) as model_median_ap_overall
    from joined
)

select
    *,
    case
        when ap_overall >= model_median_ap_overall and reach <= model_median_reach then 1
        else 0
    end as globality_gap
from medians
