-- Head taxonomy (docs/metrics/pca.md#head-taxonomy) from the canonicalised PC0 correlations of pca_heads (falling back
-- to pca_components pc = 0): the one place a head's class is decided.
with heads as (
    select * from {{ ref('stg_pca_heads') }}
),

pc0 as (
    select model_id, layer, q_head, r_q, r_k, explained_variance_ratio
    from {{ ref('stg_pca_components') }}
    where pc = 0
),

inputs as (
    select
        h.model_id,
        h.layer,
        h.q_head,
        h.k_head,
        h.head_label,
        coalesce(h.r_q0, p.r_q) as r_q0,
        coalesce(h.r_k0, p.r_k) as r_k0,
        coalesce(h.ev0, p.explained_variance_ratio) as ev0,
        h.config_id
    from heads as h
    left join pc0 as p using (model_id, layer, q_head)
    where h.model_id in (select model_id from {{ ref('int_models') }})
)

select
    *,
    abs(r_k0) as abs_r_k0,
    {{ taxonomy_class('r_q0', 'r_k0') }} as taxonomy,
    {{ taxonomy_class_th4('r_q0', 'r_k0') }} as taxonomy_th4
from inputs
