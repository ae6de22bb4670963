-- Combined Q/K PCA per head; non-finite doubles become NULL.
{%- set doubles = ['ev0', 'ev1', 'r_q0', 'r_k0', 'pos_var_q_thesis', 'pos_var_k_thesis',
                   'pc0_share_pos_q', 'pc0_share_pos_k', 'pos_var_q_exact', 'pos_var_k_exact',
                   'qk_sep_pc0', 'fisher_pc0', 'qk_acc_pc01'] %}
select
    model_id,
    layer,
    q_head,
    k_head,
    {{ head_label('layer', 'q_head') }} as head_label,
    n_q,
    n_k,
    d,
    {%- for c in doubles %}
    {{ finite(c) }} as {{ c }},
    {%- endfor %}
    config_id
from {{ source('qkwh', 'pca_heads') }} as t
where {{ is_current_config('t', 'pca') }}
