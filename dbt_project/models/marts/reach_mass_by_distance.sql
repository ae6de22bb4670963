-- Where the softmax mass goes, per model, query bucket and distance bin
-- (docs/metrics/reach.md): the mean over the model's heads of each head's bucket mean
-- (reach_buckets), beside uniform attention and the exact mass recorded at capture.
select
    b.model_id,
    b.q_bucket,
    b.distance_bin,
    count(*) as n_heads,
    sum(b.n_queries) as n_queries,
    avg(b.mass) as mass,
    avg(b.uniform_mass) as uniform_mass,
    avg(b.mass) / nullif(avg(b.uniform_mass), 0) as lift,
    avg(b.mass_exact) as mass_exact
from {{ ref('stg_reach_buckets') }} as b
group by b.model_id, b.q_bucket, b.distance_bin
order by b.model_id, b.q_bucket, b.distance_bin
