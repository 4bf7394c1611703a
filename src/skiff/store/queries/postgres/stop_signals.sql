-- Stop signals, PostgreSQL's own text: the jobs let go of are an array, or NULL for all.

-- name: forget_stop_signals
DELETE FROM stop_signals WHERE worker_id = :worker_id
AND (:job_ids::text[] IS NULL OR job_id = ANY(:job_ids::text[]));
