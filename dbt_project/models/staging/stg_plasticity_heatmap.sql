-- Pair-plasticity heatmap accumulators per head, query bucket and distance bins. Non-finite doubles become NULL.
-- Generated from the analysis declarations (qkwh.analyses.registry) by `python -m qkwh.generate`; do not edit.
select
    model_id,
    layer,
    q_head,
    k_head,
    {{ head_label('layer', 'q_head') }} as head_label,
    q_bucket,
    dx_bin,
    dm_bin,
    n,
    {{ finite('sum_pp') }} as sum_pp,
    {{ finite('sum_pp2') }} as sum_pp2,
    config_id
from {{ source('qkwh', 'plasticity_heatmap') }} as t
where {{ is_current_config('t', 'plasticity') }}
