-- Plasticity per query bucket re-fitted on a band's dims (only) or on all other dims (without), with the head's own plasticity pairs. Non-finite doubles become NULL.
-- Generated from the analysis declarations (qkwh.analyses.registry) by `python -m qkwh.generate`; do not edit.
select
    model_id,
    layer,
    q_head,
    k_head,
    {{ head_label('layer', 'q_head') }} as head_label,
    band,
    variant,
    q_bucket,
    {{ finite('bucket_position') }} as bucket_position,
    {{ finite('bucket_midpoint') }} as bucket_midpoint,
    {{ finite('bucket_frac') }} as bucket_frac,
    n_queries,
    n_eligible_keys,
    n_admissible_pairs,
    n_pairs,
    {{ finite('ap_bucket') }} as ap_bucket,
    {{ finite('ap_bucket_se') }} as ap_bucket_se,
    {{ finite('mean_abs_z') }} as mean_abs_z,
    {{ finite('ap_bucket_empirical') }} as ap_bucket_empirical,
    {{ finite('ap_bucket_empirical_se') }} as ap_bucket_empirical_se,
    {{ finite('gauss_gap_se') }} as gauss_gap_se,
    mode,
    config_id
from {{ source('qkwh', 'rope_band_plasticity') }} as t
where {{ is_current_config('t', 'rope') }}
  and {{ uses_are_current('t', 'rope', ['plasticity']) }}
