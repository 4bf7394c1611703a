-- A job's stream, SQLite's own texts: plain reads (one writer runs at a time).

-- name: job_taken_by
SELECT stream_size FROM jobs
WHERE id = :job_id AND worker_id = :worker_id AND status = 'IN_PROGRESS';

-- name: job_stream_cursor
SELECT stream_cursor FROM jobs WHERE id = :job_id;
