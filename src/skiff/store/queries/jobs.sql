-- Jobs: the same SQL on SQLite and PostgreSQL (the claim and the cancel's first read differ:
-- sqlite/jobs.sql, postgres/jobs.sql).
--
-- Every change of state is one conditional update guarded by the states a job may move from
-- (``domain.jobs.sources_of``); the lists are written out here, and a unit test holds them to
-- the domain's. A job that becomes final keeps its result until ``retain_until``: now plus its
-- ``retention_ms``. The casts make PostgreSQL compute in double precision as SQLite does.

-- A job's input counts against who submitted it, its result against the endpoint's owner
-- (job_bytes.sql); the owner is given, or read when not (a job inserted by a test).
-- name: insert_job
INSERT INTO jobs (id, endpoint_id, status, input, execution_timeout_ms, ttl_ms, low_priority,
                  webhook, s3_config, submitted_at, expires_at, retention_ms, caller_id,
                  submitter_id, owner_id)
VALUES (:id, :endpoint_id, :status, :input, :execution_timeout_ms, :ttl_ms, :low_priority,
        :webhook, :s3_config, :submitted_at, :expires_at, :retention_ms, :caller_id,
        COALESCE(:caller_id, :owner_id, (SELECT user_id FROM endpoints WHERE id = :endpoint_id)),
        COALESCE(:owner_id, (SELECT user_id FROM endpoints WHERE id = :endpoint_id)));

-- name: get_job
SELECT * FROM jobs WHERE id = :id AND endpoint_id = :endpoint_id;

-- name: get_job_by_id
SELECT * FROM jobs WHERE id = :id;

-- name: list_jobs
SELECT * FROM jobs WHERE endpoint_id = :endpoint_id ORDER BY seq DESC LIMIT :limit;

-- name: list_jobs_before
SELECT * FROM jobs WHERE endpoint_id = :endpoint_id AND seq < :before_seq
ORDER BY seq DESC LIMIT :limit;

-- name: set_job_ttl
UPDATE jobs
SET ttl_ms = :ttl_ms,
    expires_at = submitted_at + CAST(:ttl_ms AS BIGINT) / CAST(1000.0 AS DOUBLE PRECISION)
WHERE id = :id AND endpoint_id = :endpoint_id
RETURNING *;

