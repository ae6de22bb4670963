-- The resampling units of the layer-cluster bootstrap: per model, the layers that hold at least
-- one analysed head (PCA, rotation, plasticity or RoPE band plasticity results), with their
-- position in layer order (cluster_index, 1-based: the index into the multiplicity lists of
-- int_bootstrap_draws).
with rope_heads as (
    select distinct model_id, layer, q_head from {{ ref('int_rope_band_head_plasticity') }}
)

select
    h.model_id,
    h.layer,
    cast(row_number() over (partition by h.model_id order by h.layer) as integer) as cluster_index,
    count(*) as n_heads
from {{ ref('head_metrics') }} as h
left join rope_heads as r using (model_id, layer, q_head)
where h.has_pca or h.has_rotation or h.has_plasticity or r.model_id is not null
group by h.model_id, h.layer
