-- One row per analysed head with the PCA, rotation and plasticity metrics side by side, plus
-- the model context (family, depth) that layer- and family-level marts group by.
with keys as (
    select model_id, layer, q_head, k_head from {{ ref('stg_heads') }}
    union
    select model_id, layer, q_head, k_head from {{ ref('stg_pca_heads') }}
    union
    select model_id, layer, q_head, k_head from {{ ref('stg_rotation_heads') }}
    union
    select model_id, layer, q_head, k_head from {{ ref('int_head_plasticity') }}
),

heads as (
    select model_id, layer, q_head, any_value(k_head) as k_head
    from keys
    group by model_id, layer, q_head
),

models as (
    select * from {{ ref('int_models') }}
),

tax as (
    select * from {{ ref('int_head_taxonomy') }}
),

pca as (
    select * from {{ ref('stg_pca_heads') }}
),

rot as (
    select * from {{ ref('stg_rotation_heads') }}
),

pl as (
    select * from {{ ref('int_head_plasticity') }}
)

select
    h.model_id,
    h.layer,
    h.q_head,
    h.k_head,
    {{ head_label('h.layer', 'h.q_head') }} as head_label,
    m.family,
    m.num_layers,
    m.context_length,
    case when m.num_layers > 1 then h.layer / (m.num_layers - 1.0) end as depth,
    case when m.num_layers > 1
         then cast(least(floor(10 * h.layer / (m.num_layers - 1.0)), 9) as integer) end as depth_bin,
    list_contains(m.nope_layer_list, h.layer) as is_nope,
    list_contains(m.cross_attention_layer_list, h.layer) as is_cross_attention,
    -- PCA (spec §2.1)
    (pca.model_id is not null) as has_pca,
    tax.ev0,
    pca.ev1,
    tax.r_q0,
    tax.r_k0,
    tax.abs_r_k0,
    tax.taxonomy,
    pca.pos_var_q_thesis,
    pca.pos_var_k_thesis,
    pca.pc0_share_pos_q,
    pca.pc0_share_pos_k,
    pca.pos_var_q_exact,
    pca.pos_var_k_exact,
    pca.qk_sep_pc0,
    pca.fisher_pc0,
    pca.qk_acc_pc01,
    -- rotation (spec §2.2)
    (rot.model_id is not null) as has_rotation,
    rot.degenerate,
    rot.position_r,
    rot.r_q_a,
    rot.r_k_a,
    abs(rot.r_q_a) as abs_r_q_a,
    abs(rot.r_k_a) as abs_r_k_a,
    rot.alpha_q,
    rot.alpha_k,
    abs(rot.alpha_q) as abs_alpha_q,
    abs(rot.alpha_k) as abs_alpha_k,
    rot.mu_q_a,
    rot.mu_k_a,
    rot.mu_q_b,
    rot.mu_k_b,
    rot.bias_strength,
    rot.bias_strength_ctx,
    rot.slope_ratio_kq,
    rot.separation_strength,
    rot.var_frac_a,
    rot.var_frac_b,
    rot.plane_var_fraction,
    rot.content_var_b,
    rot.content_var_b_frac,
    rot.residual_pos_r,
    rot.n_active_pairs,
    rot.active_var_frac,
    -- plasticity (spec §2.3)
    (pl.model_id is not null) as has_plasticity,
    pl.ap_overall,
    {%- for k in range(10) %}
    pl.decile_{{ k }},
    {%- endfor %}
    pl.ap_first_20pct,
    pl.ap_last_20pct,
    pl.ap_drop,
    pl.q_beta_norm,
    pl.q_R2_pos
from heads as h
join models as m using (model_id)
left join tax using (model_id, layer, q_head)
left join pca using (model_id, layer, q_head)
left join rot using (model_id, layer, q_head)
left join pl using (model_id, layer, q_head)
