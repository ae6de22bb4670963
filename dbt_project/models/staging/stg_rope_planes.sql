-- Query/key energy and logit contribution of each rotary plane (raw vectors, no centring). Non-finite doubles become NULL.
-- Generated from the analysis declarations (qkwh.analyses.registry) by `python -m qkwh.generate`; do not edit.
select
    model_id,
    layer,
    q_head,
    k_head,
    {{ head_label('layer', 'q_head') }} as head_label,
    plane,
    dim_a,
    dim_b,
    {{ finite('inv_freq') }} as inv_freq,
    {{ finite('wavelength') }} as wavelength,
    band,
    {{ finite('q_energy') }} as q_energy,
    {{ finite('k_energy') }} as k_energy,
    {{ finite('q_energy_share') }} as q_energy_share,
    {{ finite('k_energy_share') }} as k_energy_share,
    {{ finite('logit_mean') }} as logit_mean,
    {{ finite('logit_sd') }} as logit_sd,
    config_id
from {{ source('qkwh', 'rope_planes') }} as t
where {{ is_current_config('t', 'rope') }}
  and {{ uses_are_current('t', 'rope', ['plasticity']) }}
