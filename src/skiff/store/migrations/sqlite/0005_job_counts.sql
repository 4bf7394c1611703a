-- Job counts per endpoint without scanning its jobs. Every change of a job's status, priority
-- or retries appends a delta (by trigger, so no code path can forget one); the leader folds
-- the deltas into job_counts now and then; a reader adds the two. Appending rather than
-- updating one counter row keeps concurrent writers (PostgreSQL) from queueing on it.
CREATE TABLE job_counts (
    endpoint_id TEXT NOT NULL,
    status TEXT NOT NULL,
    low_priority INTEGER NOT NULL,
    n INTEGER NOT NULL,
    retries INTEGER NOT NULL,
    PRIMARY KEY (endpoint_id, status, low_priority)
);

CREATE TABLE job_count_deltas (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    endpoint_id TEXT NOT NULL,
    status TEXT NOT NULL,
    low_priority INTEGER NOT NULL,
    n INTEGER NOT NULL,
    retries INTEGER NOT NULL
);
CREATE INDEX job_count_deltas_endpoint ON job_count_deltas (endpoint_id);

INSERT INTO job_counts (endpoint_id, status, low_priority, n, retries)
    SELECT endpoint_id, status, low_priority, COUNT(*), COALESCE(SUM(retries), 0)
    FROM jobs GROUP BY endpoint_id, status, low_priority;

CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs BEGIN
    INSERT INTO job_count_deltas (endpoint_id, status, low_priority, n, retries)
    VALUES (NEW.endpoint_id, NEW.status, NEW.low_priority, 1, NEW.retries);
END;

CREATE TRIGGER jobs_count_update AFTER UPDATE OF status, low_priority, retries ON jobs
WHEN OLD.status IS NOT NEW.status OR OLD.low_priority IS NOT NEW.low_priority
    OR OLD.retries IS NOT NEW.retries
BEGIN
    INSERT INTO job_count_deltas (endpoint_id, status, low_priority, n, retries)
    VALUES (OLD.endpoint_id, OLD.status, OLD.low_priority, -1, -OLD.retries),
           (NEW.endpoint_id, NEW.status, NEW.low_priority, 1, NEW.retries);
END;

CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs BEGIN
    INSERT INTO job_count_deltas (endpoint_id, status, low_priority, n, retries)
    VALUES (OLD.endpoint_id, OLD.status, OLD.low_priority, -1, -OLD.retries);
END;
