-- head_inputs(model): one row per analysable head (it has a q and a k file) with its q rows and
-- k rows as lists in file order (the order `qkwh compute` reads them), their positions, examples
-- and buckets, the model context and the head's sliding window (NULL = full attention).  A row
-- is the argument of the qkwh_<analysis>(head) SQL functions (qkwh.udf).
CREATE OR REPLACE MACRO head_inputs(mid) AS TABLE
WITH q AS (
    SELECT layer, head AS q_head,
           list(vector ORDER BY file_row_number) AS q,
           list(position ORDER BY file_row_number) AS t,
           list(example_id ORDER BY file_row_number) AS q_example,
           list(bucket ORDER BY file_row_number) AS q_bucket
    FROM vectors WHERE model_id = mid AND kind = 'q' GROUP BY layer, head
), k AS (
    SELECT layer, head AS k_head,
           list(vector ORDER BY file_row_number) AS k,
           list(position ORDER BY file_row_number) AS s,
           list(example_id ORDER BY file_row_number) AS k_example,
           list(bucket ORDER BY file_row_number) AS k_bucket
    FROM vectors WHERE model_id = mid AND kind = 'k' GROUP BY layer, head
)
SELECT h.model_id, h.layer, h.q_head, h.k_head,
       q.q, q.t, q.q_example, q.q_bucket, k.k, k.s, k.k_example, k.k_bucket,
       m.context_length, m.bucket_size,
       coalesce(fq.sliding_window, fk.sliding_window) AS sliding_window  -- as qkwh compute (compute_heads.sql)
FROM heads AS h
JOIN models AS m ON m.model_id = h.model_id
JOIN files AS fq ON fq.model_id = h.model_id AND fq.layer = h.layer AND fq.head = h.q_head AND fq.kind = 'q'
JOIN files AS fk ON fk.model_id = h.model_id AND fk.layer = h.layer AND fk.head = h.k_head AND fk.kind = 'k'
JOIN q ON q.layer = h.layer AND q.q_head = h.q_head
JOIN k ON k.layer = h.layer AND k.k_head = h.k_head
WHERE h.model_id = mid AND h.has_k_file
