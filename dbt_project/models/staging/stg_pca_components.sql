-- Combined Q/K PCA, one row per head and principal component. Non-finite doubles become NULL.
-- Generated from the analysis declarations (qkwh.analyses.registry) by `python -m qkwh.generate`; do not edit.
select
    model_id,
    layer,
    q_head,
    k_head,
    {{ head_label('layer', 'q_head') }} as head_label,
    pc,
    {{ finite('explained_variance_ratio') }} as explained_variance_ratio,
    {{ finite('r_q') }} as r_q,
    {{ finite('r_k') }} as r_k,
    {{ finite('p_q') }} as p_q,
    {{ finite('p_k') }} as p_k,
    sign_flipped,
    anchor,
    {{ finite('mean_q') }} as mean_q,
    {{ finite('mean_k') }} as mean_k,
    {{ finite('var_q') }} as var_q,
    {{ finite('var_k') }} as var_k,
    config_id
from {{ source('qkwh', 'pca_components') }} as t
where {{ is_current_config('t', 'pca') }}
