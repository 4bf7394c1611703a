-- What each user's jobs hold in the database, in UTF-8 bytes, so that one tenant cannot fill
-- the disk every tenant's jobs share (services/job_room.py bounds it per user):
--
-- * a job's input, webhook and S3 settings count against who submitted it (``submitter_id``:
--   a public model's caller, else the endpoint's owner);
-- * its result, error and stream count against the endpoint's owner (``owner_id``), whose
--   worker wrote them: a model's owner cannot fill its callers' shares;
-- * a pending webhook delivery's payload (a copy of its job's input and result) counts as its
--   job does: what of it the owner's worker wrote (``written_bytes``) against ``owner_id``,
--   the rest against ``user_id`` (the submitter), until the delivery ends and its payload is
--   cleared (webhooks.sql). Deliveries from before this migration count whole against their
--   ``user_id``, from here: they are removed a day after they ended (reaper.py).
--
-- Each counts from the row's insert until its removal. Jobs from before this migration have
-- no submitter and count against no one: they leave within their ttl, and filling in theirs
-- would rewrite every row, on the very disk this guards, as the migration's first act.
-- SQLite keeps the figures in place, by trigger, as it does job counts (0015); the deltas table
-- stays empty, so that the queries both databases share read and fold alike. Every change is
-- an upsert, so that a row dropped at zero comes back. ``length(CAST(x AS BLOB))`` is the UTF-8
-- length, read without copying the text.

ALTER TABLE jobs ADD COLUMN submitter_id TEXT;
ALTER TABLE jobs ADD COLUMN owner_id TEXT;

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

-- Ended deliveries are kept a day without their payload (reaper.py), found by this.
CREATE INDEX webhook_deliveries_ended ON webhook_deliveries (finished_at)
WHERE status <> 'pending';
ALTER TABLE webhook_deliveries ADD COLUMN owner_id TEXT;
ALTER TABLE webhook_deliveries ADD COLUMN written_bytes INTEGER NOT NULL DEFAULT 0;

-- Read only: the deliveries already kept, so that clearing and removing them later takes from
-- their users what they held.
INSERT INTO job_bytes (user_id, bytes)
SELECT user_id, SUM(length(CAST(payload AS BLOB))) FROM webhook_deliveries
GROUP BY user_id HAVING SUM(length(CAST(payload AS BLOB))) <> 0;

CREATE TRIGGER jobs_bytes_insert AFTER INSERT ON jobs WHEN NEW.submitter_id IS NOT NULL BEGIN
    INSERT INTO job_bytes (user_id, bytes)
    VALUES (NEW.submitter_id,
        length(CAST(NEW.input AS BLOB)) + COALESCE(length(CAST(NEW.webhook AS BLOB)), 0)
        + COALESCE(length(CAST(NEW.s3_config AS BLOB)), 0))
    ON CONFLICT (user_id) DO UPDATE SET bytes = bytes + excluded.bytes;
END;

-- Only a re-sealing of the S3 settings changes them (sealing.sql).
CREATE TRIGGER jobs_bytes_update_input AFTER UPDATE OF input, webhook, s3_config ON jobs
WHEN NEW.submitter_id IS NOT NULL
BEGIN
    INSERT INTO job_bytes (user_id, bytes)
    VALUES (NEW.submitter_id,
        length(CAST(NEW.input AS BLOB)) + COALESCE(length(CAST(NEW.webhook AS BLOB)), 0)
        + COALESCE(length(CAST(NEW.s3_config AS BLOB)), 0)
        - length(CAST(OLD.input AS BLOB)) - COALESCE(length(CAST(OLD.webhook AS BLOB)), 0)
        - COALESCE(length(CAST(OLD.s3_config AS BLOB)), 0))
    ON CONFLICT (user_id) DO UPDATE SET bytes = bytes + excluded.bytes;
END;

-- A finish, a progress update, a stream chunk, a retry or requeue that clears them. A claim
-- or a lease's renewal sets none of these columns: the trigger does not fire for them.
CREATE TRIGGER jobs_bytes_update_output AFTER UPDATE OF output, error, stream_size ON jobs
WHEN NEW.owner_id IS NOT NULL AND (OLD.output IS NOT NEW.output
    OR OLD.error IS NOT NEW.error OR OLD.stream_size IS NOT NEW.stream_size)
