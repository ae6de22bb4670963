-- Combined Q/K PCA per head and component; non-finite doubles become NULL.
{%- set doubles = ['explained_variance_ratio', 'r_q', 'r_k', 'p_q', 'p_k',
                   'mean_q', 'mean_k', 'var_q', 'var_k'] %}
select
    model_id,
    layer,
    q_head,
    k_head,
    {{ head_label('layer', 'q_head') }} as head_label,
    pc,
    {%- for c in doubles %}
    {{ finite(c) }} as {{ c }},
    {%- endfor %}
    sign_flipped,
    anchor,
    config_id
from {{ source('qkwh', 'pca_components') }} as t
where {{ is_current_config('t', 'pca') }}
