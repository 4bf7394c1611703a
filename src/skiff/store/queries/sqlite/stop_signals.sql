-- Stop signals, SQLite's own text: the jobs let go of are one JSON array, or NULL for all.

-- name: forget_stop_signals
DELETE FROM stop_signals WHERE worker_id = :worker_id
AND (:job_ids IS NULL OR job_id IN (SELECT value FROM json_each(:job_ids)));
