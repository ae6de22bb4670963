-- head_inputs(model): one row per analysable head with its q and k rows as lists (ordered by
-- example and position, as in the files) and the model context: the arguments of the
-- qkwh_pca / qkwh_rotation / qkwh_plasticity SQL functions (qkwh.udf).
CREATE OR REPLACE MACRO head_inputs(mid) AS TABLE
WITH q AS (
    SELECT layer, head AS q_head,
           list(vector ORDER BY example_id, position) AS q,
           list(position ORDER BY example_id, position) AS t,
           list(example_id ORDER BY example_id, position) AS q_example
    FROM vectors WHERE model_id = mid AND kind = 'q' GROUP BY layer, head
), k AS (
    SELECT layer, head AS k_head,
           list(vector ORDER BY example_id, position) AS k,
           list(position ORDER BY example_id, position) AS s,
           list(example_id ORDER BY example_id, position) AS k_example
    FROM vectors WHERE model_id = mid AND kind = 'k' GROUP BY layer, head
)
SELECT h.model_id, h.layer, h.q_head, h.k_head, q.q, q.t, q.q_example, k.k, k.s, k.k_example,
       m.context_length, m.bucket_size
FROM heads AS h
JOIN models AS m ON m.model_id = h.model_id
JOIN q ON q.layer = h.layer AND q.q_head = h.q_head
JOIN k ON k.layer = h.layer AND k.k_head = h.k_head
WHERE h.model_id = mid
