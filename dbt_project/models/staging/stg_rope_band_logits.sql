-- The band's logit contribution over causal same-example pairs, by distance. Non-finite doubles become NULL.
-- Generated from the analysis declarations (qkwh.analyses.registry) by `python -m qkwh.generate`; do not edit.
select
    model_id,
    layer,
    q_head,
    k_head,
    {{ head_label('layer', 'q_head') }} as head_label,
    band,
    distance_bin,
    n_pairs,
    {{ finite('logit_sum') }} as logit_sum,
    {{ finite('logit_sum_sq') }} as logit_sum_sq,
    {{ finite('logit_mean') }} as logit_mean,
    {{ finite('logit_sd') }} as logit_sd,
    config_id
from {{ source('qkwh', 'rope_band_logits') }} as t
where {{ is_current_config('t', 'rope') }}
  and {{ uses_are_current('t', 'rope', ['plasticity']) }}
