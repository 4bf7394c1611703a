-- Job-stop signals for workers: one per (worker, job), kept until the worker lets go of the
-- job. The same SQL on SQLite and PostgreSQL, but for forgetting a list of jobs.

-- The job may be gone, and the signal there already.
-- name: add_stop_signal
INSERT INTO stop_signals (worker_id, job_id, reason, created_at)
VALUES (:worker_id, :job_id, :reason, :now) ON CONFLICT DO NOTHING;

-- name: take_stop_signals
UPDATE stop_signals SET delivered = TRUE WHERE worker_id = :worker_id AND NOT delivered
RETURNING job_id;

-- name: overdue_stop_workers
SELECT DISTINCT worker_id FROM stop_signals WHERE created_at <= :signalled_before
ORDER BY worker_id;

-- A running worker that holds no job any more is idle (SQLite's let-go; PostgreSQL's locks the
-- worker first and does this in the statement that forgets its signals).
-- name: idle_worker_if_free
UPDATE workers SET state = 'idle', idle_since = :now
WHERE id = :worker_id AND state = 'running'
AND NOT EXISTS (SELECT 1 FROM jobs WHERE worker_id = :worker_id AND status = 'IN_PROGRESS');