-- A claim refuses a worker that is stopping, held back or to be recycled (SQLite's claim asks
-- first; PostgreSQL's asks within its one statement).
-- name: worker_refuses_claims
SELECT 1 FROM workers WHERE id = :worker_id AND (state IN ('stopping', 'standby') OR recycle);

-- A worker that got jobs is running (SQLite's claim; PostgreSQL's does it in its statement).
-- name: mark_worker_running
UPDATE workers SET state = 'running', idle_since = NULL
WHERE id = :worker_id AND state IN ('initializing', 'idle');

-- name: record_progress
UPDATE jobs SET output = :output WHERE id = :id AND worker_id = :worker_id
AND status = 'IN_PROGRESS';

-- Guard: the final states' sources within IN_PROGRESS. Without a worker (NULL) any holder's.
-- name: finish_job
UPDATE jobs
SET status = :status, output = :output, error = :error, finished_at = :now,
    retain_until = CAST(:now AS DOUBLE PRECISION)
                   + retention_ms / CAST(1000.0 AS DOUBLE PRECISION),
    lease_until = NULL, run_deadline = NULL
WHERE id = :id AND status IN ('IN_PROGRESS') AND (worker_id = :worker_id OR :worker_id IS NULL)
RETURNING *;

-- Guard: sources_of(CANCELLED).
-- name: cancel_job
UPDATE jobs
SET status = 'CANCELLED', finished_at = :now,
    retain_until = CAST(:now AS DOUBLE PRECISION)
                   + retention_ms / CAST(1000.0 AS DOUBLE PRECISION),
    lease_until = NULL, run_deadline = NULL
WHERE id = :id AND status IN ('IN_PROGRESS', 'IN_QUEUE')
RETURNING *;

-- Guard: sources_of(IN_QUEUE) without IN_PROGRESS (a lost worker's job is requeued apart).
-- name: retry_job
UPDATE jobs
SET status = 'IN_QUEUE', output = NULL, error = NULL, started_at = NULL, finished_at = NULL,
    worker_id = NULL, lease_until = NULL, retain_until = NULL, run_deadline = NULL,
    stream_cursor = 0, stream_size = 0, retries = retries + 1, attempt = 0
WHERE id = :id AND endpoint_id = :endpoint_id AND status IN ('FAILED', 'TIMED_OUT')
RETURNING *;

-- Both priorities named, so that the planners walk the queue's own index (jobs_queue), not
-- every job the endpoint keeps.
-- name: purge_queue
DELETE FROM jobs
WHERE endpoint_id = :endpoint_id AND status = 'IN_QUEUE' AND low_priority IN (FALSE, TRUE);

-- name: time_out_jobs
UPDATE jobs
SET status = 'TIMED_OUT', finished_at = :now,
    retain_until = CAST(:now AS DOUBLE PRECISION)
                   + retention_ms / CAST(1000.0 AS DOUBLE PRECISION),
    lease_until = NULL, run_deadline = NULL,
    error = 'execution timeout exceeded (policy.executionTimeout: '
            || execution_timeout_ms || ' ms)'
WHERE status = 'IN_PROGRESS' AND run_deadline <= :now
  AND (CASE WHEN run_deadline IS NULL OR lease_until < run_deadline THEN lease_until
     ELSE run_deadline END) <= :now
RETURNING *;

-- Jobs past their TTL, and final jobs past their retention.
-- name: expire_jobs
DELETE FROM jobs
WHERE seq IN (SELECT seq FROM jobs WHERE expires_at <= :now
              UNION SELECT seq FROM jobs WHERE retain_until <= :now LIMIT :limit)
RETURNING *;

-- A lost worker's jobs (its lease lapsed, or the worker is gone) fail once they used up their
-- attempts, and go back to the queue otherwise.
-- name: fail_jobs_of_lapsed_leases
UPDATE jobs
SET status = 'FAILED', error = :reason, finished_at = :now,
    retain_until = CAST(:now AS DOUBLE PRECISION)
                   + retention_ms / CAST(1000.0 AS DOUBLE PRECISION),
    lease_until = NULL, run_deadline = NULL
WHERE status = 'IN_PROGRESS' AND lease_until < :now AND attempt >= :max_attempts
  AND (CASE WHEN run_deadline IS NULL OR lease_until < run_deadline THEN lease_until
     ELSE run_deadline END) < :now
RETURNING *;

-- A public model's callers' jobs that a release would requeue, read just before it in its
-- transaction: what their attempt ran is billed with the release (store/operations.py).
-- name: running_calls_of_lapsed_leases
SELECT * FROM jobs
WHERE status = 'IN_PROGRESS' AND lease_until < :now AND caller_id IS NOT NULL
  AND (CASE WHEN run_deadline IS NULL OR lease_until < run_deadline THEN lease_until
     ELSE run_deadline END) < :now;

-- name: running_calls_of_endpoint
SELECT * FROM jobs
WHERE status = 'IN_PROGRESS' AND endpoint_id = :endpoint_id AND caller_id IS NOT NULL;

-- name: running_calls_of_worker
SELECT * FROM jobs
WHERE status = 'IN_PROGRESS' AND worker_id = :worker_id AND caller_id IS NOT NULL;

-- name: requeue_jobs_of_lapsed_leases
UPDATE jobs
SET status = 'IN_QUEUE', worker_id = NULL, started_at = NULL, lease_until = NULL,
    run_deadline = NULL, output = NULL, retries = retries + 1, stream_cursor = 0, stream_size = 0
WHERE status = 'IN_PROGRESS' AND lease_until < :now
  AND (CASE WHEN run_deadline IS NULL OR lease_until < run_deadline THEN lease_until
     ELSE run_deadline END) < :now
RETURNING *;

-- name: fail_jobs_of_worker
UPDATE jobs
SET status = 'FAILED', error = :reason, finished_at = :now,
    retain_until = CAST(:now AS DOUBLE PRECISION)
                   + retention_ms / CAST(1000.0 AS DOUBLE PRECISION),
    lease_until = NULL, run_deadline = NULL
WHERE status = 'IN_PROGRESS' AND worker_id = :worker_id AND attempt >= :max_attempts
RETURNING *;

-- ``refund`` (1 or 0): whether the attempt the worker ran is given back, as for a worker the
-- platform stopped for a reason of its own (its owner disabled) rather than the job's.
-- name: requeue_jobs_of_worker
UPDATE jobs
SET status = 'IN_QUEUE', worker_id = NULL, started_at = NULL, lease_until = NULL,
    run_deadline = NULL, output = NULL, retries = retries + 1, stream_cursor = 0, stream_size = 0,
    attempt = attempt - CAST(:refund AS INTEGER)
WHERE status = 'IN_PROGRESS' AND worker_id = :worker_id
RETURNING *;

-- The jobs a worker holds (running and lined up), and those it was told to stop and has not
-- let go of. Each state is asked on its own, so that each is read from its index (jobs_held,
-- jobs_lined_up): asked together, neither index answers, and the jobs table is read whole.
-- name: jobs_of_worker
SELECT id FROM jobs WHERE worker_id = :worker_id AND status = 'IN_PROGRESS'
UNION SELECT id FROM jobs
WHERE worker_id = :worker_id AND status = 'IN_QUEUE' AND worker_id IS NOT NULL
UNION SELECT job_id FROM stop_signals WHERE worker_id = :worker_id ORDER BY 1;

-- Whether a claim would find anything (the inner select of ``claim_jobs``), asked before a
-- claim that is more than one statement.
-- name: claimable_job
SELECT 1 AS one FROM jobs WHERE endpoint_id = :endpoint_id AND status = 'IN_QUEUE'
AND worker_id IS NULL AND expires_at > :now ORDER BY low_priority, seq LIMIT 1;
