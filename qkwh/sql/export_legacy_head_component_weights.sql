-- Legacy head_component_weights.csv (older attention-plasticity tools): one row per head and head-dimension
-- index; `weight` is the old name of component_weight.  $1 = model id, or NULL for every model.
-- Only the parameter set the marts report (current_config) is written.
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
  AND EXISTS (SELECT 1 FROM current_config AS cc WHERE cc.model_id = t.model_id
              AND cc.analysis = 'plasticity' AND cc.config_id = t.config_id)
ORDER BY model_id, layer, q_head, component
