-- Jobs, SQLite's own texts. A list of ids is bound as one JSON array (``:job_ids``), read with
-- json_each; PostgreSQL binds an array.

-- The claim's update; the adapter asks worker_refuses_claims before it and runs
-- mark_worker_running after it, in the writer's transaction (one writer: no race).
-- name: claim_jobs
UPDATE jobs
SET status = 'IN_PROGRESS', worker_id = :worker_id, started_at = :now,
    lease_until = :lease_until, attempt = attempt + 1,
    run_deadline = :now + execution_timeout_ms / 1000.0
WHERE seq IN (SELECT seq FROM jobs WHERE endpoint_id = :endpoint_id AND status = 'IN_QUEUE'
              AND worker_id IS NULL AND expires_at > :now
              ORDER BY low_priority, seq LIMIT :limit)
RETURNING *;

-- The line-up's claim (lineups.sql): the jobs stay queued, on this worker. The adapter asks
-- worker_refuses_claims before it.
-- name: line_up_jobs
UPDATE jobs SET worker_id = :worker_id, lease_until = :lease_until
WHERE seq IN (SELECT seq FROM jobs WHERE endpoint_id = :endpoint_id AND status = 'IN_QUEUE'
              AND worker_id IS NULL AND expires_at > :now
              ORDER BY low_priority, seq LIMIT :limit)
RETURNING *;

-- What a cancel needs to know before it: was the job running, and on which worker.
-- name: job_before_cancel
SELECT status, worker_id FROM jobs WHERE id = :id AND endpoint_id = :endpoint_id;

-- name: renew_leases
UPDATE jobs SET lease_until = :lease_until
WHERE id IN (SELECT value FROM json_each(:job_ids)) AND worker_id = :worker_id
AND status = 'IN_PROGRESS';

-- name: delete_stream_chunks_of_jobs
DELETE FROM stream_chunks WHERE job_id IN (SELECT value FROM json_each(:job_ids));
