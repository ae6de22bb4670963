-- Models whose files hold positions at or beyond the model's context length (columns: model_id,
-- max_position, context_length).  `qkwh ingest` refuses such data; a warehouse ingested by an
-- older qkwh may still hold it.  The analyses cannot place those rows (a bucket_frac above 1), so
-- `qkwh compute` leaves such a model out, and its results never reach the marts of the others.
-- $1 = list of model ids, or NULL for every model.
SELECT m.model_id, max(f.max_position) AS max_position, m.context_length
FROM models AS m
JOIN files AS f USING (model_id)
WHERE m.context_length IS NOT NULL AND ($1 IS NULL OR list_contains($1, m.model_id))
GROUP BY m.model_id, m.context_length
HAVING max(f.max_position) >= m.context_length
ORDER BY m.model_id
