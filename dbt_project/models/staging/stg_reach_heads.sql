-- How far the head's softmax reaches, its local, far and sink mass, and the exact counterparts recorded at capture. Non-finite doubles become NULL.
-- Generated from the analysis declarations (qkwh.analyses.registry) by `python -m qkwh.generate`; do not edit.
select
    model_id,
    layer,
    q_head,
    k_head,
    {{ head_label('layer', 'q_head') }} as head_label,
    {{ finite('reach') }} as reach,
    {{ finite('reach_first_20pct') }} as reach_first_20pct,
    {{ finite('reach_last_20pct') }} as reach_last_20pct,
    {{ finite('reach_drop') }} as reach_drop,
    {{ finite('local_mass') }} as local_mass,
    {{ finite('far_mass') }} as far_mass,
    {{ finite('sink_mass') }} as sink_mass,
    {{ finite('mean_ess') }} as mean_ess,
    n_queries_used,
    n_queries_skipped,
    scaling_source,
    {{ finite('reach_exact') }} as reach_exact,
    {{ finite('sink_mass_exact') }} as sink_mass_exact,
    {{ finite('entropy_exact') }} as entropy_exact,
    config_id
from {{ source('qkwh', 'reach_heads') }} as t
where {{ is_current_config('t', 'reach') }}
