-- Job counts per endpoint without scanning its jobs: the same model as SQLite migration 0005.
-- Every change of a job's status, priority or retries appends a delta (by trigger); the leader
-- folds the deltas into job_counts now and then; a reader adds the two. Appending rather than
-- updating one counter row keeps concurrent claims and finishes from queueing on its lock.
CREATE TABLE job_counts (
    endpoint_id TEXT NOT NULL,
    status TEXT NOT NULL,
    low_priority BOOLEAN NOT NULL,
    n BIGINT NOT NULL,
    retries BIGINT NOT NULL,
    PRIMARY KEY (endpoint_id, status, low_priority)
);

CREATE TABLE job_count_deltas (
    id BIGSERIAL PRIMARY KEY,
    endpoint_id TEXT NOT NULL,
    status TEXT NOT NULL,
    low_priority BOOLEAN NOT NULL,
    n INTEGER NOT NULL,
    retries INTEGER NOT NULL
);
CREATE INDEX job_count_deltas_endpoint ON job_count_deltas (endpoint_id);

INSERT INTO job_counts (endpoint_id, status, low_priority, n, retries)
    SELECT endpoint_id, status, low_priority, COUNT(*), COALESCE(SUM(retries), 0)
    FROM jobs GROUP BY endpoint_id, status, low_priority;

CREATE FUNCTION jobs_count_delta() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO job_count_deltas (endpoint_id, status, low_priority, n, retries)
        VALUES (OLD.endpoint_id, OLD.status, OLD.low_priority, -1, -OLD.retries);
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        INSERT INTO job_count_deltas (endpoint_id, status, low_priority, n, retries)
        VALUES (NEW.endpoint_id, NEW.status, NEW.low_priority, 1, NEW.retries);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs
    FOR EACH ROW EXECUTE FUNCTION jobs_count_delta();
CREATE TRIGGER jobs_count_update AFTER UPDATE OF status, low_priority, retries ON jobs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
        OR OLD.low_priority IS DISTINCT FROM NEW.low_priority
        OR OLD.retries IS DISTINCT FROM NEW.retries)
    EXECUTE FUNCTION jobs_count_delta();
CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs
    FOR EACH ROW EXECUTE FUNCTION jobs_count_delta();
