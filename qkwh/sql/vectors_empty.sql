-- The `vectors` view of an empty warehouse: the right columns, no rows.
SELECT NULL::VARCHAR AS model_id, NULL::INTEGER AS layer, NULL::INTEGER AS head, NULL::VARCHAR AS kind,
       NULL::INTEGER AS example_id, NULL::INTEGER AS bucket, NULL::INTEGER AS position,
       NULL::FLOAT[] AS vector, NULL::INTEGER AS sliding_window,
       NULL::BIGINT AS file_row_number
WHERE false
