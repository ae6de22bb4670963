-- Which length-bin sets apply to which ingested model (seed plasticity_bin_rules):
-- checkpoint_phase '*' matches every model, otherwise the model's checkpoint_phase must match.
-- A set matched by several rules keeps its highest priority.
select
    m.model_id,
    r.bin_set,
    max(r.priority) as priority
from {{ ref('int_models') }} as m
join {{ ref('plasticity_bin_rules') }} as r
    on r.checkpoint_phase = '*' or r.checkpoint_phase = m.checkpoint_phase
group by m.model_id, r.bin_set
