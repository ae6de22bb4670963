-- Per model of $1 (a list of model ids): the most layers any metric of model_metric_ci has a
-- value on, and whether a document-group jackknife reaches its intervals (`qkwh compare` says
-- why a model has no interval, and whether `compute --documents` would add document noise).
SELECT model_id,
       max(n_layers) AS n_layers,
       coalesce(max(n_document_groups), 0) > 0 AS documents
FROM model_metric_ci
WHERE list_contains($1, model_id)
GROUP BY model_id
ORDER BY model_id
