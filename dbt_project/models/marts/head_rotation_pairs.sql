-- The complement rotation planes of each head (one row per head and SVD pair, docs/metrics/rotation.md):
-- the pair's share of complement variance, its angle-position statistics and whether it counts
-- as an active RoPE plane, with the model's family and label and the head's depth.  The
-- complement-pair collage labels its panels from here.
select
    p.model_id,
    m.family,
    m.label,
    p.layer,
    p.q_head,
    p.k_head,
    p.head_label,
    {{ depth('p.layer', 'm.num_layers') }} as depth,
    p.pair,
    p.sv_var_share,
    p.angle_r,
    p.angle_r_circ,
    p.omega_pair,
    p.angle_r_circ_pm,
    p.omega_pair_pm,
    p.qk_acc,
    p.active,
    p.config_id
from {{ ref('stg_rotation_pairs') }} as p
join {{ ref('int_models') }} as m using (model_id)
-- a stable row order for readers that select without ORDER BY
order by model_id, layer, q_head, pair
