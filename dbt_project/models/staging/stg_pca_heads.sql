-- Combined Q/K PCA per head; the taxonomy class is derived by dbt (head_taxonomy). Non-finite doubles become NULL.
-- Generated from the analysis declarations (qkwh.analyses.registry) by `python -m qkwh.generate`; do not edit.
select
    model_id,
    layer,
    q_head,
    k_head,
    {{ head_label('layer', 'q_head') }} as head_label,
    n_q,
    n_k,
    d,
    {{ finite('ev0') }} as ev0,
    {{ finite('ev1') }} as ev1,
    {{ finite('r_q0') }} as r_q0,
    {{ finite('r_k0') }} as r_k0,
    {{ finite('pos_var_q_thesis') }} as pos_var_q_thesis,
    {{ finite('pos_var_k_thesis') }} as pos_var_k_thesis,
    {{ finite('pc0_share_pos_q') }} as pc0_share_pos_q,
    {{ finite('pc0_share_pos_k') }} as pc0_share_pos_k,
    {{ finite('pos_var_q_exact') }} as pos_var_q_exact,
    {{ finite('pos_var_k_exact') }} as pos_var_k_exact,
    {{ finite('qk_sep_pc0') }} as qk_sep_pc0,
    {{ finite('fisher_pc0') }} as fisher_pc0,
    {{ finite('qk_acc_pc01') }} as qk_acc_pc01,
    config_id
from {{ source('qkwh', 'pca_heads') }} as t
where {{ is_current_config('t', 'pca') }}
