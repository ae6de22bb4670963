-- Every model-level metric as (model_id, metric, value), named as in the published tables:
-- the point estimates of int_model_metric_replicates (replicate 0: plasticity of both
-- estimators, gaps, rotation, PCA and taxonomy) plus the preferred length-bin values.  Feeds
-- published_comparison and benchmark_joins.
select model_id, metric, value
from {{ ref('int_model_metric_replicates') }}
where replicate = 0
union all
select model_id, metric_name as metric, ap as value
from {{ ref('int_model_length_bins') }}
where is_preferred_metric
union all
select model_id, 'len_bin_total_drop' as metric, change_from_first_bin as value
from {{ ref('int_model_length_bins') }}
where bin_set = 'lbp'
  and bin_index = (select max(bin_index) from {{ ref('plasticity_bins') }} where bin_set = 'lbp')
