-- Line-ups: jobs handed to a worker to run after the one it runs (services/lineup.py). The
-- same SQL on SQLite and PostgreSQL but for the line-up's claim (sqlite/jobs.sql,
-- postgres/jobs.sql). A lined-up job stays IN_QUEUE with its worker recorded; the ``lineups``
-- rows keep the worker's order, and outlive a job cancelled or purged before its turn.

-- name: lineup_top
SELECT COALESCE(MAX(pos), -1) AS top FROM lineups WHERE worker_id = :worker_id;

-- name: add_to_lineup
INSERT INTO lineups (worker_id, pos, job_id) VALUES (:worker_id, :pos, :job_id);

-- name: lineup_of_worker
SELECT pos, job_id FROM lineups WHERE worker_id = :worker_id ORDER BY pos;

-- name: is_lined_up
SELECT 1 FROM lineups WHERE worker_id = :worker_id AND job_id = :job_id;

-- The rows up to the one whose job started (or all that were passed over).
-- name: drop_lineup_through
DELETE FROM lineups WHERE worker_id = :worker_id AND pos <= :pos;

-- name: drop_lineup
DELETE FROM lineups WHERE worker_id = :worker_id;

-- name: drop_lineups_of_endpoint
DELETE FROM lineups WHERE worker_id IN (SELECT id FROM workers WHERE endpoint_id = :endpoint_id);

-- Its turn came: the job starts now, and only now counts an attempt and its execution time.
-- Guard: still queued on this worker (not cancelled, purged or handed back meanwhile).
-- name: start_lined_up_job
UPDATE jobs
SET status = 'IN_PROGRESS', started_at = :now, attempt = attempt + 1,
    run_deadline = CAST(:now AS DOUBLE PRECISION)
                   + execution_timeout_ms / CAST(1000.0 AS DOUBLE PRECISION)
WHERE id = :id AND worker_id = :worker_id AND status = 'IN_QUEUE'
RETURNING *;

-- Does the worker run a job now (one told to stop counts no more)?
-- name: worker_runs_a_job
SELECT 1 FROM jobs WHERE worker_id = :worker_id AND status = 'IN_PROGRESS' LIMIT 1;

-- The worker runs no job and the first job lined up on it is no longer wanted: it has that job
-- queued and starts it on its own, so it must be ended first (services/lineup.py).
-- name: lineup_broken
SELECT 1 FROM lineups l
WHERE l.worker_id = :worker_id
  AND l.pos = (SELECT MIN(pos) FROM lineups WHERE worker_id = :worker_id)
  AND NOT EXISTS (SELECT 1 FROM jobs j
                  WHERE j.id = l.job_id AND j.worker_id = :worker_id AND j.status = 'IN_QUEUE')
  AND NOT EXISTS (SELECT 1 FROM jobs r WHERE r.worker_id = :worker_id AND r.status = 'IN_PROGRESS');

-- A ping that proved the worker holds its jobs keeps its line-up too.
-- name: renew_lineup_leases
UPDATE jobs SET lease_until = :lease_until WHERE worker_id = :worker_id AND status = 'IN_QUEUE';

-- A lost worker's line-up goes back to the queue as it was: it never started.
-- name: unline_jobs_of_worker
UPDATE jobs SET worker_id = NULL, lease_until = NULL
WHERE worker_id = :worker_id AND status = 'IN_QUEUE'
RETURNING *;

-- name: unline_jobs_of_lapsed_leases
UPDATE jobs SET worker_id = NULL, lease_until = NULL
WHERE status = 'IN_QUEUE' AND worker_id IS NOT NULL AND lease_until < :now
RETURNING *;

-- Rows of jobs that went back to the queue (their lease lapsed): no turn is left to come.
-- name: drop_lineups_of_unlined
DELETE FROM lineups WHERE job_id IN (SELECT id FROM jobs WHERE status = 'IN_QUEUE'
                                     AND worker_id IS NULL AND id = lineups.job_id);
