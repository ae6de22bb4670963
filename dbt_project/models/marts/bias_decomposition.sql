-- Bias decomposition per model / checkpoint (docs/metrics/rotation.md#what-bias_strength-means): mean mu_q_a, alpha_k,
-- |alpha_k| and bias_strength = mean(mu_q_a * alpha_k) over heads, bias_strength x L_ctx, and
-- for checkpoints the change from the previous checkpoint of the same family.
{%- set tracked = ['mu_q_a', 'alpha_k', 'abs_alpha_k', 'bias_strength', 'bias_strength_ctx'] %}
with base as (
    select
        m.model_id,
        m.family,
        m.context_length,
        m.is_checkpoint,
        m.checkpoint_phase,
        m.checkpoint_step,
        m.checkpoint_order,
        m.trajectory_rank,
        r.n_heads_rotation,
        r.mu_q_a,
        r.alpha_k,
        r.abs_alpha_k,
        r.bias_strength,
        r.bias_strength_ctx,
        r.mu_q_a * r.alpha_k as mu_q_a_times_alpha_k
    from {{ ref('int_models') }} as m
    join {{ ref('int_model_rotation') }} as r using (model_id)
),

checkpoints as (
    select
        model_id,
        lag(model_id) over w as previous_model_id,
        {%- for c in tracked %}
        lag({{ c }}) over w as previous_{{ c }}{{ ',' if not loop.last }}
        {%- endfor %}
    from base
    where is_checkpoint
    window w as (partition by family order by trajectory_rank)
)

select
    b.*,
    c.previous_model_id,
    {%- for c in tracked %}
    b.{{ c }} - c.previous_{{ c }} as delta_{{ c }},
    (b.{{ c }} - c.previous_{{ c }}) / nullif(abs(c.previous_{{ c }}), 0) as rel_change_{{ c }}{{ ',' if not loop.last }}
    {%- endfor %}
from base as b
left join checkpoints as c using (model_id)
-- a stable row order for readers that select without ORDER BY
order by model_id
