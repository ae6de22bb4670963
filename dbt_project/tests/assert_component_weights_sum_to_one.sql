-- Each head's component weights sum to 1, so their mean over heads does too (per model and d).
select model_id, d, sum(component_weight) as total
from {{ ref('component_weights_model') }}
group by model_id, d
having abs(sum(component_weight) - 1) > 1e-6
