-- Head taxonomy (docs/metrics/pca.md#head-taxonomy): one row per head with PCA results, the taxonomy columns of
-- head_metrics (classes decided in int_head_taxonomy).
select
    model_id,
    layer,
    q_head,
    k_head,
    head_label,
    family,
    label,
    depth,
    depth_bin,
    r_q0,
    r_k0,
    abs_r_k0,
    ev0,
    taxonomy,
    taxonomy_th4,
    config_id_pca as config_id
from {{ ref('head_metrics') }}
where has_pca
-- a stable row order for readers that select without ORDER BY
order by model_id, layer, q_head
