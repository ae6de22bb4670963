-- Positional component weights per head and head dimension (queries only, original basis).
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
