-- Per model, the most examples (documents) any one of its files holds (columns: model_id,
-- n_examples): `qkwh compute` warns when the document-group jackknife asks for more groups than
-- this, since the groups beyond it are necessarily empty.
-- $1 = list of model ids, or NULL for every model.
SELECT model_id, max(n_examples) AS n_examples
FROM files
WHERE $1 IS NULL OR list_contains($1, model_id)
GROUP BY model_id
ORDER BY model_id
