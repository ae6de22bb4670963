-- Cross-check: the class dbt assigns equals the class compute stored in pca_heads, for heads
-- whose PCA run used the same thresholds as this project's vars (or recorded none).
select t.model_id, t.layer, t.q_head, t.r_q0, t.r_k0, t.taxonomy, t.taxonomy_compute
from {{ ref('head_taxonomy') }} as t
left join {{ ref('stg_run_config') }} as c using (config_id)
where t.taxonomy_compute is not null
  and t.taxonomy is distinct from t.taxonomy_compute
  and coalesce(c.taxonomy_high, {{ var('taxonomy_high') }}) = {{ var('taxonomy_high') }}
  and coalesce(c.taxonomy_low, {{ var('taxonomy_low') }}) = {{ var('taxonomy_low') }}
