-- Job counts per endpoint: the folded counts plus the deltas not folded yet (``job_counts``
-- and ``job_count_deltas``, kept by triggers on ``jobs``), a few rows per endpoint whatever its
-- number of jobs. The same SQL on SQLite and PostgreSQL.

-- name: job_counts
SELECT status, low_priority, SUM(n) AS n, SUM(retries) AS retries FROM (
    SELECT status, low_priority, n, retries FROM job_counts WHERE endpoint_id = :endpoint_id
    UNION ALL
    SELECT status, low_priority, n, retries FROM job_count_deltas
    WHERE endpoint_id = :endpoint_id
) AS c GROUP BY status, low_priority;

-- Asked only when a normal-priority job waits.
-- name: oldest_queued_at
SELECT submitted_at FROM jobs
WHERE endpoint_id = :endpoint_id AND status = 'IN_QUEUE' AND low_priority = FALSE
ORDER BY seq LIMIT 1;

-- name: last_job_count_delta
SELECT MAX(id) AS top FROM job_count_deltas;

-- name: fold_job_counts
INSERT INTO job_counts (endpoint_id, status, low_priority, n, retries)
SELECT endpoint_id, status, low_priority, SUM(n), SUM(retries) FROM job_count_deltas
WHERE id <= :top GROUP BY endpoint_id, status, low_priority
ON CONFLICT (endpoint_id, status, low_priority) DO UPDATE
SET n = job_counts.n + excluded.n, retries = job_counts.retries + excluded.retries;

-- name: delete_folded_job_count_deltas
DELETE FROM job_count_deltas WHERE id <= :top;

-- name: delete_empty_job_counts
DELETE FROM job_counts WHERE n = 0 AND retries = 0;
