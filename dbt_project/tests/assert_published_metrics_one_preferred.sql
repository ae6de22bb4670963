-- The reference file promises exactly one is_preferred row per (model_id, metric).
select model_id, metric, count(*) filter (where is_preferred) as n_preferred
from {{ ref('published_model_metrics') }}
group by model_id, metric
having count(*) filter (where is_preferred) <> 1
