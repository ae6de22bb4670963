-- Training trajectory (docs/metrics/aggregation.md#rotation-and-pca-summaries): one row per checkpoint (models with a
-- checkpoint phase or step), in chronological order within the family, with the rotation,
-- plasticity and PCA quantities the SmolLM3 tables and figures track.
with ms as (
    select * from {{ ref('model_summary') }}
),

models as (
    select model_id, phase_order, is_checkpoint from {{ ref('int_models') }}
)

select
    ms.family,
    ms.model_id,
    ms.checkpoint_phase,
    m.phase_order,
    ms.checkpoint_step,
    ms.checkpoint_order,
    ms.trajectory_rank,
    ms.context_length,
    ms.n_heads,
    -- rotation (Table 5, figs qk-rotation/09-10)
    ms.bias_strength,
    ms.bias_strength_ctx,
    ms.mu_q_a,
    ms.alpha_k,
    ms.abs_alpha_k,
    ms.abs_r_k_a,
    ms.abs_r_q_a,
    ms.separation_strength,
    ms.plane_var_fraction,
    {%- for c in ['abs_r_k_a', 'separation_strength', 'bias_strength', 'plane_var_fraction'] %}
    r.{{ c }}_q25,
    r.{{ c }}_q50,
    r.{{ c }}_q75,
    {%- endfor %}
    -- plasticity (Table 5)
    ms.ap_overall,
    ms.ap_first_20pct,
    ms.ap_last_20pct,
    ms.ap_drop,
    -- PCA (figs qk-pca/07-09)
    p.r_q0_mean,
    p.r_q0_sd,
    p.r_k0_mean,
    p.r_k0_sd,
    p.ev0_mean,
    p.ev0_sd,
    {%- for t in taxonomy_class_names() %}
    ms.frac_{{ t }}{{ ',' if not loop.last }}
    {%- endfor %}
from ms
join models as m using (model_id)
left join {{ ref('int_model_rotation') }} as r using (model_id)
left join {{ ref('int_model_pca') }} as p using (model_id)
where m.is_checkpoint
-- a stable row order for readers that select without ORDER BY
order by family, trajectory_rank
