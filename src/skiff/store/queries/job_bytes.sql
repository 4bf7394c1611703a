-- What each user's jobs hold in the database, in bytes: the folded figure plus the deltas not
-- folded yet (``job_bytes`` and ``job_byte_deltas``, kept by triggers on ``jobs``: migrations
-- 0017). The same SQL on SQLite, whose deltas table stays empty, and PostgreSQL.

-- name: job_bytes_of_user
SELECT CAST(COALESCE((SELECT bytes FROM job_bytes WHERE user_id = :user_id), 0)
    + COALESCE((SELECT SUM(bytes) FROM job_byte_deltas WHERE user_id = :user_id), 0)
    AS BIGINT) AS bytes;

-- name: last_job_byte_delta
SELECT MAX(id) AS top FROM job_byte_deltas;

-- name: fold_job_bytes
INSERT INTO job_bytes (user_id, bytes)
SELECT user_id, SUM(bytes) FROM job_byte_deltas WHERE id <= :top GROUP BY user_id
ON CONFLICT (user_id) DO UPDATE SET bytes = job_bytes.bytes + excluded.bytes;

-- name: delete_folded_job_byte_deltas
DELETE FROM job_byte_deltas WHERE id <= :top;

-- name: delete_empty_job_bytes
DELETE FROM job_bytes WHERE bytes = 0;
