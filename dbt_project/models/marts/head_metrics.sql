-- One row per analysed head with every head-level metric side by side: PCA and taxonomy,
-- planar rotation, plasticity aggregates of both estimators (Gaussian columns unsuffixed,
-- empirical ones ending in _empirical) and the Gaussian-minus-empirical gaps, plus the model
-- context (family, label, depth) and the parameter sets the values come from.  The head-level
-- source of every model-level metric, its interval and the layer- and family-level marts.
{%- set profile = plasticity_profile_columns() + ['ap_overall_sampled_se', 'n_buckets_valid'] %}
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

pl_run as (
    select * from {{ ref('stg_plasticity_heads') }}
),

pl as (
    select
        model_id, layer, q_head
        {%- for e in plasticity_estimators() %}
        {%- for c in profile %},
        max(case when estimator = '{{ e.name }}' then {{ c }} end) as {{ c }}{{ e.suffix }}
        {%- endfor %}
        {%- endfor %}
    from {{ ref('int_head_plasticity') }}
    group by model_id, layer, q_head
),

gap_se as (
    -- SE of the head's Gaussian-minus-empirical gap from the paired bucket SEs (gauss_gap_se),
    -- over the buckets valid for both estimators, with the n_j weights of ap_overall
    select
        model_id, layer, q_head,
        sqrt(sum(weight * weight * gauss_gap_se * gauss_gap_se)) / sum(weight) as gauss_gap_sampled_se
    from {{ ref('int_plasticity_buckets') }}
    where estimator = 'gaussian' and is_valid and ap_bucket_empirical is not null
    group by model_id, layer, q_head
)

select
    h.model_id,
    h.layer,
    h.q_head,
    h.k_head,
    {{ head_label('h.layer', 'h.q_head') }} as head_label,
    m.family,
    m.label,
    m.num_layers,
    m.context_length,
    {{ depth('h.layer', 'm.num_layers') }} as depth,
    {{ depth_bin('h.layer', 'm.num_layers') }} as depth_bin,
    list_contains(m.nope_layer_list, h.layer) as is_nope,
    list_contains(m.cross_attention_layer_list, h.layer) as is_cross_attention,
    -- PCA (docs/metrics/pca.md) and taxonomy
    (pca.model_id is not null) as has_pca,
    tax.ev0,
    pca.ev1,
    tax.r_q0,
    tax.r_k0,
    tax.abs_r_k0,
    tax.taxonomy,
    tax.taxonomy_th4,
    pca.pos_var_q_thesis,
    pca.pos_var_k_thesis,
    pca.pc0_share_pos_q,
    pca.pc0_share_pos_k,
    pca.pos_var_q_exact,
    pca.pos_var_k_exact,
    pca.qk_sep_pc0,
    pca.fisher_pc0,
    pca.qk_acc_pc01,
    -- rotation (docs/metrics/rotation.md)
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
    -- plasticity (docs/metrics/plasticity.md): Gaussian closed form, then the real-query count
    (pl_run.model_id is not null) as has_plasticity,
    coalesce(pl_run.empirical, false) as has_empirical,
    pl_run.pairs,
    {%- for e in plasticity_estimators() %}
    {%- for c in profile %}
    pl.{{ c }}{{ e.suffix }},
    {%- endfor %}
    {%- endfor %}
    {{ gauss_gap('pl.ap_overall', 'pl.ap_overall_empirical') }} as gauss_gap,
    {{ gauss_gap('pl.ap_drop', 'pl.ap_drop_empirical') }} as gauss_gap_drop,
    g.gauss_gap_sampled_se,
    pl_run.q_beta_norm,
    pl_run.q_R2_pos,
    -- the parameter sets (run_config.config_id) these values come from
    pca.config_id as config_id_pca,
    rot.config_id as config_id_rotation,
    pl_run.config_id as config_id_plasticity
from heads as h
join models as m using (model_id)
left join tax using (model_id, layer, q_head)
left join pca using (model_id, layer, q_head)
left join rot using (model_id, layer, q_head)
left join pl_run using (model_id, layer, q_head)
left join pl using (model_id, layer, q_head)
left join gap_se as g using (model_id, layer, q_head)
-- a stable row order for readers that select without ORDER BY
order by model_id, layer, q_head
