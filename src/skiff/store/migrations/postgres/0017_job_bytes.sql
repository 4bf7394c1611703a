-- What each user's jobs hold in the database, in bytes: the same model as SQLite migration
-- 0017 (what counts against whom, and why jobs from before it count against no one), kept as
-- job counts are here (0005): every change appends a delta, by trigger, the leader folds them
-- into job_bytes with the job counts, and a reader adds the two, so that concurrent
-- submissions of one user do not queue on one counter row. ``octet_length`` of a stored text
-- reads its size without fetching or decompressing it.

ALTER TABLE jobs ADD COLUMN submitter_id TEXT;
ALTER TABLE jobs ADD COLUMN owner_id TEXT;

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

-- Ended deliveries are kept a day without their payload (reaper.py), found by this.
CREATE INDEX webhook_deliveries_ended ON webhook_deliveries (finished_at)
WHERE status <> 'pending';
ALTER TABLE webhook_deliveries ADD COLUMN owner_id TEXT;
ALTER TABLE webhook_deliveries ADD COLUMN written_bytes BIGINT NOT NULL DEFAULT 0;

-- Read only: the deliveries already kept, so that clearing and removing them later takes from
-- their users what they held.
INSERT INTO job_bytes (user_id, bytes)
SELECT user_id, SUM(octet_length(payload)) FROM webhook_deliveries
GROUP BY user_id HAVING SUM(octet_length(payload)) <> 0;

CREATE FUNCTION jobs_bytes_delta() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    given BIGINT := 0;   -- the input, webhook and S3 settings: the submitter's
    written BIGINT := 0; -- the result, error and stream: the endpoint owner's
    submitter TEXT;
    owner TEXT;
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        given := given - octet_length(OLD.input) - COALESCE(octet_length(OLD.webhook), 0)
            - COALESCE(octet_length(OLD.s3_config), 0);
        written := written - COALESCE(octet_length(OLD.output), 0)
            - COALESCE(octet_length(OLD.error), 0) - OLD.stream_size;
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        given := given + octet_length(NEW.input) + COALESCE(octet_length(NEW.webhook), 0)
            + COALESCE(octet_length(NEW.s3_config), 0);
        written := written + COALESCE(octet_length(NEW.output), 0)
            + COALESCE(octet_length(NEW.error), 0) + NEW.stream_size;
    END IF;
    IF TG_OP = 'DELETE' THEN
        submitter := OLD.submitter_id;
        owner := OLD.owner_id;
    ELSE
        submitter := NEW.submitter_id;
        owner := NEW.owner_id;
    END IF;
    IF given <> 0 THEN
        INSERT INTO job_byte_deltas (user_id, bytes) VALUES (submitter, given);
    END IF;
    IF written <> 0 AND owner IS NOT NULL THEN
        INSERT INTO job_byte_deltas (user_id, bytes) VALUES (owner, written);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_bytes_insert AFTER INSERT ON jobs
    FOR EACH ROW WHEN (NEW.submitter_id IS NOT NULL) EXECUTE FUNCTION jobs_bytes_delta();
-- A claim or a lease's renewal sets none of these columns: the trigger does not fire for them.
CREATE TRIGGER jobs_bytes_update
    AFTER UPDATE OF input, webhook, s3_config, output, error, stream_size ON jobs
    FOR EACH ROW WHEN (NEW.submitter_id IS NOT NULL AND (OLD.output IS DISTINCT FROM NEW.output
        OR OLD.error IS DISTINCT FROM NEW.error OR OLD.stream_size <> NEW.stream_size
        OR OLD.s3_config IS DISTINCT FROM NEW.s3_config
        OR OLD.webhook IS DISTINCT FROM NEW.webhook))
    EXECUTE FUNCTION jobs_bytes_delta();
CREATE TRIGGER jobs_bytes_delete AFTER DELETE ON jobs
    FOR EACH ROW WHEN (OLD.submitter_id IS NOT NULL) EXECUTE FUNCTION jobs_bytes_delta();

-- What of a delivery's payload its submitter gave and its endpoint's owner's worker wrote.
CREATE FUNCTION webhook_deliveries_bytes_delta() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    d webhook_deliveries;
    sign INTEGER;
BEGIN
    IF TG_OP = 'INSERT' THEN
        d := NEW;
        sign := 1;
    ELSE
        d := OLD;  -- cleared (UPDATE) or removed (DELETE): all it held is given back
        sign := -1;
    END IF;
    INSERT INTO job_byte_deltas (user_id, bytes)
    VALUES (d.user_id, sign * (octet_length(d.payload) - d.written_bytes));
    IF d.written_bytes <> 0 THEN
        INSERT INTO job_byte_deltas (user_id, bytes)
        VALUES (COALESCE(d.owner_id, d.user_id), sign * d.written_bytes);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER webhook_deliveries_bytes_insert AFTER INSERT ON webhook_deliveries
    FOR EACH ROW EXECUTE FUNCTION webhook_deliveries_bytes_delta();
-- The payload changes once, cleared when the delivery ends: comparing it with '' reads no more
-- than its length, where comparing two copies of it would read both on every retry.
CREATE TRIGGER webhook_deliveries_bytes_update AFTER UPDATE OF payload ON webhook_deliveries
    FOR EACH ROW WHEN (NEW.payload = '' AND OLD.payload <> '')
    EXECUTE FUNCTION webhook_deliveries_bytes_delta();
CREATE TRIGGER webhook_deliveries_bytes_delete AFTER DELETE ON webhook_deliveries
    FOR EACH ROW WHEN (OLD.payload <> '') EXECUTE FUNCTION webhook_deliveries_bytes_delta();
