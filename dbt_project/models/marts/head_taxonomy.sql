-- Head taxonomy (spec §3): one row per head with PCA results.
select
    t.model_id,
    t.layer,
    t.q_head,
    t.k_head,
    t.head_label,
    m.family,
    case when m.num_layers > 1 then t.layer / (m.num_layers - 1.0) end as depth,
    case when m.num_layers > 1
         then cast(least(floor(10 * t.layer / (m.num_layers - 1.0)), 9) as integer) end as depth_bin,
    t.r_q0,
    t.r_k0,
    t.abs_r_k0,
    t.ev0,
    t.taxonomy,
    t.taxonomy_th4,
    t.config_id
from {{ ref('int_head_taxonomy') }} as t
join {{ ref('int_models') }} as m using (model_id)
