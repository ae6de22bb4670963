-- The head-level scalars of head_metrics (PCA, rotation, plasticity), recomputed without one document group; a group with no rows in the head is one row with metric = 'no_rows' and a NULL value. Non-finite doubles become NULL.
-- Generated from the analysis declarations (qkwh.analyses.registry) by `python -m qkwh.generate`; do not edit.
select
    model_id,
    layer,
    q_head,
    k_head,
    {{ head_label('layer', 'q_head') }} as head_label,
    doc_group,
    metric,
    {{ finite('value') }} as value,
    config_id
from {{ source('qkwh', 'head_jackknife') }} as t
where {{ is_current_config('t', 'uncertainty') }}
  and {{ uses_are_current('t', 'uncertainty', ['pca', 'rotation', 'plasticity']) }}
