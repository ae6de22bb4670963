-- Complement RoPE rotation planes, one row per head and pair. Non-finite doubles become NULL.
-- Generated from the analysis declarations (qkwh.analyses.registry) by `python -m qkwh.generate`; do not edit.
select
    model_id,
    layer,
    q_head,
    k_head,
    {{ head_label('layer', 'q_head') }} as head_label,
    pair,
    {{ finite('sv_var_share') }} as sv_var_share,
    {{ finite('angle_r') }} as angle_r,
    {{ finite('angle_r_circ') }} as angle_r_circ,
    {{ finite('omega_pair') }} as omega_pair,
    {{ finite('angle_r_circ_pm') }} as angle_r_circ_pm,
    {{ finite('omega_pair_pm') }} as omega_pair_pm,
    {{ finite('qk_acc') }} as qk_acc,
    active,
    config_id
from {{ source('qkwh', 'rotation_pairs') }} as t
where {{ is_current_config('t', 'rotation') }}
