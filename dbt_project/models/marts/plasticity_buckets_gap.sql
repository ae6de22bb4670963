-- Gaussian vs empirical plasticity per query bucket (the data of the Gaussian-vs-empirical
-- figure): one row per head and bucket where compute counted the empirical estimator, with both
-- estimates, their gap (Gaussian minus empirical), the paired SE of the gap, and the head's
-- position in the model (depth) for the gap-by-depth view.
select
    b.model_id,
    m.label,
    m.family,
    b.layer,
    b.q_head,
    b.k_head,
    b.head_label,
    b.q_bucket,
    b.bucket_position,
    b.bucket_frac,
    b.n_queries,
    b.n_pairs,
    b.ap_bucket,
    b.ap_bucket_se,
    b.ap_bucket_empirical,
    b.ap_bucket_empirical_se,
    {{ gauss_gap('b.ap_bucket', 'b.ap_bucket_empirical') }} as gauss_gap,
    b.gauss_gap_se,
    {{ depth('b.layer', 'm.num_layers') }} as depth,
    {{ depth_bin('b.layer', 'm.num_layers') }} as depth_bin,
    b.mode,
    b.config_id
from {{ ref('stg_plasticity_buckets') }} as b
join {{ ref('int_models') }} as m using (model_id)
where b.ap_bucket_empirical is not null
-- a stable row order for readers that select without ORDER BY
order by model_id, layer, q_head, q_bucket
