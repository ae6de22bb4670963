-- Head taxonomy (spec §3): one row per head with PCA results.
select
    t.model_id,
    t.layer,
    t.q_head,
    t.k_head,
    t.head_label,
    m.family,
    m.label,
    {{ depth('t.layer', 'm.num_layers') }} as depth,
    {{ depth_bin('t.layer', 'm.num_layers') }} as depth_bin,
    t.r_q0,
    t.r_k0,
    t.abs_r_k0,
    t.ev0,
    t.taxonomy,
    t.taxonomy_th4,
    t.config_id
from {{ ref('int_head_taxonomy') }} as t
join {{ ref('int_models') }} as m using (model_id)
