-- A job's stream, PostgreSQL's own texts: the reads lock the job's row.

-- The row lock serialises appenders of one job, so their numbering cannot clash.
-- name: job_taken_by
SELECT stream_size FROM jobs
WHERE id = :job_id AND worker_id = :worker_id AND status = 'IN_PROGRESS'
FOR UPDATE;

-- Concurrent readers take turns: each chunk is read once.
-- name: job_stream_cursor
SELECT stream_cursor FROM jobs WHERE id = :job_id FOR UPDATE;
