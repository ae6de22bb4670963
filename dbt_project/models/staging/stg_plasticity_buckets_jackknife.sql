-- Attention plasticity per query bucket, recomputed without one document group (queries and keys alike); a group with no rows in the head is one row with q_bucket = -1 and NULL values. Non-finite doubles become NULL.
-- Generated from the analysis declarations (qkwh.analyses.registry) by `python -m qkwh.generate`; do not edit.
select
    model_id,
    layer,
    q_head,
    k_head,
    {{ head_label('layer', 'q_head') }} as head_label,
    q_bucket,
    doc_group,
    n_queries,
    {{ finite('bucket_position') }} as bucket_position,
    {{ finite('ap_bucket') }} as ap_bucket,
    {{ finite('ap_bucket_empirical') }} as ap_bucket_empirical,
    n_pairs,
    config_id
from {{ source('qkwh', 'plasticity_buckets_jackknife') }} as t
where {{ is_current_config('t', 'uncertainty') }}
  and {{ uses_are_current('t', 'uncertainty', ['pca', 'rotation', 'plasticity']) }}
