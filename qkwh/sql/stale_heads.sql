-- Heads of a model whose computed results no longer match the catalog about to be written:
-- the head vanished, or its q or k file changed.  $1 = model_id; new_files is a registered
-- relation with the new catalog's (layer, head, kind, fingerprint).
SELECT h.layer, h.q_head
FROM heads AS h
LEFT JOIN files AS oq ON oq.model_id = h.model_id AND oq.layer = h.layer AND oq.head = h.q_head AND oq.kind = 'q'
LEFT JOIN files AS ok ON ok.model_id = h.model_id AND ok.layer = h.layer AND ok.head = h.k_head AND ok.kind = 'k'
LEFT JOIN new_files AS nq ON nq.layer = h.layer AND nq.head = h.q_head AND nq.kind = 'q'
LEFT JOIN new_files AS nk ON nk.layer = h.layer AND nk.head = h.k_head AND nk.kind = 'k'
WHERE h.model_id = $1
  AND (nq.fingerprint IS NULL
       OR nq.fingerprint IS DISTINCT FROM oq.fingerprint
       OR nk.fingerprint IS DISTINCT FROM ok.fingerprint)
