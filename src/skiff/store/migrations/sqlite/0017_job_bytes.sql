-- What each user's jobs hold in the database, in bytes, so that one tenant cannot fill the
-- disk every tenant's jobs share (services/job_room.py bounds it per user). A job counts
-- against who submitted it (``submitter_id``): a public model's caller, else the endpoint's
-- owner; a job from before this migration is given its submitter here. What counts is its
-- input, webhook, S3 settings, result or error, and its stream's size, for as long as its row
-- is kept. SQLite keeps the figures in place, by trigger, as it does job counts (0015); the
-- deltas table stays empty, so that the queries both databases share read and fold alike.
-- ``length(CAST(x AS BLOB))`` is the UTF-8 length, read without copying the text.

ALTER TABLE jobs ADD COLUMN submitter_id TEXT;
UPDATE jobs SET submitter_id = COALESCE(
    caller_id, (SELECT user_id FROM endpoints WHERE endpoints.id = jobs.endpoint_id));

CREATE TABLE job_bytes (
    user_id TEXT PRIMARY KEY,
    bytes INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE job_byte_deltas (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id TEXT NOT NULL,
    bytes INTEGER NOT NULL
);
CREATE INDEX job_byte_deltas_user ON job_byte_deltas (user_id);

INSERT INTO job_bytes (user_id, bytes)
SELECT submitter_id,
    SUM(length(CAST(input AS BLOB)) + COALESCE(length(CAST(webhook AS BLOB)), 0)
        + COALESCE(length(CAST(s3_config AS BLOB)), 0)
        + COALESCE(length(CAST(output AS BLOB)), 0)
        + COALESCE(length(CAST(error AS BLOB)), 0) + stream_size)
FROM jobs WHERE submitter_id IS NOT NULL GROUP BY submitter_id;

CREATE TRIGGER jobs_bytes_insert AFTER INSERT ON jobs WHEN NEW.submitter_id IS NOT NULL BEGIN
    INSERT INTO job_bytes (user_id, bytes)
    VALUES (NEW.submitter_id,
        length(CAST(NEW.input AS BLOB)) + COALESCE(length(CAST(NEW.webhook AS BLOB)), 0)
        + COALESCE(length(CAST(NEW.s3_config AS BLOB)), 0)
        + COALESCE(length(CAST(NEW.output AS BLOB)), 0)
        + COALESCE(length(CAST(NEW.error AS BLOB)), 0) + NEW.stream_size)
    ON CONFLICT (user_id) DO UPDATE SET bytes = bytes + excluded.bytes;
END;

-- A job's input, webhook and S3 settings never change: its result, error and stream do (a
-- finish, a progress update, a stream chunk, a retry that clears them).
CREATE TRIGGER jobs_bytes_update AFTER UPDATE OF output, error, stream_size ON jobs
WHEN NEW.submitter_id IS NOT NULL AND (OLD.output IS NOT NEW.output
    OR OLD.error IS NOT NEW.error OR OLD.stream_size IS NOT NEW.stream_size)
BEGIN
    UPDATE job_bytes
    SET bytes = bytes
        + COALESCE(length(CAST(NEW.output AS BLOB)), 0)
        + COALESCE(length(CAST(NEW.error AS BLOB)), 0) + NEW.stream_size
        - COALESCE(length(CAST(OLD.output AS BLOB)), 0)
        - COALESCE(length(CAST(OLD.error AS BLOB)), 0) - OLD.stream_size
    WHERE user_id = NEW.submitter_id;
END;

-- A user whose jobs are all gone keeps no row.
CREATE TRIGGER jobs_bytes_delete AFTER DELETE ON jobs WHEN OLD.submitter_id IS NOT NULL BEGIN
    UPDATE job_bytes
    SET bytes = bytes
        - length(CAST(OLD.input AS BLOB)) - COALESCE(length(CAST(OLD.webhook AS BLOB)), 0)
        - COALESCE(length(CAST(OLD.s3_config AS BLOB)), 0)
        - COALESCE(length(CAST(OLD.output AS BLOB)), 0)
        - COALESCE(length(CAST(OLD.error AS BLOB)), 0) - OLD.stream_size
    WHERE user_id = OLD.submitter_id;
    DELETE FROM job_bytes WHERE user_id = OLD.submitter_id AND bytes = 0;
END;
