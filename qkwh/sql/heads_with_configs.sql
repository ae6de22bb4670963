-- Heads (model, layer, query head) with a head_runs row of any of the config_ids $2, among the
-- models $1 (NULL: every model): the heads `qkwh compute --force` recomputes and replaces.
SELECT count(*)
FROM (
    SELECT DISTINCT model_id, layer, q_head
    FROM head_runs
    WHERE ($1 IS NULL OR list_contains($1, model_id)) AND list_contains($2, config_id)
)
