-- One model's part of the `vectors` view when its cataloged files are missing (moved or deleted):
-- no rows, and a query that needs them fails with {message} (DuckDB's error()) instead of breaking
-- every model's queries.  A query filtered on another model_id never evaluates it.
-- Placeholders filled by qkwh.store: {model_id} (literal), {vector_type}, {message} (literal).
SELECT {model_id} AS model_id, CAST(e AS INTEGER) AS layer, CAST(e AS INTEGER) AS head,
       CAST(e AS VARCHAR) AS kind, CAST(e AS INTEGER) AS example_id, CAST(e AS INTEGER) AS bucket,
       CAST(e AS INTEGER) AS position, CAST(e AS {vector_type}) AS vector,
       CAST(e AS INTEGER) AS sliding_window, CAST(e AS BIGINT) AS file_row_number
FROM (SELECT error({message}) AS e) AS missing
WHERE e IS NULL
