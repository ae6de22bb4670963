-- Columns in the order of qkwh.compute.units.HeadUnit.
-- Heads that can be analysed (they have a q and a k file), with their files and model context.
-- $1 = list of model ids, or NULL for every model.
SELECT h.model_id, h.layer, h.q_head, h.k_head,
       fq.path AS q_path, fk.path AS k_path,
       fq.fingerprint AS q_fingerprint, fk.fingerprint AS k_fingerprint,
       m.context_length, m.bucket_size,
       coalesce(fq.sliding_window, fk.sliding_window) AS sliding_window
FROM heads AS h
JOIN models AS m USING (model_id)
JOIN files AS fq ON fq.model_id = h.model_id AND fq.layer = h.layer AND fq.head = h.q_head AND fq.kind = 'q'
JOIN files AS fk ON fk.model_id = h.model_id AND fk.layer = h.layer AND fk.head = h.k_head AND fk.kind = 'k'
WHERE h.has_k_file AND ($1 IS NULL OR list_contains($1, h.model_id))
ORDER BY h.model_id, h.layer, h.k_head, h.q_head