BEGIN
    INSERT INTO job_bytes (user_id, bytes)
    VALUES (NEW.owner_id,
        COALESCE(length(CAST(NEW.output AS BLOB)), 0)
        + COALESCE(length(CAST(NEW.error AS BLOB)), 0) + NEW.stream_size
        - COALESCE(length(CAST(OLD.output AS BLOB)), 0)
        - COALESCE(length(CAST(OLD.error AS BLOB)), 0) - OLD.stream_size)
    ON CONFLICT (user_id) DO UPDATE SET bytes = bytes + excluded.bytes;
END;

-- A user whose jobs are all gone keeps no row.
CREATE TRIGGER jobs_bytes_delete AFTER DELETE ON jobs WHEN OLD.submitter_id IS NOT NULL BEGIN
    INSERT INTO job_bytes (user_id, bytes)
    VALUES (OLD.submitter_id,
        -(length(CAST(OLD.input AS BLOB)) + COALESCE(length(CAST(OLD.webhook AS BLOB)), 0)
        + COALESCE(length(CAST(OLD.s3_config AS BLOB)), 0)))
    ON CONFLICT (user_id) DO UPDATE SET bytes = bytes + excluded.bytes;
    INSERT INTO job_bytes (user_id, bytes)
    SELECT OLD.owner_id, -(COALESCE(length(CAST(OLD.output AS BLOB)), 0)
        + COALESCE(length(CAST(OLD.error AS BLOB)), 0) + OLD.stream_size)
    WHERE OLD.owner_id IS NOT NULL
    ON CONFLICT (user_id) DO UPDATE SET bytes = bytes + excluded.bytes;
    DELETE FROM job_bytes WHERE user_id IN (OLD.submitter_id, OLD.owner_id) AND bytes = 0;
END;

CREATE TRIGGER webhook_deliveries_bytes_insert AFTER INSERT ON webhook_deliveries BEGIN
    INSERT INTO job_bytes (user_id, bytes)
    VALUES (NEW.user_id, length(CAST(NEW.payload AS BLOB)) - NEW.written_bytes)
    ON CONFLICT (user_id) DO UPDATE SET bytes = bytes + excluded.bytes;
    INSERT INTO job_bytes (user_id, bytes)
    SELECT COALESCE(NEW.owner_id, NEW.user_id), NEW.written_bytes WHERE NEW.written_bytes <> 0
    ON CONFLICT (user_id) DO UPDATE SET bytes = bytes + excluded.bytes;
END;

-- The payload changes once, cleared when the delivery ends: comparing it with '' reads no
-- more than its length, where comparing two copies of it would read both on every retry.
CREATE TRIGGER webhook_deliveries_bytes_update AFTER UPDATE OF payload ON webhook_deliveries
WHEN NEW.payload = '' AND OLD.payload <> ''
BEGIN
    INSERT INTO job_bytes (user_id, bytes)
    VALUES (OLD.user_id, -(length(CAST(OLD.payload AS BLOB)) - OLD.written_bytes))
    ON CONFLICT (user_id) DO UPDATE SET bytes = bytes + excluded.bytes;
    INSERT INTO job_bytes (user_id, bytes)
    SELECT COALESCE(OLD.owner_id, OLD.user_id), -OLD.written_bytes WHERE OLD.written_bytes <> 0
    ON CONFLICT (user_id) DO UPDATE SET bytes = bytes + excluded.bytes;
    DELETE FROM job_bytes
    WHERE user_id IN (OLD.user_id, COALESCE(OLD.owner_id, OLD.user_id)) AND bytes = 0;
END;

CREATE TRIGGER webhook_deliveries_bytes_delete AFTER DELETE ON webhook_deliveries
WHEN OLD.payload <> ''
BEGIN
    INSERT INTO job_bytes (user_id, bytes)
    VALUES (OLD.user_id, -(length(CAST(OLD.payload AS BLOB)) - OLD.written_bytes))
    ON CONFLICT (user_id) DO UPDATE SET bytes = bytes + excluded.bytes;
    INSERT INTO job_bytes (user_id, bytes)
    SELECT COALESCE(OLD.owner_id, OLD.user_id), -OLD.written_bytes WHERE OLD.written_bytes <> 0
    ON CONFLICT (user_id) DO UPDATE SET bytes = bytes + excluded.bytes;
    DELETE FROM job_bytes
    WHERE user_id IN (OLD.user_id, COALESCE(OLD.owner_id, OLD.user_id)) AND bytes = 0;
END;
