-- Softmax mass per distance bin, averaged over the bucket's queries (Horvitz-Thompson over the sampled keys), beside uniform attention and the exact mass recorded at capture. Non-finite doubles become NULL.
-- Generated from the analysis declarations (qkwh.analyses.registry) by `python -m qkwh.generate`; do not edit.
select
    model_id,
    layer,
    q_head,
    k_head,
    {{ head_label('layer', 'q_head') }} as head_label,
    q_bucket,
    distance_bin,
    n_queries,
    {{ finite('mass') }} as mass,
    {{ finite('uniform_mass') }} as uniform_mass,
    {{ finite('lift') }} as lift,
    {{ finite('mass_exact') }} as mass_exact,
    config_id
from {{ source('qkwh', 'reach_buckets') }} as t
where {{ is_current_config('t', 'reach') }}
