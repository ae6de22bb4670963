-- Positional component weights of the query regression per head dimension. Non-finite doubles become NULL.
-- Generated from the analysis declarations (qkwh.analyses.registry) by `python -m qkwh.generate`; do not edit.
select
    model_id,
    layer,
    q_head,
    k_head,
    {{ head_label('layer', 'q_head') }} as head_label,
    component,
    {{ finite('component_r2') }} as component_r2,
    {{ finite('component_weight') }} as component_weight,
    config_id
from {{ source('qkwh', 'plasticity_components') }} as t
where {{ is_current_config('t', 'plasticity') }}
