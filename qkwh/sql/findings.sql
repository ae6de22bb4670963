-- `qkwh findings [MODEL] [--all]`: $1 = model_id or NULL, $2 = include info findings.
SELECT model_id, severity, "check", file, detail
FROM ingest_findings
WHERE ($1 IS NULL OR model_id = $1)
  AND ($2 OR severity <> 'info')
ORDER BY model_id, CASE severity WHEN 'error' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END, "check", file
