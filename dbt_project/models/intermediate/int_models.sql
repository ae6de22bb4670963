-- Ingested models with the registry filling what the catalog lacks (the catalog wins), and
-- the chronological order of checkpoints inside a family (trajectory_rank).
with catalog as (
    select * from {{ ref('stg_models') }}
),

registry as (
    select * from {{ ref('model_registry') }}
),

phases as (
    select * from {{ ref('checkpoint_phases') }}
),

merged as (
    select
        c.model_id,
        coalesce(c.family, r.family) as family,
        coalesce(c.label, c.model_id) as label,
        c.dataset,
        coalesce(c.hf_model, r.hf_model) as hf_model,
        coalesce(c.params_b, r.params_b) as params_b,
        coalesce(c.study, r.study) as study,
        c.in_registry,
        coalesce(c.num_layers, r.num_layers) as num_layers,
        coalesce(c.num_q_heads, r.num_q_heads) as num_q_heads,
        coalesce(c.num_kv_heads, r.num_kv_heads) as num_kv_heads,
        coalesce(c.gqa_ratio, r.gqa_ratio) as gqa_ratio,
        coalesce(c.head_dim, r.head_dim) as head_dim,
        c.context_length,
        c.context_length_rule,
        c.bucket_size,
        coalesce(c.nope_layers, nullif(trim(r.nope_layers), '')) as nope_layers,
        case when c.nope_layers is not null then c.nope_layer_list
             else {{ layer_list('r.nope_layers') }} end as nope_layer_list,
        coalesce(c.cross_attention_layers, nullif(trim(r.cross_attention_layers), ''))
            as cross_attention_layers,
        case when c.cross_attention_layers is not null then c.cross_attention_layer_list
             else {{ layer_list('r.cross_attention_layers') }} end as cross_attention_layer_list,
        coalesce(c.checkpoint_phase, nullif(trim(r.checkpoint_phase), '')) as checkpoint_phase,
        coalesce(c.checkpoint_step, r.checkpoint_step) as checkpoint_step,
        coalesce(c.checkpoint_order, r.checkpoint_order) as checkpoint_order,
        r.claimed_context_length,
        r.n_heads_analyzed as n_heads_published
    from catalog as c
    left join registry as r using (model_id)
),

ordered as (
    select
        m.*,
        p.phase_order,
        (m.checkpoint_phase is not null or m.checkpoint_step is not null) as is_checkpoint
    from merged as m
    left join phases as p using (checkpoint_phase)
)

select
    *,
    case when is_checkpoint then
        row_number() over (
            partition by family, is_checkpoint
            order by checkpoint_order nulls last, phase_order nulls last,
                     checkpoint_step nulls last, model_id
        )
    end as trajectory_rank
from ordered
