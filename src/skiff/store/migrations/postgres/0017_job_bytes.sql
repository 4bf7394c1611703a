-- What each user's jobs hold in the database, in bytes: the same model as SQLite migration
-- 0017, kept as job counts are here (0005): every change appends a delta, by trigger, the
-- leader folds them into job_bytes with the job counts, and a reader adds the two, so that
-- concurrent submissions of one user do not queue on one counter row. ``octet_length`` of a
-- stored text reads its size without fetching or decompressing it.

ALTER TABLE jobs ADD COLUMN submitter_id TEXT;
UPDATE jobs SET submitter_id = COALESCE(
    caller_id, (SELECT user_id FROM endpoints WHERE endpoints.id = jobs.endpoint_id));

CREATE TABLE job_bytes (
    user_id TEXT PRIMARY KEY,
    bytes BIGINT NOT NULL
);

CREATE TABLE job_byte_deltas (
    id BIGSERIAL PRIMARY KEY,
    user_id TEXT NOT NULL,
    bytes BIGINT NOT NULL
);
CREATE INDEX job_byte_deltas_user ON job_byte_deltas (user_id);

INSERT INTO job_bytes (user_id, bytes)
SELECT submitter_id,
    SUM(octet_length(input) + COALESCE(octet_length(webhook), 0)
        + COALESCE(octet_length(s3_config), 0) + COALESCE(octet_length(output), 0)
        + COALESCE(octet_length(error), 0) + stream_size)
FROM jobs WHERE submitter_id IS NOT NULL GROUP BY submitter_id;

CREATE FUNCTION jobs_bytes_delta() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    change BIGINT := 0;
    submitter TEXT;
BEGIN
    IF TG_OP = 'INSERT' THEN
        submitter := NEW.submitter_id;
        change := octet_length(NEW.input) + COALESCE(octet_length(NEW.webhook), 0)
            + COALESCE(octet_length(NEW.s3_config), 0);
    ELSIF TG_OP = 'DELETE' THEN
        submitter := OLD.submitter_id;
        change := -(octet_length(OLD.input) + COALESCE(octet_length(OLD.webhook), 0)
            + COALESCE(octet_length(OLD.s3_config), 0));
    ELSE
        submitter := NEW.submitter_id;
    END IF;
    -- A job's input, webhook and S3 settings never change: its result, error and stream do.
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        change := change - COALESCE(octet_length(OLD.output), 0)
            - COALESCE(octet_length(OLD.error), 0) - OLD.stream_size;
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        change := change + COALESCE(octet_length(NEW.output), 0)
            + COALESCE(octet_length(NEW.error), 0) + NEW.stream_size;
    END IF;
    IF change <> 0 THEN
        INSERT INTO job_byte_deltas (user_id, bytes)
        VALUES (submitter, change);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_bytes_insert AFTER INSERT ON jobs
    FOR EACH ROW WHEN (NEW.submitter_id IS NOT NULL) EXECUTE FUNCTION jobs_bytes_delta();
CREATE TRIGGER jobs_bytes_update AFTER UPDATE OF output, error, stream_size ON jobs
    FOR EACH ROW WHEN (NEW.submitter_id IS NOT NULL AND (OLD.output IS DISTINCT FROM NEW.output
        OR OLD.error IS DISTINCT FROM NEW.error OR OLD.stream_size <> NEW.stream_size))
    EXECUTE FUNCTION jobs_bytes_delta();
CREATE TRIGGER jobs_bytes_delete AFTER DELETE ON jobs
    FOR EACH ROW WHEN (OLD.submitter_id IS NOT NULL) EXECUTE FUNCTION jobs_bytes_delta();
