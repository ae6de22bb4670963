-- One model's view `vectors_<model_id>` (the `vectors` view is the UNION ALL of them): the parquet
-- files are read in place, never copied.  model_id is a constant so that a query filtered on
-- another model skips this one.
-- Placeholders filled by qkwh.store: {paths} (list literal of the cataloged files, glob characters
-- escaped so each matches exactly its file), {model_id} (literal), {vector_type}.
SELECT {model_id} AS model_id, f.layer, f.head, f.kind,
       p.example_id, p.bucket, p.position,
       CAST(p.vector AS {vector_type}) AS vector,
       CAST(p.sliding_window AS INTEGER) AS sliding_window,
       p.file_row_number                 -- 0-based row of the file (the order qkwh compute reads)
FROM read_parquet({paths}, filename = true, union_by_name = true, file_row_number = true) AS p
JOIN files AS f ON f.path = p.filename AND f.model_id = {model_id}
