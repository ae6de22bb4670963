-- depends_on: {{ ref('plasticity_bins') }}
-- One row per ingested model (docs/metrics/aggregation.md): identity, head counts, PCA, taxonomy, rotation and
-- plasticity summaries, one column per length-bin metric, and the benchmark constants.
{%- set bin_metrics = plasticity_bin_metric_names() %}
with models as (
    select * from {{ ref('int_models') }}
),

catalog_heads as (
    select model_id, count(*) as n_heads, count(*) filter (where has_k_file) as n_heads_analysable
    from {{ ref('stg_heads') }}
    group by model_id
),

-- the parameter set each analysis reports (current_config); the staging views read only its rows
sets as (
    select
        model_id,
        max(config_id) filter (where analysis = 'pca') as config_id_pca,
        max(config_id) filter (where analysis = 'rotation') as config_id_rotation,
        max(config_id) filter (where analysis = 'plasticity') as config_id_plasticity
    from {{ source('qkwh', 'current_config') }}
    group by model_id
),

bins as (
    select
        model_id
        {%- for name in bin_metrics %},
        max(ap) filter (where metric_name = '{{ name }}' and is_preferred_metric) as {{ name }}
        {%- endfor %},
        max(change_from_first_bin) filter (
            where bin_set = 'lbp' and bin_index = (
                select max(bin_index) from {{ ref('plasticity_bins') }} where bin_set = 'lbp'
            )
        ) as len_bin_total_drop
    from {{ ref('int_model_length_bins') }}
    group by model_id
),

layers as (
    select
        model_id,
        count(*) filter (where shows_recovery) as n_layers_recovery,
        count(recovery) as n_layers_with_recovery_value
    from {{ ref('layer_profile') }}
    group by model_id
),

bench as (
    select
        model_id,
        max(score) filter (where benchmark = 'longbench_pro' and mode = 'non-thinking'
                             and context_length_tokens is null) as lbp_overall,
        max(score) filter (where benchmark = 'ruler' and context_length_tokens is null) as ruler_avg,
        max(score) filter (where benchmark = 'ruler' and context_length_tokens = 131072) as ruler_128k
    from {{ ref('benchmark_scores') }}
    group by model_id
)

select
    m.model_id,
    m.family,
    m.label,
    m.dataset,
    m.hf_model,
    m.params_b,
    m.study,
    m.in_registry,
    m.num_layers,
    m.num_q_heads,
    m.num_kv_heads,
    m.gqa_ratio,
    m.head_dim,
    m.context_length,
    m.bucket_size,
    m.checkpoint_phase,
    m.checkpoint_step,
    m.checkpoint_order,
    m.trajectory_rank,
    coalesce(h.n_heads, 0) as n_heads,
    coalesce(p.n_heads_pca, 0) as n_heads_pca,
    coalesce(r.n_heads_rotation, 0) as n_heads_rotation,
    coalesce(pl.n_heads_plasticity, 0) as n_heads_plasticity,
    -- a current set computed for fewer heads than the model's analysable heads (an interrupted or
    -- restricted compute) is partial: its means are over the heads it covers
    coalesce(h.n_heads_analysable, 0) as n_heads_analysable,
    s.config_id_pca,
    s.config_id_rotation,
    s.config_id_plasticity,
    nullif(concat_ws(',',
        case when coalesce(p.n_heads_pca, 0) between 1 and coalesce(h.n_heads_analysable, 0) - 1 then 'pca' end,
        case when coalesce(r.n_heads_rotation, 0) between 1 and coalesce(h.n_heads_analysable, 0) - 1 then 'rotation' end,
        case when coalesce(pl.n_heads_plasticity, 0) between 1 and coalesce(h.n_heads_analysable, 0) - 1
             then 'plasticity' end), '') as partial_analyses,
    -- PCA: per-pc means, head-level means, taxonomy fractions
    {%- for k in range(10) %}
    p.ev_{{ k }},
    p.r_q_{{ k }},
    p.r_k_{{ k }},
    {%- endfor %}
    p.abs_r_k_0,
    p.pos_var_q_thesis,
    p.pos_var_k_thesis,
    p.pc0_share_pos_q,
    p.pc0_share_pos_k,
    p.pos_var_q_exact,
    p.pos_var_k_exact,
    p.qk_sep_pc0,
    p.fisher_pc0,
    p.qk_acc_pc01,
    {%- for t in taxonomy_class_names() %}
    p.frac_{{ t }},
    {%- endfor %}
    -- rotation
    r.n_degenerate,
    r.position_r,
    r.abs_r_q_a,
    r.abs_r_k_a,
    r.abs_alpha_q,
    r.abs_alpha_k,
    r.alpha_k,
    r.mu_q_a,
    r.bias_strength,
    r.bias_strength_median,
    r.frac_bias_positive,
    r.frac_mu_q_a_positive,
    r.bias_strength_ctx,
    r.slope_ratio_kq_median,
    r.separation_strength,
    r.var_frac_a,
    r.var_frac_b,
    r.plane_var_fraction,
    r.frac_var_b_gt_a,
    r.content_var_b,
    r.content_var_b_frac,
    r.max_residual_pos_r,
    r.n_active_pairs,
    r.active_var_frac,
    -- plasticity
    pl.ap_overall,
    {%- for k in range(10) %}
    pl.decile_{{ k }},
    {%- endfor %}
    {%- for k in range(5) %}
    pl.quintile_{{ k }},
    {%- endfor %}
    pl.ap_first_20pct,
    pl.ap_last_20pct,
    pl.ap_drop,
    pl.decile_4_5_mean,
    pl.decile_6_7_mean,
    pl.mid_context_recovery,
    l.n_layers_recovery,
    -- plasticity counted over the bucket's real queries (empirical estimator) and the gaps
    coalesce(pl.n_heads_empirical, 0) as n_heads_empirical,
    pl.ap_overall_empirical,
    {%- for k in range(10) %}
    pl.decile_{{ k }}_empirical,
    {%- endfor %}
    pl.ap_first_20pct_empirical,
    pl.ap_last_20pct_empirical,
    pl.ap_drop_empirical,
    pl.gauss_gap,
    pl.gauss_gap_drop,
    pl.q_beta_norm,
    pl.q_R2_pos,
    {%- for name in bin_metrics %}
    b.{{ name }},
    {%- endfor %}
    b.len_bin_total_drop,
    -- external benchmarks (reference seeds)
    be.lbp_overall,
    be.ruler_avg,
    be.ruler_128k
from models as m
left join catalog_heads as h using (model_id)
left join sets as s using (model_id)
left join {{ ref('int_model_pca') }} as p using (model_id)
left join {{ ref('int_model_rotation') }} as r using (model_id)
left join {{ ref('int_model_plasticity') }} as pl using (model_id)
left join bins as b using (model_id)
left join layers as l using (model_id)
left join bench as be using (model_id)
-- a stable row order for readers that select without ORDER BY
order by model_id
