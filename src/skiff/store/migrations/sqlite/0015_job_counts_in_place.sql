-- SQLite keeps its job counts in place: each change of a job's status, priority or retries
-- updates its endpoint's counter rows in the same statement, by trigger, instead of appending
-- deltas for the leader to fold (0005). Appending is for PostgreSQL, where concurrent writers
-- would queue on one counter row; SQLite has one writer at a time, and an appended delta cost
-- it more than the update it stood for: the row, its index entry, the AUTOINCREMENT sequence,
-- and its later fold and delete, on every change of every job. Reading an endpoint's counts is
-- then its few counter rows, with no deltas to add. The deltas table stays, empty, so that the
-- queries both databases share (job_counts.sql) read and fold alike.

DROP TRIGGER jobs_count_insert;
DROP TRIGGER jobs_count_update;
DROP TRIGGER jobs_count_delete;

-- What was appended and not folded yet, folded now.
INSERT INTO job_counts (endpoint_id, status, low_priority, n, retries)
SELECT endpoint_id, status, low_priority, SUM(n), SUM(retries) FROM job_count_deltas
WHERE true GROUP BY endpoint_id, status, low_priority
ON CONFLICT (endpoint_id, status, low_priority) DO UPDATE
SET n = job_counts.n + excluded.n, retries = job_counts.retries + excluded.retries;
DELETE FROM job_count_deltas;

CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs BEGIN
    INSERT INTO job_counts (endpoint_id, status, low_priority, n, retries)
    VALUES (NEW.endpoint_id, NEW.status, NEW.low_priority, 1, NEW.retries)
    ON CONFLICT (endpoint_id, status, low_priority) DO UPDATE
    SET n = n + 1, retries = retries + excluded.retries;
END;

CREATE TRIGGER jobs_count_update AFTER UPDATE OF status, low_priority, retries ON jobs
WHEN OLD.status IS NOT NEW.status OR OLD.low_priority IS NOT NEW.low_priority
    OR OLD.retries IS NOT NEW.retries
BEGIN
    UPDATE job_counts SET n = n - 1, retries = retries - OLD.retries
    WHERE endpoint_id = OLD.endpoint_id AND status = OLD.status
        AND low_priority = OLD.low_priority;
    INSERT INTO job_counts (endpoint_id, status, low_priority, n, retries)
    VALUES (NEW.endpoint_id, NEW.status, NEW.low_priority, 1, NEW.retries)
    ON CONFLICT (endpoint_id, status, low_priority) DO UPDATE
    SET n = n + 1, retries = retries + excluded.retries;
END;

-- A deleted job (expired, purged, its endpoint deleted) may leave its row at zero: gone then, as
-- the fold removes empty rows on PostgreSQL, so a deleted endpoint leaves no counts behind.
CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs BEGIN
    UPDATE job_counts SET n = n - 1, retries = retries - OLD.retries
    WHERE endpoint_id = OLD.endpoint_id AND status = OLD.status
        AND low_priority = OLD.low_priority;
    DELETE FROM job_counts
    WHERE endpoint_id = OLD.endpoint_id AND status = OLD.status
        AND low_priority = OLD.low_priority AND n = 0 AND retries = 0;
END;
