-- Legacy head_component_weights.csv (older attention-plasticity tools): one row per head and head-dimension
-- index; `weight` is the old name of component_weight.  $1 = model id, or NULL for every model.
-- Only the parameter set the marts report (current_config) is written: the filter is the dbt
-- macro is_current_config (dbt_project/macros/current_config.sql), which qkwh.export renders in.
SELECT
    model_id AS model,
    layer,
    q_head,
    k_head,
    component,
    component_weight AS weight,
    component_weight,
    component_r2,
    config_id
FROM plasticity_components AS t
WHERE ($1 IS NULL OR model_id = $1)
  AND {{ is_current_config('t', 'plasticity') }}
ORDER BY model_id, layer, q_head, component
