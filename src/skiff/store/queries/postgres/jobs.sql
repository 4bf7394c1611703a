-- Jobs, PostgreSQL's own texts: claims that skip rows other replicas hold, locking reads, and
-- lists of ids bound as arrays.

-- One statement: the worker's own record gates the claim (a stopping worker gets nothing) and
-- turns running when it got something. A running worker's row is written too (the same
-- values): that takes its row lock, so a release of its last job waits for this claim and then
-- sees the new job (the adapter's let-go), and a release that idled it first is undone here, as
-- PostgreSQL re-checks the row it waited for. A worker holding a job is never idle.
-- name: claim_jobs
WITH claimed AS (
    UPDATE jobs
    SET status = 'IN_PROGRESS', worker_id = :worker_id, started_at = :now,
        lease_until = :lease_until, attempt = attempt + 1,
        run_deadline = :now::float8 + execution_timeout_ms / 1000.0::float8
    WHERE seq IN (SELECT seq FROM jobs WHERE endpoint_id = :endpoint_id
                  AND status = 'IN_QUEUE' AND worker_id IS NULL AND expires_at > :now
                  ORDER BY low_priority, seq LIMIT :limit FOR UPDATE SKIP LOCKED)
    AND NOT EXISTS (SELECT 1 FROM workers WHERE id = :worker_id
                    AND (state IN ('stopping', 'standby') OR recycle))
    RETURNING *
), busy AS (
    UPDATE workers SET state = 'running', idle_since = NULL
    WHERE id = :worker_id AND state IN ('initializing', 'idle', 'running')
    AND EXISTS (SELECT 1 FROM claimed)
)
SELECT * FROM claimed;

-- The line-up's claim (lineups.sql): the jobs stay queued, on this worker, which the claim's
-- gate must let claim. Its state does not change: it runs the job it just claimed.
-- name: line_up_jobs
UPDATE jobs SET worker_id = :worker_id, lease_until = :lease_until
WHERE seq IN (SELECT seq FROM jobs WHERE endpoint_id = :endpoint_id
              AND status = 'IN_QUEUE' AND worker_id IS NULL AND expires_at > :now
              ORDER BY low_priority, seq LIMIT :limit FOR UPDATE SKIP LOCKED)
AND NOT EXISTS (SELECT 1 FROM workers WHERE id = :worker_id
                AND (state IN ('stopping', 'standby') OR recycle))
RETURNING *;

-- The job's row stays locked until the cancel commits.
-- name: job_before_cancel
SELECT status, worker_id FROM jobs WHERE id = :id AND endpoint_id = :endpoint_id FOR UPDATE;

-- name: renew_leases
UPDATE jobs SET lease_until = :lease_until
WHERE id = ANY(:job_ids::text[]) AND worker_id = :worker_id AND status = 'IN_PROGRESS';

-- name: delete_stream_chunks_of_jobs
DELETE FROM stream_chunks WHERE job_id = ANY(:job_ids::text[]);
