-- The resampling units of the layer-cluster bootstrap: per model, the layers that hold at least
-- one analysed head (PCA, rotation or plasticity results), with their position in layer order
-- (cluster_index, 1-based: the index into the multiplicity lists of int_bootstrap_draws).
select
    model_id,
    layer,
    cast(row_number() over (partition by model_id order by layer) as integer) as cluster_index,
    count(*) as n_heads
from {{ ref('head_metrics') }}
where has_pca or has_rotation or has_plasticity
group by model_id, layer
