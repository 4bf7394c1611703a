-- A job's stream: chunks numbered from 1 and a cursor of the last one read. The same SQL on
-- SQLite and PostgreSQL, but for the reads that lock the job (sqlite/ and postgres/streams.sql).

-- name: last_stream_seq
SELECT COALESCE(MAX(seq), 0) AS seq FROM stream_chunks WHERE job_id = :job_id;

-- name: add_stream_chunk
INSERT INTO stream_chunks (job_id, seq, output, metrics)
VALUES (:job_id, :seq, :output, :metrics);

-- name: stream_chunks_after
SELECT seq, output, metrics FROM stream_chunks WHERE job_id = :job_id AND seq > :cursor
ORDER BY seq;

-- name: add_stream_size
UPDATE jobs SET stream_size = stream_size + :size WHERE id = :job_id;

-- name: set_stream_cursor
UPDATE jobs SET stream_cursor = :cursor WHERE id = :job_id;

-- name: delete_stream_chunks
DELETE FROM stream_chunks WHERE job_id = :job_id;
