-- Complement rotation planes per head and pair; non-finite doubles become NULL.
{%- set doubles = ['sv_var_share', 'angle_r', 'angle_r_circ', 'omega_pair', 'angle_r_circ_pm',
                   'omega_pair_pm', 'qk_acc'] %}
select
    model_id,
    layer,
    q_head,
    k_head,
    {{ head_label('layer', 'q_head') }} as head_label,
    pair,
    {%- for c in doubles %}
    {{ finite(c) }} as {{ c }},
    {%- endfor %}
    active,
    config_id
from {{ source('qkwh', 'rotation_pairs') }} as t
where {{ is_current_config('t', 'rotation') }}
